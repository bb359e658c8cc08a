#!/bin/sh
# gpudoctor for Slurm: one script for the Prolog, the Epilog and HealthCheckProgram.
#
#   slurm.conf:
#     Prolog=/etc/slurm/gpudoctor-node-check.sh
#     Epilog=/etc/slurm/gpudoctor-node-check.sh
#     HealthCheckProgram=/etc/slurm/gpudoctor-node-check.sh
#     HealthCheckInterval=300
#     HealthCheckNodeState=ANY
#
# It runs `gpudoctor report --quick` (NVML and host facts: no torch, no CUDA context, well under
# a second) and acts on its exit code (docs/exit-codes.md):
#   4 (a probe failed: lost GPU, uncorrectable ECC, driver too old for torch, ...):
#       Prolog/Epilog: exit 1, so slurmd drains the node (and requeues the job, for a Prolog);
#       HealthCheckProgram: `scontrol update state=drain reason="gpudoctor: ..."`.
#   0 or 3 (healthy, or warnings only): nothing is drained. As HealthCheckProgram it resumes a
#       node that gpudoctor itself drained earlier (its reason starts with "gpudoctor:"); a node
#       drained by anyone else is left alone.
#   anything else (gpudoctor missing, bad arguments, a probe that could not finish): logged, the
#       node is NOT drained: a broken check must not empty a cluster.
# The full report is kept in $GPUDOCTOR_REPORT_DIR (default /var/lib/gpudoctor) for the admins.
#
# Which role it plays: SLURM_SCRIPT_CONTEXT (set by slurmd >= 21.08: prolog_slurmd,
# epilog_slurmd) or the first argument (prolog, epilog, healthcheck); default healthcheck.
set -u
GPUDOCTOR=${GPUDOCTOR:-gpudoctor}
SCONTROL=${SCONTROL:-scontrol}
REPORT_DIR=${GPUDOCTOR_REPORT_DIR:-/var/lib/gpudoctor}
TIMEOUT=${GPUDOCTOR_TIMEOUT:-60}
NODE=${SLURMD_NODENAME:-$(hostname -s)}

case "${1:-${SLURM_SCRIPT_CONTEXT:-healthcheck}}" in
  prolog|prolog_slurmd) role=prolog ;;
  epilog|epilog_slurmd) role=epilog ;;
  *) role=healthcheck ;;
esac

log() { logger -t gpudoctor-slurm "$*" 2>/dev/null || echo "gpudoctor-slurm: $*" >&2; }

mkdir -p "$REPORT_DIR" 2>/dev/null
report="$REPORT_DIR/report-quick.json"
# shellcheck disable=SC2086  # GPUDOCTOR_REPORT_ARGS is a word list on purpose
timeout "$TIMEOUT" "$GPUDOCTOR" report --quick --json -o "$report" ${GPUDOCTOR_REPORT_ARGS:-} >/dev/null 2>"$REPORT_DIR/report-quick.err"
rc=$?

# One line naming what failed, from the JSON report (no jq needed).
first_failure() {
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(next((f["summary"] for p in r["results"] for f in p.get("findings",[]) if f.get("status")=="fail"), r.get("status","fail")))' "$report" 2>/dev/null \
    || echo "GPU check failed"
}

case $rc in
  4)
    reason="gpudoctor: $(first_failure | tr -d '\n' | cut -c1-200)"
    log "$role on $NODE: $reason"
    if [ "$role" = healthcheck ]; then
      "$SCONTROL" update nodename="$NODE" state=drain reason="$reason"
      exit 0
    fi
    echo "$reason" >&2
    exit 1 ;;
  0|3)
    if [ "$role" = healthcheck ]; then
      current=$("$SCONTROL" show node "$NODE" 2>/dev/null | sed -n 's/.*Reason=\(gpudoctor:[^[]*\).*/\1/p')
      if [ -n "$current" ]; then
        log "healthcheck on $NODE: GPU check passes again; resuming (was: $current)"
        "$SCONTROL" update nodename="$NODE" state=resume
      fi
    fi
    exit 0 ;;
  *)
    log "$role on $NODE: gpudoctor could not check the node (exit $rc: see $REPORT_DIR/report-quick.err); not draining"
    exit 0 ;;
esac
