"""float32 stems on narrow_ffma.cu against the plan "auto" makes without it, in one process on
the GPU machine.

``python3 tools/stems_dev.py [--layers cv1,cv7,resnet50.0] [--layouts NCHW,NHWC]``: for each
layer and layout, `im2win.conv2d` as "auto" plans it and with `algorithm="narrow"` forced
(narrow_ffma.cu; "staged": with its filters a row at a time, never resident), each checked against float64 (PyTorch on the GPU, first 2 images) with y
poisoned first, then timed back to back with CUDA events (`bench.GPU.time`, as the benchmark
does), against cuDNN FP32 (TF32 off). Benchmark layers (cv*) at batch 128, network layers at
32. Table last (TFLOPS; the plan's kernel).
"""

import argparse
import functools
import pathlib
import sys

import cupy
import numpy as np

import im2win
from im2win import bench
from im2win.bench import GPU, bind
from im2win.cuda import plan as cuda_plan

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ffma_split_dev import error_of, layer_inputs  # noqa: E402

LAYERS = "cv1,cv2,cv3,cv7,resnet50.0,mobilenet_v2.0,convnext_tiny.0"


def plan_of(x, w, layout, kw, algorithm) -> str:
    """The plan's innermost kernel."""
    p = im2win.cuda._plan(bench.make_problem(x, w, layout=layout, **kw), x, w, algorithm,
                          None, None)
    while p.inner is not None:
        p = p.inner
    return f"{p.algorithm}:{p.kernel}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default=LAYERS)
    ap.add_argument("--layouts", default="NCHW,NHWC")
    ap.add_argument("--variants", default="auto,narrow,staged")
    args = ap.parse_args()
    device = GPU()
    if not bench.torch_cuda_available():          # also: cuDNN benchmark on, TF32 off
        raise SystemExit("needs PyTorch on the GPU (cuDNN)")
    rows, wrong = [], 0
    for name, layout, prob, x, w, kw in layer_inputs(args.layers, args.layouts, device):
        cells = {}
        resident = cuda_plan.NARROW_FFMA_RESIDENT_BYTES
        for variant in args.variants.split(","):
            algorithm = "narrow" if variant == "staged" else variant
            cuda_plan.NARROW_FFMA_RESIDENT_BYTES = 0 if variant == "staged" else resident
            im2win.cuda._calls.clear()
            try:
                plan = plan_of(x, w, layout, kw, algorithm)
            except ValueError as e:
                cells[variant] = (None, None, str(e)[:60])
                continue
            y = cupy.full(prob.y_shape, np.nan, np.float32)
            im2win.conv2d(x, w, out=y, layout=layout, algorithm=algorithm, **kw)
            err = error_of(x, w, kw, layout, y)
            wrong += not err < 1e-5
            call, _ = bind(functools.partial(im2win.conv2d, algorithm=algorithm), [x], w,
                           layout, kw)
            cells[variant] = (prob.flops / device.time(call) / 1e12, err, plan)
            del y
        cuda_plan.NARROW_FFMA_RESIDENT_BYTES = resident
        call, _ = bind(bench.CUDNN, [x], w, layout, kw)
        cells["cuDNN"] = (prob.flops / device.time(call) / 1e12, 0.0, "")
        rows.append((name, layout, cells))
        print(rows[-1], flush=True)
        del x, w
        cupy.get_default_memory_pool().free_all_blocks()
    print("\nfloat32, TFLOPS (max error against float64; kernel)")
    for name, layout, cells in rows:
        print(f"{name} {layout}: " + "  ".join(
            f"{label}=" + ("-" if tf is None else f"{tf:.1f}") +
            ("" if err is None or label == "cuDNN" else
             f" ({err:.0e}{'' if err < 1e-5 else ' WRONG'}; {plan})")
            for label, (tf, err, plan) in cells.items()))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
