#!/bin/sh
# node-problem-detector custom plugin: gpudoctor's quick check in NPD's plugin contract.
#   exit 0 (OK)      the GPU stack passes (warnings are not node problems: they stay in the report)
#   exit 1 (NonOK)   a probe failed: lost GPU, uncorrectable ECC, driver too old, ...; the node
#                    condition GPUProblem turns True with the first failure as its message
#   exit 2 (Unknown) gpudoctor could not check (not installed, bad arguments, a probe that could
#                    not finish); NPD keeps the condition as it was
# One line on stdout, at most 80 characters (the config's max_output_length), plain text.
set -u
GPUDOCTOR=${GPUDOCTOR:-gpudoctor}
report=$(mktemp) || { echo "gpudoctor: cannot create a temporary file"; exit 2; }
trap 'rm -f "$report"' EXIT
# shellcheck disable=SC2086  # GPUDOCTOR_REPORT_ARGS is a word list on purpose
"$GPUDOCTOR" report --quick --json ${GPUDOCTOR_REPORT_ARGS:-} >"$report" 2>/dev/null
rc=$?
line() { printf '%s\n' "$1" | tr -d '\000-\037' | cut -c1-80; }
case $rc in
  0|3) line "gpudoctor: GPUs healthy"; exit 0 ;;
  4)
    summary=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(next((f["summary"] for p in r["results"] for f in p.get("findings",[]) if f.get("status")=="fail"), "a GPU check failed"))' "$report" 2>/dev/null) \
      || summary="a GPU check failed"
    line "gpudoctor: $summary"; exit 1 ;;
  *) line "gpudoctor could not check the GPUs (exit $rc)"; exit 2 ;;
esac
