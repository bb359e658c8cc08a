#!/usr/bin/env bash
# The GPU check kit: every check that needs a real NVIDIA GPU, as at most two device calls.
# A lent GPU gives 15 minutes of device time in all (each machine start, idle wait and close
# counted, no start with under 4 minutes left), so the kit is two commands, ordered by value:
#
#   first  (one call, at most 360 s)  a real `gpudoctor record` recording, anonymized reports
#          (quick, standard, full with the measured ceilings), GPM on known answers with the
#          cost of a read, cuInit's cost with persistence mode as found, a short `bench mnist`
#          on cuda (recorded as it trains), the hooks' overhead, `distributed` as a world of
#          one (NCCL), `why` on a job training on the GPU
#   rest   (optional, at most 300 s)  the GPU-marked tests, the peers side by side (gpustat,
#          nvitop, the TUI's CPU time against nvitop's), `watch`
#
# Each command stops itself before its call's limit: every step runs under its own time limit,
# cut further to the time left, and a step with no time left is recorded as skipped. A step that
# fails or times out is recorded and the next one runs. Results are re-packed into one tarball
# under $OUT after every step, so a call cut off still returns every step finished before.
#
# Prepare here, in the root of the checkout the device tool sends (docs/gpu-session.md):
#   bash benchmarks/gpu_session_prepare.sh
# (the carried wheels into .whl/: gpudoctor's own wheel built from this tree, and the packages
# the GPU machine's image lacks; .whl/COMMIT), then:
#   run(command="bash benchmarks/gpu_session.sh first", carry=[".whl"], timeout_s=360)
#   run(command="bash benchmarks/gpu_session.sh rest",  carry=[".whl"], timeout_s=300)   # optional
# Each call returns $OUT/gpu_session_CMD.tgz: CMD/STEP.out and CMD/STEP.err for every step,
# CMD/steps.tsv (step, limit, exit status, seconds), CMD/session.tsv, CMD/console.log and the
# result files.
#
#   bash benchmarks/gpu_session.sh --list            the commands, one per line
#   bash benchmarks/gpu_session.sh --steps [CMD]     each step with its limit, the sums, the totals
#   bash benchmarks/gpu_session.sh --smoke CMD       the command with tiny sizes, on any machine
#                                                    (steps that need a GPU run and fail fast)
#
# gpudoctor is installed from its carried wheel (pip --no-index --no-deps --target, never from
# the checkout) and every step runs outside the checkout, so what is checked is what users install.
# Environment: OUT (default ./gpu-session-out), PYTHON (default python3), GPU_SESSION_WORK
# (scratch folder, default a new one under /tmp), GPU_SESSION_WHEELS (default .whl),
# GPU_SESSION_LIMITS ("step=S,step=S": lower those steps' limits), GPU_SESSION_BUDGET_S (end the
# command sooner than its limit); in --smoke only, GPU_SESSION_SMOKE_HANG=STEP replaces that step's
# command with one that never ends (the smoke test's check of the time limits).
# Exit: 0 when the command ran to its end (each step's own status is in steps.tsv), 2 on a bad
# argument, 3 when the set-up failed (one line says what is missing).
# Nothing here changes clocks, power limits, persistence or compute modes, or resets a GPU.
set -u

COMMANDS="first rest"
# The device call's timeout_s for each command, and the most a command may take (issue 40).
FIRST_LIMIT_S=360
REST_LIMIT_S=300
MAX_COMMANDS=2
MARGIN_S=10     # a command ends this long before its call's limit (the last pack, the exit)
KILL_AFTER_S=5  # SIGTERM at a step's limit, SIGKILL this long after
MIN_STEP_S=3    # a step gets at least this much of what is left, else it is skipped
SMOKE_SLACK=4   # --smoke: every limit and the budget this many times longer (a loaded machine
                # without a GPU runs the CPU stand-ins slowly; smoke checks the steps, not their time)

MODE=gpu        # gpu | smoke | steps
# pytest steps load only the plugins named here: the machine's own and the carried wheels' plugins
# (pytest-asyncio, syrupy, ...) would otherwise all auto-load, and one version clash would fail every
# pytest step. The GPU test files need only pytest-timeout (their `timeout` marks and setting).
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTEST_ARGS=(-p pytest_timeout -o addopts= -c "$REPO/pyproject.toml" --rootdir "$REPO" -p no:cacheprovider)
R="" WORK="" SITE="" BIN="" RUN="" WHEELS="" CMD="" DEADLINE=0
PY=${PYTHON:-python3}

