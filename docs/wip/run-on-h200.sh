#!/usr/bin/env bash
# The GPU checks of the three patches here, in one device call (about 6-8 minutes warm):
# apply them in order first (git apply --3way docs/wip/window-columns.patch, then
# nchw-epilogue.patch, then transpose-words.patch), then run this from the repository root.
# Each step is bounded by its own timeout and prints as it goes; results land in $OUT.
export PYTHONPATH=$PWD CUPY_CACHE_DIR=/tmp/cupy PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
step() { local t=$1; shift; echo "=== $*"; timeout -k 5 "$t" "$@" 2>&1 | tail -25; }
step 240 python3 -m pytest -q -x -n 8 tests/test_gpu.py tests/test_gpu_launch.py \
    -k "columns or epilogue or twin or transposes or captured"
for tool in memcheck racecheck synccheck; do
  step 150 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 \
      python3 tools/sanitize_cases.py tma
done
for config in "float16 NHWC" "bfloat16 NHWC" "float16 NCHW"; do
  set -- $config
  step 150 python3 -m im2win --compare --dtype "$1" --layout "$2" --json "$OUT/gpu-$1-$2.json"
done
step 120 python3 tools/twin_dev.py
