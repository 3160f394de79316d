#!/usr/bin/env bash
# docs/wip's patches on the GPU machine: applied to the copy of the tree there (in the order
# docs/wip/README.md gives), then one step a call (each fits a call's 10 minutes; logs under
# $OUT, a short summary last):
#   bash tools/wip_run.sh test [EXPR]   # the GPU tests with them, 8 processes (-k EXPR)
#   bash tools/wip_run.sh time [NAMES]   # spread (im2win_ffma.cu's stores spread, against
#                                    # main's kernel in one process), vec7 (depthwise_dev on
#                                    # ConvNeXt's 7x7 layers and a 5x5 on 7x7 maps, NCHW), rv2
#                                    # (float16 NHWC rows, 2 channels a thread), v26 (float32
#                                    # NCHW 7x7 maps on vectors of 1 column or not), grouped
#                                    # (the suite profile of resnext50_32x4d's float32 NCHW
#                                    # groups): each against "auto" and cuDNN; twin32 (where
#                                    # float32 NCHW's time on its NHWC twin goes: copies,
#                                    # kernel, host; the filter's copy by transpose_taps and by
#                                    # transpose_narrow), gemm32 (resnet50's float32 1x1 layers
#                                    # on cuBLAS with CUBLAS_COMPUTE_32F beside the planned
#                                    # pedantic type), strided (strided-swizzle: the
#                                    # float32 NCHW twin in place with the patch, x
#                                    # copied, and in place on main's kernel, on cv4, cv9,
#                                    # cv8); those past 540 s are skipped: name them in
#                                    # the next call
#   bash tools/wip_run.sh sanitize [MODES]   # racecheck, memcheck, synccheck (TOOLS) on
#                                    # sanitize_cases.py's MODES (depthwise ffma), within 540 s
# Carry .cache (compiled kernels) as for tools/gpu_run.sh; CuPy's cache comes back in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=$PWD/.cache/cupy
OUT=${OUT:-/tmp/im2win-out}
mkdir -p "$CUPY_CACHE_DIR" "$OUT"
PATCHES="strided-swizzle"
# docs/wip/README.md: strided-swizzle from the twenty-third session, rebased in the
# twenty-fourth (the time steps but strided run on the tree as it is; spread needed the
# dropped ffma-spread-stores)
step=${1:-test}
status=0
start=$SECONDS

if [[ -z $PATCHES ]]; then
  echo "docs/wip holds no patch to apply"
  exit 0
fi
last=${PATCHES##* }
for p in $PATCHES; do              # files a patch creates, left by an earlier call's copy
  git apply --check "docs/wip/${PATCHES%% *}.patch" 2>/dev/null || break
  git apply --summary "docs/wip/$p.patch" | awk '/^ create mode/ {print $4}' | xargs -r rm -f
done
if git apply --check "docs/wip/${PATCHES%% *}.patch" 2>/dev/null; then
  for p in $PATCHES; do
    git apply "docs/wip/$p.patch" || { echo "$p: does not apply"; exit 1; }
  done
  echo "applied: $PATCHES"
elif git apply --reverse --check "docs/wip/$last.patch" 2>/dev/null; then
  echo "applied already: $PATCHES"         # a tree that has them is left alone
else
  echo "the tree has some of $PATCHES, not all: start from a clean copy"; exit 1
fi

if [[ $step == test ]]; then
  # the whole GPU set, as gpu_run.sh's test step (the stores' patch changes every float32
  # call on im2win_ffma.cu, whatever the test's name); -k EXPR narrows it
  python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_gpu.py tests/test_gpu_launch.py \
    tests/test_interop.py tests/test_bench.py tests/test_dask.py ${2:+-k "$2"} 2>&1 |
    tee "$OUT/wip-pytest.log" | tail -n 15
  status=$((status | PIPESTATUS[0]))
fi
if [[ $step == time ]]; then
  only=" ${2:-strided vec7 rv2 v26 twin32 gemm32} "
  run() {                          # NAME, then the tool and its arguments: within 540 s a call
    local name=$1 left=$((540 - (SECONDS - start))); shift
    [[ $only == *" $name "* ]] || return 0
    if ((left < 60)); then echo "== $name: skipped, the call's time is spent"; return 0; fi
    timeout $((left < 240 ? left : 240)) python3 "$@" > "$OUT/wip-$name.log" 2>&1
    status=$((status | $?))
    echo "== $name ($((SECONDS - start)) s)"; tail -n 25 "$OUT/wip-$name.log"
  }
  if [[ $only == *" spread "* ]]; then   # main's im2win_ffma.cu as a variant beside the patch's
    git show HEAD:im2win/cuda/im2win_ffma.cu > im2win/cuda/im2win_ffma__head.cu
  fi
  run spread tools/ffma_dev.py --layers cv4,cv8,cv9,cv12 \
    --tiles 64x128x16,im2win_ffma__head:64x128x16,64x128x8,im2win_ffma__head:64x128x8
  rm -f im2win/cuda/im2win_ffma__head.cu
  run vec7 tools/depthwise_dev.py --configs float32:NCHW,float16:NCHW,bfloat16:NCHW \
    --layers convnext_tiny.1,convnext_tiny.3,convnext_tiny.5,convnext_tiny.7,efficientnet_b0.39 \
    --variants tile,no7+vh1,vv8
  run rv2 tools/depthwise_dev.py --configs float16:NHWC \
    --layers mobilenet_v2.1,mobilenet_v2.4,mobilenet_v2.7,mobilenet_v2.9,efficientnet_b0.15 \
    --variants tile,rv2,rv2+rf3,rv2+rp8
  run v26 tools/depthwise_dev.py --configs float32:NCHW \
    --layers mobilenet_v2.26,efficientnet_b0.43,mobilenet_v2.23 --variants tile,vm8
  run grouped tools/suite_profile.py float32 NCHW grouped --network resnext50_32x4d
  run twin32 tools/twin_dev.py --dtype float32 --layers cv4,cv5,cv6,cv8,cv9,cv10,cv11,cv12
  run gemm32 tools/suite_profile.py float32 NCHW 1x1 --network resnet50 --compute32f
  if [[ $only == *" strided "* ]]; then # main's kernel beside the patched one (the 64 x 128
    git show HEAD:im2win/cuda/im2win_ffma.cu > im2win/cuda/im2win_ffma__head.cu   # tiles'
  fi                                     # strided form changes with it)
  run strided tools/nchw_dev.py --layers cv4,cv9,cv8 --variants auto,xcopy,xplace-base \
    --base im2win_ffma__head --rounds 3
  rm -f im2win/cuda/im2win_ffma__head.cu
fi
if [[ $step == sanitize ]]; then
  for mode in ${2:-depthwise ffma}; do
    for tool in ${TOOLS:-racecheck memcheck synccheck}; do
      left=$((540 - (SECONDS - start)))
      if ((left < 30)); then echo "$mode $tool: skipped, the call's time is spent"; continue; fi
      timeout $left compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 \
        python3 tools/sanitize_cases.py "$mode" > "$OUT/wip-sanitizer-$mode-$tool.log" 2>&1
      rc=$?
      echo "$mode $tool: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' \
        "$OUT/wip-sanitizer-$mode-$tool.log" | tail -n 1) ($((SECONDS - start)) s)"
      status=$((status | rc))
    done
  done
fi
(cd "$OUT" && tar -czf "logs-wip-$step.tgz" wip-*.log 2>/dev/null && rm -f wip-*.log)
tar -czf "$OUT/cupy_cache.tgz" -C "$PWD/.cache" cupy
echo "wip_run.sh $step: exit $status in $((SECONDS - start)) s"
exit $status