# ---------------------------------------------------------------------------- the commands
# big GPU_VALUE SMOKE_VALUE: the size for this mode
big() { if [ "$MODE" = smoke ]; then echo "$2"; else echo "$1"; fi; }

cmd_first() {
  setup 30 torch pynvml
  step nvidia_smi 10 nvidia-smi -q
  step record 15 "$PY" -m gpudoctor record -o "$R/recording.json" --seconds "$(big 6 1)" --interval 0.5 --anonymize
  step report_quick 10 "$PY" -m gpudoctor report --quick --json --anonymize -o "$R/report_quick.json"
  step report_standard 25 "$PY" -m gpudoctor report --json --anonymize -o "$R/report_standard.json"
  # report --full --json, timed, with the measuring probes' figures against their ceilings
  step report_full 85 "$PY" "$REPO/benchmarks/full_report.py" --out "$R/full" --anonymize
  # GPM against known answers: idle, a bf16 GEMM, a loop of tiny kernels, a memory-bound copy
  step gpm_truth 30 "$PY" "$REPO/benchmarks/gpm_truth.py" --seconds 4 --json "$R/gpm_truth.json" $(big "" "--smoke")
  # raw NVML facts that settle the code's assumptions: GPM's real minimum interval, the NVLink
  # version's raw value, instant against averaged power, the PID numbering of the process lists
  step gpu_facts 20 "$PY" "$REPO/benchmarks/gpu_facts.py" --json "$R/gpu_facts.json" $(big "" "--smoke")
  step cuinit 30 "$PY" "$REPO/benchmarks/cuinit_cost.py" --runs "$(big 3 2)" --json "$R/cuinit.json"
  if [ "$MODE" = smoke ]; then
    local sweep=(--device cpu --batch-sizes 100 --workers 0 --modes resident --train-samples 500 --test-samples 100)
  else  # the tutorials' loop against GPU-resident tensors at batch 64, 1000, 10000: 6 runs
    local sweep=(--device cuda --batch-sizes 64,1000,10000 --workers 0 --modes dataloader,resident
                 --train-samples 20000 --test-samples 2000)
  fi
  step bench_mnist 30 bash -c "$RECORDED" bench_mnist "$PY" "$R" "$(big 15 1)" \
    "$PY" -m gpudoctor bench mnist "${sweep[@]}" --json -o "$R/bench_mnist.json" --csv "$R/bench_mnist.csv"
  step hooks_overhead 20 "$PY" "$REPO/benchmarks/hooks_overhead.py" --steps "$(big 20000 200)" \
    --repeats "$(big 2 1)" --json "$R/hooks_overhead.json"
  step distributed 20 "$PY" -m gpudoctor distributed --json -o "$R/distributed.json" --timeout 15 --anonymize \
    $(big "--backend nccl --nproc 1" "--backend gloo --nproc 2 --sizes 4K")
  # `why -- CMD` on the tutorials' loop training on the GPU (py-spy comes in the wheelhouse): it
  # waits for start-up, samples, then stops the job (the step's exit is then the job's: 130 for a Python job stopped by its SIGINT).
  step why_gpu 25 "$PY" -m gpudoctor why --seconds "$(big 6 2)" --wait-start 8 --then stop --json \
    -o "$R/why_gpu.json" -- "$PY" -m gpudoctor bench mnist --device "$(big cuda cpu)" --batch-sizes 64 \
    --workers 0 --modes dataloader --epochs 50
}

# A recording of the GPU while a step's command runs: $1 python, $2 results folder, $3 seconds,
# then the command. The command's exit is the step's.
RECORDED='
py=$1 results=$2 seconds=$3; shift 3
"$py" -m gpudoctor record -o "$results/recording_training.json" --seconds "$seconds" --interval 0.5 \
  --anonymize > "$results/recording_training.log" 2>&1 &
recorder=$!
"$@"
rc=$?
wait "$recorder"
exit $rc'

