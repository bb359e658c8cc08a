#!/usr/bin/env bash
# The GPU check kit: every check that needs a real NVIDIA GPU, in four parts, each of which
# fits one device call (10 minutes with its set-up); all four need at most 25 minutes of GPU
# time, each start counted. Ordered by value: run them in this order, stop when time runs out.
#
#   core      nvidia-smi -q, versions, a real `gpudoctor record` recording, anonymized reports
#             (quick, standard, full) and the GPU test files of the core and the probes
#   measure   benchmarks/full_report.py (report --full wall time and the measured ceilings:
#             device-to-device copy, pinned host-to-device, bf16 matmul), benchmarks/gpm_truth.py
#             (GPM SM/tensor/DRAM activity on kernels whose answer is known) and the other GPU tests
#   workload  bench mnist sweep on the GPU, benchmarks/hooks_overhead.py, distributed, why on a GPU job
#   compare   against the peers: quick_vs_gpustat, quick_vs_nvitop, TUI CPU against nvitop, watch
#
# Prepare once, here, in the repo root (fills the ignored folder .whl/ with the wheels the GPU
# machine lacks: textual, jsonschema, gpustat, nvitop, ..., and py-spy for `why`), and before each
# call write the commit there (the machine's copy of the tree has no .git):
#   ../shared/tools/gpu-wheelhouse.sh py-spy
#   git rev-parse HEAD > .whl/COMMIT
# Run each part with the device tool, one call per part, in this order:
#   run(command="bash benchmarks/gpu_session.sh core",     carry=[".whl"], timeout_s=600)
#   run(command="bash benchmarks/gpu_session.sh measure",  carry=[".whl"], timeout_s=600)
#   run(command="bash benchmarks/gpu_session.sh workload", carry=[".whl"], timeout_s=600)
#   run(command="bash benchmarks/gpu_session.sh compare",  carry=[".whl"], timeout_s=600)
# Each call returns $OUT/gpu_session_PART.tgz: PART/STEP.out and PART/STEP.err for every step,
# PART/steps.tsv (step, limit, exit status, seconds), PART/console.log and the result files.
# The tarball is re-packed after every step, so a part cut off still returns every step before.
# Committing the results: docs/gpu-session.md.
#
#   bash benchmarks/gpu_session.sh --list            the parts, one per line
#   bash benchmarks/gpu_session.sh --steps [PART]    each step with its time limit, the sums
#   bash benchmarks/gpu_session.sh --smoke PART      the part with tiny sizes, on any machine
#                                                    (steps that need a GPU run and fail fast)
#
# Environment: OUT (default ./gpu-session-out), PYTHON (default python3), GPU_SESSION_WORK
# (scratch folder, default a new one under /tmp), GPU_SESSION_WHEELS (default .whl).
# Exit: 0 when the part ran to its end (each step's own status is in steps.tsv), 2 on a bad
# argument, 3 when the set-up failed (one line says what is missing).
# Nothing here changes clocks, power limits or modes.
set -u

PARTS="core measure workload compare"
# Seconds a device call may spend starting a machine, counted once per part in the total.
START_S=60
PART_LIMIT_S=480   # the step limits of one part add up to at most this
TOTAL_LIMIT_S=1500 # all parts, each start included

MODE=gpu           # gpu | smoke | steps
# pytest steps load only the plugins named here: the machine's own and the carried wheels' plugins
# (pytest-asyncio, syrupy, ...) would otherwise all auto-load, and one version clash would fail every
# pytest step. The GPU test files need only pytest-timeout (their `timeout` marks and setting).
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
PYTEST_PLUGINS="-p pytest_timeout -o addopts="  # addopts cleared: the default run's worker options need xdist
R="" WORK="" SITE="" BIN="" WHEELS="" PART=""
PY=${PYTHON:-python3}

# ---------------------------------------------------------------------------- the parts
# big GPU_VALUE SMOKE_VALUE: the size for this mode
big() { if [ "$MODE" = smoke ]; then echo "$2"; else echo "$1"; fi; }

