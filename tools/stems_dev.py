"""float32 stems on narrow_ffma.cu's forms against "auto"'s plan and cuDNN, in one process on the
GPU machine.

``python3 tools/stems_dev.py [--layers cv1,cv7,resnet50.0] [--layouts NCHW,NHWC]``: for each layer
and layout, `im2win.conv2d` as "auto" plans it and with `algorithm="narrow"` forced (narrow_ffma.cu
on tiles a multiple of 8 columns wide; "tn8": with 8 pixels a thread, never 7; "elems": the tile
chosen by the window's elements copied, not by the lanes that copy them; "staged": with its filters
a row at a time, never resident; "resident": resident wherever they fit; "rows": NCHW tiles of
whole output rows; "stage": NCHW y through each warp's stage; "rows+stage" both; "direct": NCHW y
written directly; "planes": the window a plane a channel, never packed, and the filters resident
by the unpacked rule; "auto-planes": "auto"'s plan so, main's before the packed window); any of them as "VARIANT@FILE": narrow_ffma.cu's kernels from
im2win/cuda/FILE.cu, a copy named narrow_ffma__SOMETHING, timed in the same process as the
tree's), each checked against
float64 (PyTorch on the GPU, first 2 images) with y poisoned first, then timed back to back with
CUDA events (`bench.GPU.time`, as the benchmark does), against cuDNN FP32 (TF32 off). Benchmark
layers (cv*) at batch 128, network layers at 32. Table last (TFLOPS; the plan's kernel).
"""

import argparse
import pathlib
import sys

import im2win.cuda
from im2win.cuda import launch
from im2win.cuda import plan as cuda_plan

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from columns_dev import measure, print_table, run_table  # noqa: E402

LAYERS = "cv1,cv2,cv3,cv7,resnet50.0,mobilenet_v2.0,convnext_tiny.0"
NCHW_ONLY = ("rows", "stage", "rows+stage", "direct")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default=LAYERS)
    ap.add_argument("--layouts", default="NCHW,NHWC")
    ap.add_argument("--variants", default="auto,narrow,staged")
    args = ap.parse_args()
    flags = ("NARROW_FFMA_RESIDENT_BYTES", "NARROW_FFMA_NCHW_ROWS", "NARROW_FFMA_STAGE_NCHW",
             "NARROW_FFMA_PIXELS", "NARROW_FFMA_PACKED_REDUCTION")
    planned = {flag: getattr(cuda_plan, flag) for flag in flags}
    fill = cuda_plan.narrow_ffma_fill

    def elements(prob, rows, cols):  # the window's elements, not the lanes that copy them
        return rows * cols * prob.C

    def cells_of(prob, x, w, layout, kw, device):
        cells = {}
        kernel = launch.kernel
        for label in args.variants.split(","):
            variant, _, copy = label.partition("@")
            if variant in NCHW_ONLY and layout != "NCHW":
                continue
            cuda_plan.NARROW_FFMA_RESIDENT_BYTES = 0 if variant == "staged" else \
                1 << 20 if variant == "resident" else planned["NARROW_FFMA_RESIDENT_BYTES"]
            cuda_plan.NARROW_FFMA_NCHW_ROWS = 1 << 30 if "rows" in variant else \
                planned["NARROW_FFMA_NCHW_ROWS"]
            cuda_plan.NARROW_FFMA_STAGE_NCHW = False if variant == "direct" else \
                True if "stage" in variant else planned["NARROW_FFMA_STAGE_NCHW"]
            cuda_plan.NARROW_FFMA_PIXELS = (8,) if variant == "tn8" else \
                planned["NARROW_FFMA_PIXELS"]
            cuda_plan.NARROW_FFMA_PACKED_REDUCTION = 1 << 30 if "planes" in variant else \
                planned["NARROW_FFMA_PACKED_REDUCTION"]
            cuda_plan.narrow_ffma_fill = elements if variant == "elems" else fill
            if copy:                  # narrow_ffma's kernels from the copy, compiled afresh
                launch.kernel = (lambda file, expression: kernel(
                    copy if file == "narrow_ffma" else file, expression))
            launch._executables.clear()
            try:
                cells[label] = measure(prob, x, w, layout, kw,
                                       "auto" if variant.startswith("auto") else "narrow",
                                       device)
            finally:
                launch.kernel = kernel
                launch._executables.clear()
                im2win.cuda._calls.clear()
        for flag, value in planned.items():
            setattr(cuda_plan, flag, value)
        cuda_plan.narrow_ffma_fill = fill
        return cells

    return 1 if print_table(run_table(args.layers, args.layouts, cells_of), "kernel", 1e-5) \
        else 0


if __name__ == "__main__":
    sys.exit(main())
