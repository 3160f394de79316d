#!/usr/bin/env bash
# tools/suite_profile.py over every kind of layer in float16 NHWC and float32 NCHW, with two
# host profiles; kernels compiled first (tools/prewarm.py), logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=$PWD/.cache/cupy
OUT=${OUT:-/tmp/im2win-out}
mkdir -p "$CUPY_CACHE_DIR" "$OUT"
start=$SECONDS
python3 tools/prewarm.py --suite all --dtypes float16 --layouts NHWC --jobs 16 > "$OUT/prewarm.log" 2>&1
python3 tools/prewarm.py --suite all --dtypes float32 --layouts NCHW --jobs 16 >> "$OUT/prewarm.log" 2>&1
echo "prewarm: $((SECONDS - start)) s"
for spec in "float16 NHWC" "float32 NCHW"; do
  set -- $spec
  python3 tools/suite_profile.py $1 $2 all > "$OUT/profile-$1-$2.log" 2> "$OUT/profile-$1-$2.err"
  echo "$spec: $((SECONDS - start)) s"; tail -n 12 "$OUT/profile-$1-$2.log"
done
python3 tools/suite_profile.py float16 NHWC --profile mobilenet_v2.19 > "$OUT/cprofile.log" 2>&1
python3 tools/suite_profile.py float32 NCHW --profile efficientnet_b0.40 >> "$OUT/cprofile.log" 2>&1
tar -czf "$OUT/cupy_cache.tgz" -C "$PWD/.cache" cupy
echo "done: $((SECONDS - start)) s"