cmd_rest() {
  setup 30 torch pynvml pytest jsonschema textual psutil -- gpustat nvitop
  # Named files, not `-m gpu` over the tree: a collection error elsewhere cannot cancel them.
  step pytest_gpu 120 "$PY" -m pytest "${PYTEST_ARGS[@]}" -v -rs --continue-on-collection-errors -m gpu \
    --junitxml "$R/pytest_gpu.xml" "$REPO/tests/probes/test_gpu_core.py" "$REPO/tests/probes/test_probes_gpu.py" \
    "$REPO/tests/workload/test_workload_gpu.py" "$REPO/tests/probes/test_distributed_gpu.py" "$REPO/tests/hooks/test_hooks_syncs.py" \
    "$REPO/tests/hooks/test_hooks_sync_waits.py" "$REPO/tests/cli/test_cli.py"
  step quick_vs_gpustat 25 "$PY" "$REPO/benchmarks/quick_vs_gpustat.py" -n "$(big 10 2)" --json
  step quick_vs_nvitop 30 "$PY" "$REPO/benchmarks/quick_vs_nvitop.py" -n "$(big 10 2)" --warmup "$(big 1 0)" \
    --bin "$BIN" --json
  # Both monitors at once, two 15 s windows paired by wall time (gpudoctor's own CPU is in it too).
  step tui_cpu_nvitop 60 "$PY" "$REPO/benchmarks/tui_cpu.py" --side-by-side "$(big 2 1)" --seconds "$(big 15 2)" \
    --warmup "$(big 6 3)" --json --other "nvitop --interval 1"
  step watch 10 "$PY" -m gpudoctor watch -n 3 -i 1 --json
}

command_limit() { case $1 in first) echo "$FIRST_LIMIT_S" ;; rest) echo "$REST_LIMIT_S" ;; esac; }

# ---------------------------------------------------------------------------- machinery
die() { echo "gpu-session: $*" >&2; exit 3; }

pack() {  # the command's folder as one tarball in $OUT, replaced whole (a cut-off call keeps the last)
  tar -C "$WORK" -czf "$OUT/.gpu_session_$CMD.tgz.part" "$CMD" 2>/dev/null \
    && mv -f "$OUT/.gpu_session_$CMD.tgz.part" "$OUT/gpu_session_$CMD.tgz"
}

record_step() {  # record_step NAME LIMIT STATUS SECONDS: one row of steps.tsv, then re-pack
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$R/steps.tsv"
  echo "packed after $1" >> "$R/packed.log"
  pack
}

