"""im2win_ffma.cu's split-K with its fixup (Options.split_fixup: each tile's last block sums
the ranges and writes y) against split_reduce's second launch, on the float32 layers the
planner splits, in one process on the GPU machine.

``python3 tools/fixup_dev.py [--layers cv6,cv11,cv12,resnet50.16,...] [--layouts NHWC,NCHW]
[--rounds 3]``: for each layer and layout, `im2win.conv2d` ("auto") with the fixup off
("reduce": the tree before it) and on ("fixup"), each checked against float64 (PyTorch on the
GPU) on the batch's first and last 2 images with y poisoned first, the two outputs compared
bit for bit, then timed with CUDA events (`bench.GPU.time`, as the benchmark does), the two
alternating over `rounds`. Network layers at batch 32, cv* at 128. Table last: TFLOPS, best
of the rounds (error; the plan's kernel; whether the outputs are equal).
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
from im2win.cuda import Options

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from exact_dev import kernel_of  # noqa: E402
from ffma_split_dev import error_of, layer_inputs  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="cv6,cv11,cv12,resnet50.16,resnet50.18,resnet50.22")
    ap.add_argument("--layouts", default="NHWC,NCHW")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    device = GPU()
    if not bench.torch_cuda_available():
        raise SystemExit("needs PyTorch on the GPU (the float64 check)")
    rows, wrong = [], 0
    for name, layout, prob, x, w, kw in layer_inputs(args.layers, args.layouts, device):
        cells, outputs = {}, {}
        for rnd in range(args.rounds):
            for label, fixup in (("reduce", False), ("fixup", True)):
                options = Options(split_fixup=fixup)
                conv = functools.partial(im2win.conv2d, options=options)
                if rnd == 0:
                    y = cupy.full(prob.y_shape, np.nan, np.float32)
                    conv(x, w, out=y, layout=layout, **kw)
                    err = max(error_of(x, w, kw, layout, y),
                              error_of(x[-2:], w, kw, layout, y[-2:]))
                    wrong += not err < 1e-5
                    cells[label] = [[], err, kernel_of(x, w, layout, kw, options)]
                    outputs[label] = y
                call, _ = bind(conv, [x], w, layout, kw)
                cells[label][0].append(prob.flops / device.time(call) / 1e12)
        equal = bool(cupy.array_equal(outputs["reduce"], outputs["fixup"]))
        wrong += not equal
        rows.append((name, layout, cells, equal))
        print(name, layout, {k: (v[0], v[1]) for k, v in cells.items()}, equal, flush=True)
        del x, w, outputs
        cupy.get_default_memory_pool().free_all_blocks()
    print("\nfloat32, TFLOPS, best of the rounds (max error against float64; kernel)")
    for name, layout, cells, equal in rows:
        print(f"{name} {layout}: " + "  ".join(
            f"{label}={max(t):.1f} ({err:.0e}; {kernel})" for label, (t, err, kernel)
            in cells.items()) + f"  {'equal' if equal else 'OUTPUTS DIFFER'}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
