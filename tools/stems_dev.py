"""float32 stems on narrow_ffma.cu against the plan "auto" makes without it, in one process on the
GPU machine.

``python3 tools/stems_dev.py [--layers cv1,cv7,resnet50.0] [--layouts NCHW,NHWC]``: for each
layer and layout, `im2win.conv2d` as "auto" plans it and with `algorithm="narrow"` forced
(narrow_ffma.cu on tiles a multiple of 8 columns wide; "staged": with its filters a row at a
time, never resident; "rows": NCHW tiles of whole output rows; "stage": NCHW y through each
warp's stage; "rows+stage" both), each checked against float64 (PyTorch on the GPU, first 2
images) with y poisoned first, then timed back to back with CUDA events (`bench.GPU.time`, as
the benchmark does), against cuDNN FP32 (TF32 off). Benchmark layers (cv*) at batch 128, network
layers at 32. Table last (TFLOPS; the plan's kernel).
"""

import argparse
import pathlib
import sys

import cupy

import im2win
from im2win import bench
from im2win.bench import GPU
from im2win.cuda import plan as cuda_plan

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from columns_dev import cudnn_cell, measure, print_table  # noqa: E402
from ffma_split_dev import layer_inputs  # noqa: E402

LAYERS = "cv1,cv2,cv3,cv7,resnet50.0,mobilenet_v2.0,convnext_tiny.0"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default=LAYERS)
    ap.add_argument("--layouts", default="NCHW,NHWC")
    ap.add_argument("--variants", default="auto,narrow,staged,rows")
    args = ap.parse_args()
    device = GPU()
    if not bench.torch_cuda_available():          # also: cuDNN benchmark on, TF32 off
        raise SystemExit("needs PyTorch on the GPU (cuDNN)")
    rows = []
    resident, rows_flag = cuda_plan.NARROW_FFMA_RESIDENT_BYTES, cuda_plan.NARROW_FFMA_NCHW_ROWS
    stage_flag = cuda_plan.NARROW_FFMA_STAGE_NCHW
    for name, layout, prob, x, w, kw in layer_inputs(args.layers, args.layouts, device):
        cells = {}
        for variant in args.variants.split(","):
            if variant in ("rows", "stage", "rows+stage") and layout != "NCHW":
                continue
            cuda_plan.NARROW_FFMA_STAGE_NCHW = "stage" in variant or stage_flag
            cuda_plan.NARROW_FFMA_RESIDENT_BYTES = 0 if variant == "staged" else resident
            cuda_plan.NARROW_FFMA_NCHW_ROWS = 1 << 30 if "rows" in variant else rows_flag
            cells[variant] = measure(prob, x, w, layout, kw,
                                     "auto" if variant == "auto" else "narrow", device)
        cuda_plan.NARROW_FFMA_RESIDENT_BYTES, cuda_plan.NARROW_FFMA_NCHW_ROWS = resident, rows_flag
        cuda_plan.NARROW_FFMA_STAGE_NCHW = stage_flag
        im2win.cuda._calls.clear()
        cells["cuDNN"] = cudnn_cell(prob, x, w, layout, kw, device)
        rows.append((name, layout, cells))
        print(rows[-1], flush=True)
        del x, w
        cupy.get_default_memory_pool().free_all_blocks()
    return 1 if print_table(rows, "kernel", 1e-5) else 0


if __name__ == "__main__":
    sys.exit(main())