limit_of() {  # limit_of NAME PLANNED: the planned limit (longer in smoke), or a lower one from GPU_SESSION_LIMITS
  local pair name=$1 limit=$2
  [ "$MODE" = smoke ] && limit=$((limit * SMOKE_SLACK))
  for pair in ${GPU_SESSION_LIMITS:+${GPU_SESSION_LIMITS//,/ }}; do
    if [ "${pair%%=*}" = "$name" ] && [[ "${pair#*=}" =~ ^[0-9]+$ ]] && [ "${pair#*=}" -lt "$limit" ]; then
      limit=${pair#*=}
    fi
  done
  echo "$limit"
}

step() {  # step NAME LIMIT_S CMD...: run CMD under its limit (and the time left), keep its output and status
  local name=$1 limit; limit=$(limit_of "$1" "$2"); shift 2
  if [ "$MODE" = steps ]; then printf '%s\t%s\t%s\n' "$CMD" "$name" "$limit"; return 0; fi
  local left=$((DEADLINE - SECONDS - KILL_AFTER_S))
  if [ "$left" -lt "$MIN_STEP_S" ]; then
    echo "--- $name: skipped, ${left}s left of the command's time"
    echo "skipped: the command's time was spent" > "$R/$name.err"
    record_step "$name" "$limit" skipped 0
    return 0
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$MODE" = smoke ] && [ "${GPU_SESSION_SMOKE_HANG:-}" = "$name" ]; then set -- sleep 86400; fi
  echo "=== $name ($(date -u +%H:%M:%S), limit ${limit}s): $(printf '%s ' "$@" | tr -s '\n ' '  ' | cut -c1-400)"
  local t0=$SECONDS
  # SIGTERM at the limit (gpudoctor then writes what finished and exits 143), SIGKILL 5 s later;
  # run outside the checkout, so `python -m gpudoctor` is the installed wheel.
  (cd "$RUN" && exec timeout --kill-after="$KILL_AFTER_S" "$limit" "$@") < /dev/null > "$R/$name.out" 2> "$R/$name.err"
  local rc=$?
  echo "--- $name: exit $rc in $((SECONDS - t0)) s"
  tail -n 3 "$R/$name.err" | cut -c1-300
  record_step "$name" "$limit" "$rc" "$((SECONDS - t0))"
}

setup() {  # setup LIMIT_S MODULE... [-- PEER_COMMAND...]: the carried wheels, then check them
  local limit; limit=$(limit_of setup "$1"); shift
  local modules=() peers=()
  while [ $# -gt 0 ]; do
    if [ "$1" = "--" ]; then shift; peers=("$@"); break; fi
    modules+=("$1"); shift
  done
  if [ "$MODE" = steps ]; then printf '%s\t%s\t%s\n' "$CMD" setup "$limit"; return 0; fi
  local t0=$SECONDS
  _install "$limit" > "$R/setup.out" 2> "$R/setup.err" || {
    local why; why=$(tail -n 1 "$R/setup.err")
    record_step setup "$limit" 3 "$((SECONDS - t0))"
    die "${why:-set-up failed}"
  }
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH"
  local problem left=$((limit - (SECONDS - t0)))
  problem=$(cd "$RUN" && timeout "$((left > 5 ? left : 5))" "$PY" -c "$CHECK" "$SITE" "${modules[@]}" gpudoctor.probes gpudoctor.cli \
    2>> "$R/setup.err" | tee -a "$R/setup.out" | sed -n 's/^problem: //p')
  [ -n "$problem" ] || grep -q '^gpudoctor ' "$R/setup.out" \
    || problem="the check of the install failed ($PY): $(tail -n 1 "$R/setup.err" | cut -c1-200)"
  local absent_peers="" p
  for p in "${peers[@]}"; do command -v "$p" > /dev/null || absent_peers="$absent_peers $p"; done
  if [ -n "$absent_peers" ] && [ "$MODE" = smoke ]; then
    echo "smoke: peer programs not installed here:$absent_peers (their steps record the failure)" >> "$R/setup.err"
  elif [ -n "$absent_peers" ]; then
    problem="${problem:+$problem; }missing on this machine:$absent_peers"
  fi
  if [ -n "$problem" ]; then
    echo "$problem" >> "$R/setup.err"
    record_step setup "$limit" 3 "$((SECONDS - t0))"
    die "$problem (run benchmarks/gpu_session_prepare.sh here and carry .whl)"
  fi
  # A wheel prepared before the last change would check old code with new tests: said, not fatal.
  local stale
  stale=$({ diff -rq -x __pycache__ -x probes "$REPO/gpudoctor" "$SITE/gpudoctor"
            diff -rq -x __pycache__ "$REPO/probes" "$SITE/gpudoctor/probes"; } 2>&1 | head -n 3 | tr '\n' ' ')
  if [ -n "$stale" ]; then
    echo "gpu-session: WARNING: the carried gpudoctor wheel differs from this tree (prepare again): ${stale:0:300}" \
      | tee -a "$R/setup.err"
  else
    echo "the carried gpudoctor wheel matches this tree" >> "$R/setup.out"
  fi
  _bin_folder "${peers[@]}"
  record_step setup "$limit" 0 "$((SECONDS - t0))"
}

_install() {  # every carried wheel, gpudoctor's own among them, into $SITE: no index, no build
  local wheels=() w
  for w in "$WHEELS"/*.whl; do [ -e "$w" ] && wheels+=("$w"); done
  local own; own=$(find "$WHEELS" -maxdepth 1 -name 'gpudoctor-*.whl' 2>/dev/null | wc -l)
  if [ "$own" != 1 ]; then
    echo "need exactly one gpudoctor wheel in $WHEELS, found $own" >&2
    return 1
  fi
  echo "installing ${#wheels[@]} carried wheels: ${wheels[*]##*/}"
  timeout "$1" "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --disable-pip-version-check --target "$SITE" "${wheels[@]}" \
    || { echo "cannot install the carried wheels in $WHEELS: $(_pip_error)" >&2; return 1; }
}

_pip_error() { grep -i -m1 -E "error|no such|not a supported|invalid" "$R/setup.err" 2>/dev/null | cut -c1-200; }

# The install's check, run outside the checkout: each module importable, gpudoctor from the carried
# wheel (not a checkout or an older install), and the versions that every result depends on.
CHECK='
import importlib.util, os, platform, sys
site, modules = os.path.realpath(sys.argv[1]), sys.argv[2:]
def found(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
missing = [m for m in modules if not found(m)]
if missing:
    print("problem: missing on this machine: " + " ".join(missing))
    sys.exit(0)
import gpudoctor
where = os.path.realpath(gpudoctor.__file__)
if not where.startswith(site + os.sep):
    print(f"problem: gpudoctor imports from {os.path.dirname(where)}, not from the carried wheel")
    sys.exit(0)
print("python", sys.version.split()[0], platform.platform())
print("gpudoctor", gpudoctor.__version__, "from", os.path.dirname(where))
from importlib import metadata
for dist in ("nvidia-ml-py", "rich", "textual", "psutil", "pytest", "setuptools"):
    try:
        print(dist, metadata.version(dist))
    except metadata.PackageNotFoundError:
        print(dist, "not installed")
if "torch" in modules:
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
    print("cuda available", torch.cuda.is_available())
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        print(f"cuda:{i}", p.name, f"sm_{p.major}{p.minor}", p.multi_processor_count, "SMs", p.total_memory >> 20, "MiB")
'

_bin_folder() {  # one folder holding gpudoctor and the peers (quick_vs_nvitop.py --bin)
  mkdir -p "$BIN"
  if [ -x "$SITE/bin/gpudoctor" ]; then  # the console script the wheel's install wrote, as a user runs it
    ln -sf "$SITE/bin/gpudoctor" "$BIN/gpudoctor"
  else
    printf '#!/bin/sh\nexec "%s" -m gpudoctor "$@"\n' "$(command -v "$PY" || echo "$PY")" > "$BIN/gpudoctor"
    chmod +x "$BIN/gpudoctor"
  fi
  local p
  for p in "$@"; do command -v "$p" > /dev/null && ln -sf "$(command -v "$p")" "$BIN/$p"; done
}

list_steps() {  # --steps [CMD]: "command step limit" lines, each command's sum, then the totals
  local cmds=${1:-$COMMANDS} all=0 count=0 c sum limit
  MODE=steps
  for c in $cmds; do
    CMD=$c
    limit=$(command_limit "$c")
    sum=$("cmd_$c" | awk -F'\t' '{s += $3} END {print s + 0}')
    "cmd_$c"
    printf '%s\ttotal\t%s\t(steps; the command ends by %s s, its call limit timeout_s=%s)\n' \
      "$c" "$sum" "$((limit - MARGIN_S))" "$limit"
    all=$((all + limit)) count=$((count + 1))
  done
  if [ -z "${1:-}" ]; then
    printf 'all\tcommands\t%s\t(at most %s; the first at most %s s, the second optional)\n' \
      "$count" "$MAX_COMMANDS" "$FIRST_LIMIT_S"
    printf 'all\ttotal\t%s\t(device seconds of both calls, plus a machine start and idle waits)\n' "$all"
  fi
}

run_command() {
  CMD=$1
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
  [ -d "$WHEELS" ] && WHEELS=$(cd "$WHEELS" && pwd)
  R="$WORK/$CMD"
  SITE="$WORK/site"
  BIN="$WORK/bin"
  RUN="$WORK/run"
  rm -rf "$R" "$SITE" && mkdir -p "$R" "$SITE" "$RUN" || exit 3
  local budget; budget=$(($(command_limit "$CMD") - MARGIN_S))
  [ "$MODE" = smoke ] && budget=$((budget * SMOKE_SLACK))
  if [[ "${GPU_SESSION_BUDGET_S:-}" =~ ^[0-9]+$ ]] && [ "$GPU_SESSION_BUDGET_S" -lt "$budget" ]; then
    budget=$GPU_SESSION_BUDGET_S
  fi
  DEADLINE=$((SECONDS + budget))
  export PYTHONUNBUFFERED=1
  exec > >(tee -a "$R/console.log") 2>&1
  # The device machine's copy of the tree has no .git: the commit comes from $WHEELS/COMMIT,
  # written by the preparation (benchmarks/gpu_session_prepare.sh; .whl is carried).
  local commit
  commit=$(git -C "$REPO" rev-parse HEAD 2>/dev/null || head -c 60 "$WHEELS/COMMIT" 2>/dev/null || true)
  commit=${commit:-unknown}
  echo "gpu-session: $CMD ($MODE) on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ), commit ${commit:0:12}, ${budget}s"
  printf 'command\t%s\nmode\t%s\nstarted\t%s\ncommit\t%s\nbudget_s\t%s\n' "$CMD" "$MODE" \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$commit" "$budget" > "$R/session.tsv"
  printf 'step\tlimit_s\texit\tseconds\n' > "$R/steps.tsv"
  pack
  "cmd_$CMD"
  echo "gpu-session: $CMD done in $SECONDS s; $(($(wc -l < "$R/steps.tsv") - 1)) steps; $OUT/gpu_session_$CMD.tgz"
  pack
}

is_command() { case " $COMMANDS " in *" $1 "*) return 0 ;; esac; return 1; }

usage() {
  echo "usage: bash benchmarks/gpu_session.sh {CMD | --smoke CMD | --list | --steps [CMD]}; commands: $COMMANDS" >&2
  exit 2
}

case "${1:-}" in
  --list) printf '%s\n' $COMMANDS ;;
  --steps) { [ -z "${2:-}" ] || is_command "$2"; } || usage; list_steps "${2:-}" ;;
  --smoke) is_command "${2:-}" || usage; MODE=smoke; run_command "$2" ;;
  -h|--help|"") usage ;;
  *) is_command "$1" || usage; run_command "$1" ;;
esac