part_core() {
  setup 30 torch pynvml pytest jsonschema
  step nvidia_smi 10 nvidia-smi -q
  step versions 30 "$PY" -c "$VERSIONS"
  step record 45 "$PY" -m gpudoctor record -o "$R/recording.json" --seconds "$(big 10 1)" --interval 0.5 --anonymize
  step report_quick 20 "$PY" -m gpudoctor report --quick --json --anonymize -o "$R/report_quick.json"
  step report_standard 70 "$PY" -m gpudoctor report --json --anonymize -o "$R/report_standard.json"
  step report_full 100 "$PY" -m gpudoctor report --full --json --anonymize -o "$R/report_full.json"
  # Named files, not `-m gpu` over the tree: a collection error elsewhere cannot cancel them.
  step pytest_core 150 "$PY" -m pytest $PYTEST_PLUGINS -v -rs -p no:cacheprovider --continue-on-collection-errors \
    -m gpu --junitxml "$R/pytest_core.xml" tests/test_gpu_core.py tests/test_probes_gpu.py
}

part_measure() {
  setup 30 torch pynvml pytest jsonschema
  step full_report 100 "$PY" benchmarks/full_report.py --out "$R/full"
  # GPM against known answers: idle, a bf16 GEMM, a loop of tiny kernels, a memory-bound copy
  step gpm_truth 60 "$PY" benchmarks/gpm_truth.py --json "$R/gpm_truth.json" $(big "" "--smoke")
  step pytest_gpu 115 "$PY" -m pytest $PYTEST_PLUGINS -v -rs -p no:cacheprovider --continue-on-collection-errors \
    -m gpu --junitxml "$R/pytest_gpu.xml" tests/test_workload_gpu.py tests/test_distributed_gpu.py \
    tests/test_hooks_syncs.py tests/test_cli.py
}

part_workload() {
  setup 30 torch pynvml
  if [ "$MODE" = smoke ]; then
    local sweep=(--device cpu --batch-sizes 100 --workers 0 --modes resident --train-samples 500 --test-samples 100)
  else  # dataloader (the tutorials' loop), tuned and resident at batch 64, 1000, 20000: 15 runs
    local sweep=(--device cuda --batch-sizes 64,1000,20000 --workers 0,4)
  fi
  step bench_mnist 140 "$PY" -m gpudoctor bench mnist "${sweep[@]}" --json -o "$R/bench_mnist.json" \
    --csv "$R/bench_mnist.csv"
  step hooks_overhead 60 "$PY" benchmarks/hooks_overhead.py --steps "$(big 50000 200)" --repeats "$(big 5 1)" \
    --json "$R/hooks_overhead.json"
  step distributed 30 "$PY" -m gpudoctor distributed --json -o "$R/distributed.json" --timeout 45 \
    $(big "" "--backend gloo --nproc 2 --sizes 4K")
  # `why PID` on the tutorials' loop training on the GPU (py-spy comes in the wheelhouse): the job
  # starts, runs 8 s into its loop, is sampled for 10 s, then stopped.
  step why_gpu 35 bash -c "$WHY_ON_A_TRAINING_JOB" why_gpu "$PY" "$R" "$(big cuda cpu)" "$(big 10 2)"
}

# $1 python, $2 results folder, $3 device, $4 seconds sampled
WHY_ON_A_TRAINING_JOB='
"$1" -m gpudoctor bench mnist --device "$3" --batch-sizes 64 --workers 0 --modes dataloader --epochs 50 \
  > "$2/why_target.out" 2>&1 &
job=$!
sleep $(( $4 < 8 ? 2 : 8 ))
"$1" -m gpudoctor why --seconds "$4" --json -o "$2/why_gpu.json" "$job"
rc=$?
kill "$job" 2>/dev/null
wait "$job" 2>/dev/null
exit $rc'


part_compare() {
  setup 30 torch pynvml textual psutil -- gpustat nvitop
  step quick_vs_gpustat 35 "$PY" benchmarks/quick_vs_gpustat.py -n "$(big 20 2)" --json
  step quick_vs_nvitop 45 "$PY" benchmarks/quick_vs_nvitop.py -n "$(big 20 2)" --warmup "$(big 2 0)" --bin "$BIN" --json
  # Both monitors at once, three 20 s windows paired by wall time (gpudoctor's own CPU is in it too).
  step tui_cpu_nvitop 80 "$PY" benchmarks/tui_cpu.py --side-by-side "$(big 3 1)" --seconds "$(big 20 2)" \
    --warmup "$(big 6 3)" --json --other "nvitop --interval 1"
  step watch 15 "$PY" -m gpudoctor watch -n 3 -i 1 --json
}

VERSIONS='
import platform, sys
print("python", sys.version.split()[0], platform.platform())
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
print("cuda available", torch.cuda.is_available())
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"cuda:{i}", p.name, f"sm_{p.major}{p.minor}", p.multi_processor_count, "SMs", p.total_memory >> 20, "MiB")
import gpudoctor
print("gpudoctor", gpudoctor.__version__)
'

