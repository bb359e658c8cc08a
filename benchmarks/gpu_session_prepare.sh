#!/usr/bin/env bash
# Prepares the GPU check kit's carried wheels, here (with a package index), for a GPU machine that
# has none. Run it in the root of the checkout the device tool sends, after committing:
#
#   bash benchmarks/gpu_session_prepare.sh
#
# It fills the ignored folder .whl/ (GPU_SESSION_WHEELS) with:
# - gpudoctor's own wheel, built here from the files that travel (tracked, and untracked but not
#   ignored), so the GPU machine installs it with `pip --no-index --no-deps` and never builds it:
#   its setuptools may be older than the >= 77 that pyproject.toml's licence string needs;
# - the Python 3.12 x86-64 wheels the GPU machine's image lacks, from the shared wheelhouse script
#   (WHEELHOUSE, default ../shared/tools/gpu-wheelhouse.sh): textual and its needs, jsonschema,
#   gpustat, nvitop, and the extras below;
# - COMMIT: the commit the wheel was built from (the machine's copy of the tree has no .git).
# Then it checks that one version of each package is there and that the tree with .whl fits the
# device tool's 64 MiB, and prints the two device calls.
#
#   --wheel-only   build gpudoctor's wheel (and COMMIT) only: the smoke test's preparation
# Environment: PYTHON (default .venv/bin/python, else python3: needs pip and setuptools >= 77).
# Exit: 0 ready, 2 bad argument, 3 a step failed (one line says which).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# py-spy: `gpudoctor why`; rich, markdown-it-py, pygments: textual 8 needs rich >= 14.2 and
# pygments >= 2.19.2, newer than the image may hold (the carried ones come first on PYTHONPATH).
EXTRAS="py-spy rich markdown-it-py pygments"
LIMIT_MIB=64
WHEELS=${GPU_SESSION_WHEELS:-.whl}
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
WHEELHOUSE=${WHEELHOUSE:-../shared/tools/gpu-wheelhouse.sh}
only_wheel=0
case "${1:-}" in
  --wheel-only) only_wheel=1 ;;
  "") ;;
  *) echo "usage: bash benchmarks/gpu_session_prepare.sh [--wheel-only]" >&2; exit 2 ;;
esac
fail() { echo "gpu-session-prepare: $*" >&2; exit 3; }

mkdir -p "$WHEELS"
WHEELS=$(cd "$WHEELS" && pwd)
build=$(mktemp -d /tmp/gpu-session-build.XXXXXX)
trap 'rm -rf "$build"' EXIT

# What travels, copied, so the build writes nothing (build/, egg-info) into the checkout.
if git rev-parse --git-dir > /dev/null 2>&1; then
  # (a tracked file deleted but not yet committed does not travel either)
  git ls-files -co --exclude-standard -z | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$build"
  commit=$(git rev-parse HEAD)
  [ -z "$(git status --porcelain --untracked-files=no)" ] || commit="$commit+uncommitted"
else
  tar --exclude=.git --exclude=.venv --exclude=.whl --exclude=build --exclude=dist --exclude='*.egg-info' \
    --exclude=__pycache__ -cf - . | tar -xf - -C "$build"
  commit=unknown
fi
rm -f "$WHEELS"/gpudoctor-*.whl
# With this environment's setuptools when it is new enough (offline), else in pip's isolated build
# environment (setuptools >= 77 from the index).
wheel() { "$PY" -m pip wheel -q --no-deps --disable-pip-version-check -w "$WHEELS" "$@" "$build" >> "$build.log" 2>&1; }
wheel --no-build-isolation --no-index || wheel \
  || { tail -n 5 "$build.log" >&2; rm -f "$build.log"; fail "cannot build gpudoctor's wheel with $PY"; }
rm -f "$build.log"
echo "$commit" > "$WHEELS/COMMIT"
echo "built $(cd "$WHEELS" && ls gpudoctor-*.whl) from $commit"
[ "$only_wheel" = 1 ] && exit 0

# The wheelhouse script writes ./.whl and .git/info/exclude where it runs: a scratch folder (a
# worktree's .git is a file), whose wheels are then moved here.
[ -f "$WHEELHOUSE" ] || fail "no wheelhouse script at $WHEELHOUSE (set WHEELHOUSE)"
WHEELHOUSE=$(cd "$(dirname "$WHEELHOUSE")" && pwd)/$(basename "$WHEELHOUSE")
house=$(mktemp -d /tmp/gpu-wheelhouse.XXXXXX)
mkdir -p "$house/.git/info"
(cd "$house" && bash "$WHEELHOUSE" $EXTRAS) \
  || { rm -rf "$house"; fail "the wheelhouse script failed"; }
for w in "$house"/.whl/*.whl; do
  name=$(basename "$w" | cut -d- -f1 | tr 'A-Z_.' 'a-z--')
  for old in "$WHEELS"/*.whl; do  # one version of each: two stop the whole install
    [ -e "$old" ] && [ "$(basename "$old" | cut -d- -f1 | tr 'A-Z_.' 'a-z--')" = "$name" ] && rm -f "$old"
  done
  mv "$w" "$WHEELS/"
done
rm -rf "$house"

for need in gpudoctor textual jsonschema gpustat nvitop py-spy; do
  found=$(cd "$WHEELS" && ls | cut -d- -f1 | tr 'A-Z_.' 'a-z--' | grep -cx "$need" || true)
  [ "$found" = 1 ] || fail "$WHEELS holds $found wheels of $need (want 1)"
done
travel=$( (git ls-files -co --exclude-standard -z 2>/dev/null | xargs -0 -r du -cb 2>/dev/null | tail -n 1 | cut -f1) || echo 0)
carried=$(du -sb "$WHEELS" | cut -f1)
mib=$(( (${travel:-0} + carried) / 1048576 + 1 ))
[ "$mib" -le "$LIMIT_MIB" ] || fail "the tree with $WHEELS is about $mib MiB: over the device tool's $LIMIT_MIB MiB"
echo "ready: the tree with $(basename "$WHEELS") is about $mib MiB of $LIMIT_MIB"
echo 'run(command="bash benchmarks/gpu_session.sh first", carry=[".whl"], timeout_s=360)'
echo 'run(command="bash benchmarks/gpu_session.sh rest", carry=[".whl"], timeout_s=300)   # optional'
