#!/usr/bin/env bash
# The asv suite on the GPU machine (no network): install asv from the carried wheels, record
# HEAD (and optionally an older commit) for machine "h200", compare, publish, and bundle.
#
#   bash tools/asv_gpu.sh [--bench REGEX] [--old REV] [--launch forkserver|spawn]
#
#   --bench REGEX  asv's -b: benchmark names with their parameters, e.g. "Conv2dGPU" (the whole
#                  GPU grid, the default), "Conv2dGPU.*'float16', 'NHWC'" or
#                  "Conv2dGPU.*'default'" (matched against "conv2d.Conv2dGPU.time_conv2d('cv1',
#                  'float32', 'NCHW', 'default')")
#   --old REV      also record REV (a git worktree of it in /tmp, imported instead of the
#                  working tree) and write `asv compare REV HEAD` to $OUT/asv-compare.log
#   --git-tar F    first replace .git with the archive F (`tar -czf .cache/git.tgz .git` here):
#                  a warm GPU machine keeps the .git of its first call, so HEAD there can be
#                  an older commit than the working tree it runs
#   --launch M     asv's --launch-method (default forkserver: the suite is imported once, and
#                  each benchmark forks from it; falls back to spawn if a fork test fails)
#
# Needs .wheels/ (asv and its dependencies: copy ../shared/wheels/asv-py312/*.whl and a tabulate
# wheel there; carry ".wheels", and ".cache" for compiled kernels). Results already under
# asv_benchmarks/results travel with the working tree and are kept: a run replaces only the
# benchmarks it selects.
# Writes to $OUT: asv-results.tgz (asv_benchmarks/results: unpack into the repo and commit),
# asv-html.tgz (asv publish), asv-compare.log, asv.log, cupy_cache.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/im2win-out}
SITE=${ASV_SITE:-/tmp/site}
MACHINE=${ASV_MACHINE:-h200}
bench="Conv2dGPU" old="" launch=forkserver
while (($#)); do
  case $1 in
    --bench) bench=$2; shift 2 ;;
    --old) old=$2; shift 2 ;;
    --launch) launch=$2; shift 2 ;;
    --git-tar) [[ -f $2 ]] || { echo "no archive $2" >&2; exit 2; }
               rm -rf .git && tar -xzf "$2" && git worktree prune || exit 2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=$ROOT/.cache/cupy
mkdir -p "$OUT" "$CUPY_CACHE_DIR"
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$OUT/asv.log"; }

python3 -m pip install -q --no-index --no-deps --upgrade --target "$SITE" .wheels/*.whl \
  || { echo "cannot install asv from .wheels/" >&2; exit 2; }
export PATH=$SITE/bin:$PATH
# asv drops PYTHONPATH when it starts a benchmark; ASV_PYTHONPATH is passed on instead.
pythonpath() { echo "$1:$SITE"; }
export PYTHONPATH=$(pythonpath "$ROOT")

if [[ $launch == forkserver ]]; then
  # The fork server imports CuPy and PyTorch once (IM2WIN_ASV_PREIMPORT); check that a child
  # forked after those imports can still use the GPU.
  if IM2WIN_ASV_PREIMPORT=1 python3 - <<'EOF'
import os, sys
try:
    import cupy, torch  # noqa: F401
except ImportError:
    import cupy  # noqa: F401
pid = os.fork()
if pid == 0:
    os._exit(0 if float(cupy.arange(4).sum()) == 6 else 1)
sys.exit(os.waitpid(pid, 0)[1] != 0)
EOF
  then export IM2WIN_ASV_PREIMPORT=1
  else log "fork test failed: using --launch spawn"; launch=spawn
  fi
fi

cd asv_benchmarks
asv machine --yes --machine "$MACHINE" >> "$OUT/asv.log" 2>&1
record() {  # record(commit, import root): run the selected benchmarks against that code
  log "asv run $1: -b \"$bench\", --launch-method $launch, im2win from $(PYTHONPATH=$(pythonpath \
    "$2") python3 -c 'import im2win; print(im2win.__file__)')"
  ASV_PYTHONPATH=$(pythonpath "$2") asv run --python=same --quick --machine "$MACHINE" \
    --launch-method "$launch" --show-stderr \
    --set-commit-hash "$1" -b "$bench" >> "$OUT/asv.log" 2>&1
  local rc=$?
  log "asv run $1: exit $rc"
  return $rc
}
status=0
head=$(git rev-parse HEAD)
record "$head" "$ROOT" || status=1
if [[ -n $old ]]; then
  old=$(git rev-parse "$old^{commit}")
  tree=/tmp/im2win-old-${old:0:8}
  if [[ -d $tree ]] || git worktree add --detach "$tree" "$old" >> "$OUT/asv.log" 2>&1; then
    record "$old" "$tree" || status=1
    git worktree remove --force "$tree"
  else
    log "git worktree add $old failed: not recorded"; status=1
  fi
  # asv takes every number as lower-is-better: a "+" on track_tflops means more TFLOPS.
  # The log holds only asv compare's table: its errors go to asv.log.
  asv compare --machine "$MACHINE" --split --only-changed --factor 1.1 "$old" "$head" \
    > "$OUT/asv-compare.log" 2>> "$OUT/asv.log" || { status=1; : > "$OUT/asv-compare.log"; }
  log "asv compare ${old:0:8} ${head:0:8}: $(grep -c '^| +' "$OUT/asv-compare.log") rows up" \
    "(worse, but better for track_tflops), $(grep -c '^| -' "$OUT/asv-compare.log") down"
fi
asv publish >> "$OUT/asv.log" 2>&1 || status=1
tar -czf "$OUT/asv-html.tgz" html
tar -czf "$OUT/asv-results.tgz" results
cd "$ROOT"
tar -czf "$OUT/cupy_cache.tgz" -C .cache cupy
log "done: exit $status"
tail -n 25 "$OUT/asv.log"
exit $status