# ---------------------------------------------------------------------------- machinery
die() { echo "gpu-session: $*" >&2; exit 3; }

pack() {  # the part's folder as one tarball in $OUT, replaced whole (a cut-off call keeps the last)
  [ "$MODE" = steps ] && return 0
  tar -C "$WORK" -czf "$OUT/.gpu_session_$PART.tgz.part" "$PART" 2>/dev/null \
    && mv -f "$OUT/.gpu_session_$PART.tgz.part" "$OUT/gpu_session_$PART.tgz"
}

record_step() {  # record_step NAME LIMIT STATUS SECONDS
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$R/steps.tsv"
  pack
}

step() {  # step NAME LIMIT_S CMD...: run CMD under its limit, keep its output and status, re-pack
  local name=$1 limit=$2; shift 2
  if [ "$MODE" = steps ]; then printf '%s\t%s\t%s\n' "$PART" "$name" "$limit"; return 0; fi
  echo "=== $name ($(date -u +%H:%M:%S), limit ${limit}s): $*"
  local t0=$SECONDS
  # SIGTERM at the limit (gpudoctor then writes what finished and exits 143), SIGKILL 5 s later.
  timeout --kill-after=5 "$limit" "$@" < /dev/null > "$R/$name.out" 2> "$R/$name.err"
  local rc=$?
  echo "--- $name: exit $rc in $((SECONDS - t0)) s"
  tail -n 3 "$R/$name.err" | cut -c1-300
  record_step "$name" "$limit" "$rc" "$((SECONDS - t0))"
}

