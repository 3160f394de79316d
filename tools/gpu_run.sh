#!/usr/bin/env bash
# One call on the GPU machine: GPU tests, compute-sanitizer, the benchmark; short table last.
#   bash tools/gpu_run.sh [test|sanitize|bench|overhead|sweep|ablation|all] [pytest -k expr]
#   bash tools/gpu_run.sh ab REV               (tools/ab_bench.py: REV against this tree)
#   bash tools/gpu_run.sh sanitize float16      (the mma.sync kernel's cases only; wgmma: the Hopper
#                                               kernel's; tma: its TMA copies only; depthwise: the
#                                               depthwise kernel's; narrow: narrow.cu's;
#                                               pointwise: pointwise.cu's; ffma: the float32
#                                               NHWC CUDA-core kernels; stems: narrow_ffma.cu's)
#   DTYPES=float16 bash tools/gpu_run.sh bench  (default: float32 float16)
#   bash tools/gpu_run.sh asv [tools/asv_gpu.sh arguments: --bench REGEX --old REV]
#   SUITES='float32:NCHW float16:NHWC' bash tools/gpu_run.sh suite   (the five networks)
#   bash tools/gpu_run.sh cv8                   (cv8's timing probes, docs/hopper.md step 40:
#                                               the write rate, then im2win_wgmma_tma's PROBE
#                                               forms and switches side by side)
# Writes logs and JSON under $OUT and CuPy's compiled kernels to $OUT/cupy_cache.tgz, which
# the next call can carry back as .cache/cupy (see docs/gpu.md).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=$PWD/.cache/cupy
OUT=${OUT:-/tmp/im2win-out}
mkdir -p "$CUPY_CACHE_DIR" "$OUT"
step=${1:-all}
if [[ $step == asv ]]; then
  exec bash tools/asv_gpu.sh "${@:2}"
fi
filter=${2:-}
status=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,utilization.gpu --format=csv

if [[ $step == test || $step == all ]]; then
  # 8 processes: each compiles the instantiations its tests need (NVRTC, one at a time)
  python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_gpu.py tests/test_gpu_launch.py tests/test_interop.py \
    tests/test_bench.py tests/test_dask.py ${filter:+-k "$filter"} 2>&1 | tee "$OUT/pytest.log" | tail -n 30
  status=$((status | PIPESTATUS[0]))
fi
if [[ $step == overhead || $step == all ]]; then
  python3 -m im2win overhead --json "$OUT/overhead.json" 2>&1 | tee "$OUT/overhead.log"
  status=$((status | PIPESTATUS[0]))
fi
if [[ $step == ab ]]; then
  python3 tools/ab_bench.py "$filter" "$OUT/ab" 2>&1 | tee "$OUT/ab.log" | tail -n 60
  status=$((status | PIPESTATUS[0]))
  (cd "$OUT" && tar -czf ab.tgz ab && rm -rf ab)
fi
if [[ $step == sanitize || $step == all ]]; then
  [[ $filter == float16 ]] && python3 tools/prewarm.py --specializations im2win_mma
  # API errors not reported: cuda.bindings (TMA descriptors) looks up every driver entry point
  # at first use, and the ones this driver lacks fail cuGetProcAddress, which memcheck would
  # count (34 of them); a failing call of ours raises in Python and stops the cases anyway.
  for tool in memcheck racecheck synccheck; do
    compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 \
      python3 tools/sanitize_cases.py $filter \
      > "$OUT/sanitizer-$tool.log" 2>&1
    rc=$?
    echo "compute-sanitizer $tool: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' \
      "$OUT/sanitizer-$tool.log" | tail -n 1)"
    status=$((status | rc))
  done
fi
if [[ $step == cv8 ]]; then
  kernel="im2win_wgmma:im2win_wgmma_tma<half_t, 128, 128"
  probes=(--expression "$kernel, 4, true, true, true, false>"
          --expression "$kernel, 4, true, true, true, false, 16>")
  for p in 4 5 6 7 8 32 64 96; do
    probes+=(--expression "$kernel, 5, true, true, true, false, $p>")
  done
  python3 tools/prewarm.py --dtypes float16 --layouts NHWC "${probes[@]}" 2>&1 | tail -n 1
  python3 tools/copy_bandwidth.py --mib 378,1024 2>&1 | tee "$OUT/copy-bandwidth.log" | tail -n 8
  tiles=wg128x128,wg128x128:stages4,wg128x128:stages4:probe16
  for p in 8 4 5 6 7 32 64 96; do tiles+=,wg128x128:probe$p; done
  python3 tools/wgmma_dev.py --no-check --layers cv8 --tiles $tiles,wg128x128:no_ping_pong \
    2>&1 | tee "$OUT/cv8-probes.log" | tail -n 3
  status=$((status | PIPESTATUS[0]))
fi
if [[ $step == sweep ]]; then
  python3 tools/tile_sweep.py "$OUT/tile-sweep-float32.json" 2>&1 | tail -n 30
  status=$((status | PIPESTATUS[0]))
fi
if [[ $step == ablation ]]; then
  for kernels in float32 float16 float16-wgmma; do      # each variant's kernels, in parallel
    python3 tools/prewarm.py --ablation $kernels --layouts NHWC 2>&1 | tail -n 1
  done
  python3 tools/ablation.py "$OUT/ablation.json" 2>"$OUT/ablation.log" | tail -n 40
  status=$((status | PIPESTATUS[0]))
fi
if [[ $step == suite ]]; then
  # The model-zoo benchmark (issue 12): each network in SUITES' dtype:layout pairs; the JSON
  # comes back as suite.tgz (docs/data/suite/ holds it for docs/make_performance.py).
  mkdir -p "$OUT/suite"
  for spec in ${SUITES:-float32:NCHW float16:NHWC}; do
    dtype=${spec%:*} layout=${spec#*:}
    for net in resnet50 mobilenet_v2 efficientnet_b0 convnext_tiny resnext50_32x4d; do
      python3 -m im2win --suite $net --compare --dtype $dtype --layout $layout \
        --json "$OUT/suite/suite-$net-$dtype-$layout.json" > "$OUT/suite-$net-$dtype-$layout.log" 2>&1
      status=$((status | $?))
      echo "$net $dtype $layout: $(grep -E 'correct|ms against' "$OUT/suite-$net-$dtype-$layout.log" | tr '\n' ' ')"
    done
  done
  (cd "$OUT" && tar -czf suite.tgz suite && rm -rf suite)
fi
if [[ $step == bench || $step == all ]]; then
  for dtype in ${DTYPES:-float32 float16}; do
    for layout in NCHW NHWC; do
      python3 -m im2win --compare --dtype $dtype --layout $layout \
        --json "$OUT/gpu-$dtype-$layout.json" > "$OUT/bench-$dtype-$layout.log" 2>&1
      status=$((status | $?))
      grep -E "geometric|correct" "$OUT/bench-$dtype-$layout.log"
    done
  done
fi
tar -czf "$OUT/cupy_cache.tgz" -C "$PWD/.cache" cupy
# At most 8 files come back: each step's logs travel as one archive.
(cd "$OUT" && ls ./*.log >/dev/null 2>&1 && tar -czf "logs-$step.tgz" ./*.log && rm -f ./*.log)
exit $status
