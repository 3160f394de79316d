#!/usr/bin/env bash
# The GPU checks of the four patches here. Apply them in order first (git apply --3way
# docs/wip/window-columns.patch, then nchw-epilogue.patch, transpose-words.patch and
# columns-float32.patch), then from the repository root, one device call each (every step is
# bounded by its own timeout and prints as it goes; results land in $OUT):
#   docs/wip/run-on-h200.sh tests      # the new and touched GPU tests, about 2-4 minutes
#   docs/wip/run-on-h200.sh sanitize   # compute-sanitizer, each tool on the tma and ffma cases
#   docs/wip/run-on-h200.sh bench      # python -m im2win --compare, five configurations
#   docs/wip/run-on-h200.sh copies     # tools/twin_dev.py: each layout copy's bandwidth
export PYTHONPATH=$PWD CUPY_CACHE_DIR=/tmp/cupy PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
step() { local t=$1; shift; echo "=== $*"; timeout -k 5 "$t" "$@" 2>&1 | tail -25; }
case "$1" in
  tests)
    step 400 python3 -m pytest -q -x -n 8 tests/test_gpu.py tests/test_gpu_launch.py \
        -k "columns or epilogue or twin or transposes or captured" ;;
  sanitize)
    for tool in memcheck racecheck synccheck; do
      for cases in tma ffma; do
        step 90 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 \
            python3 tools/sanitize_cases.py $cases
      done
    done ;;
  bench)
    for config in "float16 NHWC" "bfloat16 NHWC" "float16 NCHW" "float32 NCHW" "float32 NHWC"; do
      set -- $config
      step 110 python3 -m im2win --compare --dtype "$1" --layout "$2" \
          --json "$OUT/gpu-$1-$2.json"
    done ;;
  copies)
    step 300 python3 tools/twin_dev.py --layers cv4,cv8,cv10,cv12 ;;
  *) echo "usage: $0 tests|sanitize|bench|copies"; exit 2 ;;
esac