setup() {  # setup LIMIT_S MODULE... [-- PEER_COMMAND...]: carried wheels, gpudoctor, then check
  local limit=$1; shift
  local modules=() peers=()
  while [ $# -gt 0 ]; do
    if [ "$1" = "--" ]; then shift; peers=("$@"); break; fi
    modules+=("$1"); shift
  done
  if [ "$MODE" = steps ]; then printf '%s\t%s\t%s\n' "$PART" setup "$limit"; return 0; fi
  local t0=$SECONDS
  _install "$limit" > "$R/setup.out" 2> "$R/setup.err" || {
    local why; why=$(tail -n 1 "$R/setup.err")
    record_step setup "$limit" 3 "$((SECONDS - t0))"
    die "${why:-set-up failed}"
  }
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH"
  local missing
  missing=$(_missing "${modules[@]}" gpudoctor gpudoctor.probes gpudoctor.cli)
  local absent_peers=""
  for p in "${peers[@]}"; do command -v "$p" > /dev/null || absent_peers="$absent_peers $p"; done
  if [ -n "$absent_peers" ] && [ "$MODE" = smoke ]; then
    echo "smoke: peer programs not installed here:$absent_peers (their steps record the failure)" >> "$R/setup.err"
  elif [ -n "$absent_peers" ]; then
    missing="$missing$absent_peers"
  fi
  if [ -n "$missing" ]; then
    echo "missing:$missing" >> "$R/setup.err"
    record_step setup "$limit" 3 "$((SECONDS - t0))"
    die "missing on this machine:$missing (run ../shared/tools/gpu-wheelhouse.sh here and carry .whl)"
  fi
  _bin_folder "${peers[@]}"
  record_step setup "$limit" 0 "$((SECONDS - t0))"
}

_install() {  # the carried wheels into $SITE, then gpudoctor itself (not in smoke: it is there)
  local end=$((SECONDS + $1)) wheels=() w
  left() { local s=$((end - SECONDS)); echo $((s > 1 ? s : 1)); }  # both installs share the limit
  for w in "$WHEELS"/*.whl; do [ -e "$w" ] && wheels+=("$w"); done
  if [ ${#wheels[@]} -gt 0 ]; then
    timeout "$(left)" "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" "${wheels[@]}" \
      || { echo "cannot install the carried wheels in $WHEELS: $(_pip_error)" >&2; return 1; }
  else
    echo "no carried wheels in $WHEELS"
  fi
  if [ "$MODE" != smoke ]; then
    PIP_BREAK_SYSTEM_PACKAGES=1 timeout "$(left)" "$PY" -m pip install -q --no-index --no-deps \
      --no-build-isolation -e . \
      || { echo "cannot install gpudoctor from this checkout (pip install -e .): $(_pip_error)" >&2; return 1; }
  fi
}

_pip_error() { grep -i -m1 -E "error|no such|not a supported" "$R/setup.err" 2>/dev/null | cut -c1-200; }

_missing() {  # the modules of "$@" that cannot be imported, space-separated with a leading space
  "$PY" - "$@" <<'EOF' 2>/dev/null || echo " python($PY)"
import importlib.util, sys
missing = []
for name in sys.argv[1:]:
    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        missing.append(name)
print("".join(" " + m for m in missing))
EOF
}

_bin_folder() {  # one folder holding gpudoctor and the peers (quick_vs_nvitop.py --bin)
  mkdir -p "$BIN"
  local script
  script=$("$PY" -c 'import os, sys; print(os.path.join(os.path.dirname(sys.executable), "gpudoctor"))')
  if [ -x "$script" ]; then  # the console script that `pip install -e .` wrote, as a user runs it
    ln -sf "$script" "$BIN/gpudoctor"
  else
    printf '#!/bin/sh\nexec "%s" -m gpudoctor "$@"\n' "$(command -v "$PY" || echo "$PY")" > "$BIN/gpudoctor"
    chmod +x "$BIN/gpudoctor"
  fi
  local p
  for p in "$@"; do command -v "$p" > /dev/null && ln -sf "$(command -v "$p")" "$BIN/$p"; done
}

list_steps() {  # --steps [PART]: "part step limit" lines, then the sums
  local parts=${1:-$PARTS} total=0 part sum
  MODE=steps
  for part in $parts; do
    PART=$part
    sum=$("part_$part" | awk -F'\t' '{s += $3} END {print s + 0}')
    "part_$part"
    printf '%s\ttotal\t%s\t(at most %s)\n' "$part" "$sum" "$PART_LIMIT_S"
    total=$((total + sum + START_S))
  done
  if [ -z "${1:-}" ]; then
    printf 'all\ttotal\t%s\t(with %s s to start each part; at most %s)\n' "$total" "$START_S" "$TOTAL_LIMIT_S"
  fi
}

run_part() {
  PART=$1
  OUT=${OUT:-$PWD/gpu-session-out}
  mkdir -p "$OUT" || exit 3
  OUT=$(cd "$OUT" && pwd)
  if [ -n "${GPU_SESSION_WORK:-}" ]; then
    WORK=$GPU_SESSION_WORK
  else
    WORK=$(mktemp -d /tmp/gpu-session.XXXXXX) || exit 3
    trap 'rm -rf "$WORK"' EXIT  # everything is in the tarball
  fi
  WHEELS=${GPU_SESSION_WHEELS:-.whl}
  R="$WORK/$PART"
  SITE="$WORK/site"
  BIN="$WORK/bin"
  rm -rf "$R" && mkdir -p "$R" "$SITE" || exit 3
  export PYTHONUNBUFFERED=1
  exec > >(tee -a "$R/console.log") 2>&1
  # The device machine's copy of the tree has no .git: the commit comes from $WHEELS/COMMIT,
  # written here before each call (git rev-parse HEAD > .whl/COMMIT; .whl is carried).
  local commit
  commit=$(git rev-parse HEAD 2>/dev/null || head -c 40 "$WHEELS/COMMIT" 2>/dev/null || true)
  commit=${commit:-unknown}
  echo "gpu-session: part $PART ($MODE) on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ), commit ${commit:0:12}"
  printf 'part\t%s\nmode\t%s\nstarted\t%s\ncommit\t%s\n' "$PART" "$MODE" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    "$commit" > "$R/session.tsv"
  printf 'step\tlimit_s\texit\tseconds\n' > "$R/steps.tsv"
  pack
  "part_$PART"
  echo "gpu-session: part $PART done; $(($(wc -l < "$R/steps.tsv") - 1)) steps; $OUT/gpu_session_$PART.tgz"
  pack
}

is_part() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }

usage() {
  echo "usage: bash benchmarks/gpu_session.sh {PART | --smoke PART | --list | --steps [PART]}; parts: $PARTS" >&2
  exit 2
}

case "${1:-}" in
  --list) printf '%s\n' $PARTS ;;
  --steps) { [ -z "${2:-}" ] || is_part "$2"; } || usage; list_steps "${2:-}" ;;
  --smoke) is_part "${2:-}" || usage; MODE=smoke; run_part "$2" ;;
  -h|--help|"") usage ;;
  *) is_part "$1" || usage; run_part "$1" ;;
esac
