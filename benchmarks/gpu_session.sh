#!/usr/bin/env bash
# Every check that needs a real GPU, in one run (for a lent H100/H200 machine, or any
# CUDA machine). Writes everything under $OUT (default ./gpu-session-out) and packs it into
# one tarball, gpu_session.tgz, plus the console log, so it fits a device call's 8-file limit.
#
# Prepare (on the machine with internet, in the repo root):
#   ../shared/tools/gpu-wheelhouse.sh setuptools wheel     # fills .whl/ (textual, jsonschema, ...)
# Run (device tool: carry [".whl"], timeout_s 600):
#   bash benchmarks/gpu_session.sh
# Then commit, from the tarball: tests/data/<device>_*.json (recording, anonymized reports,
# sweep JSON) and the figures in docs/ with device name, driver and date.
#
# Each step is bounded by `timeout` and failures do not stop the script: a partial run
# still returns what it measured. Nothing here changes clocks, power limits or modes.
set -u
OUT=${OUT:-$PWD/gpu-session-out}
R="$OUT/session"
mkdir -p "$R"
exec > >(tee "$OUT/console.log") 2>&1
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1

if ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/gd-site .whl/*.whl && export PYTHONPATH=/tmp/gd-site
fi
"$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . || { echo "gpu-session: cannot install gpudoctor"; exit 1; }

step() {  # step NAME SECONDS CMD...
  local name=$1 limit=$2; shift 2
  echo "=== $name ($(date -u +%H:%M:%S), limit ${limit}s): $*"
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" > "$R/$name.out" 2> "$R/$name.err"
  local rc=$?
  echo "--- $name: exit $rc in $((SECONDS - t0)) s"
  tail -n 5 "$R/$name.out"
  echo "$name $rc $((SECONDS - t0))" >> "$R/steps.txt"
}

step nvidia_smi 30 nvidia-smi -q
step versions 60 "$PY" -c "import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"
step pytest_gpu 420 "$PY" -m pytest -m gpu -q -p no:cacheprovider -rs
step report_quick 60 "$PY" -m gpudoctor report --quick --json --anonymize -o "$R/report_quick.json"
step report_standard 180 "$PY" -m gpudoctor report --json --anonymize -o "$R/report_standard.json"
step report_full 240 "$PY" benchmarks/full_report.py --out "$R/full"
step record 90 "$PY" -m gpudoctor record -o "$R/recording.json" --seconds 10 --interval 0.5 --anonymize
step bench_mnist 300 "$PY" -m gpudoctor bench mnist --device cuda,cpu --json -o "$R/bench_mnist.json" --csv "$R/bench_mnist.csv"
step distributed 180 "$PY" -m gpudoctor distributed --json -o "$R/distributed.json" --sizes 1M,16M,128M,512M
step hooks_overhead 300 "$PY" benchmarks/hooks_overhead.py --json "$R/hooks_overhead.json"
step quick_vs_gpustat 120 "$PY" benchmarks/quick_vs_gpustat.py -n 20 --json
step tui_cpu 120 "$PY" benchmarks/tui_cpu.py --seconds 30 --json
step tui_cpu_nvitop 120 "$PY" benchmarks/tui_cpu.py --seconds 30 --json --other "nvitop --interval 1"
step watch 30 "$PY" -m gpudoctor watch -n 3 -i 1 --json

tar -C "$OUT" -czf "$OUT/gpu_session.tgz" session
echo "gpu-session: done; $(wc -l < "$R/steps.txt") steps, results in $OUT/gpu_session.tgz"
