"""im2win_ffma.cu's kExact forms (plan.ffma_exact: no bounds predicates where every load is
inside x and w) against the checked forms, on the float32 layers, in one process on the GPU
machine.

``python3 tools/exact_dev.py [--layers cv4,cv5,...] [--layouts NHWC,NCHW] [--rounds 2]``: for
each layer and layout, `im2win.conv2d` ("auto") with Options.exact_loads off ("checked": the
tree before it) and on ("exact"), each checked against float64 (PyTorch on the GPU) on the batch's
first and last 2 images with y poisoned first, then timed back to back with CUDA events
(`bench.GPU.time`, as the benchmark does), the two alternating over `rounds`. Network layers
at batch 32, cv* at 128. Table last: TFLOPS (error; the plan's kernel).
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
from ffma_split_dev import error_of, layer_inputs  # noqa: E402


def kernel_of(x, w, layout, kw, options) -> str:
    p = im2win.cuda._plan(bench.make_problem(x, w, layout=layout, **kw), x, w, "auto", options,
                          None)
    while p.inner is not None:
        p = p.inner
    return p.kernel or p.file


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="cv4,cv5,cv6,cv8,cv9,cv10,cv11,cv12")
    ap.add_argument("--layouts", default="NHWC,NCHW")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    device = GPU()
    if not bench.torch_cuda_available():
        raise SystemExit("needs PyTorch on the GPU (cuDNN)")
    rows, wrong = [], 0
    for name, layout, prob, x, w, kw in layer_inputs(args.layers, args.layouts, device):
        cells = {}
        for rnd in range(args.rounds):
            for label, exact in (("checked", False), ("exact", True)):
                options = Options(exact_loads=exact)
                conv = functools.partial(im2win.conv2d, options=options)
                if rnd == 0:
                    y = cupy.full(prob.y_shape, np.nan, np.float32)
                    conv(x, w, out=y, layout=layout, **kw)
                    err = max(error_of(x, w, kw, layout, y),
                              error_of(x[-2:], w, kw, layout, y[-2:]))
                    wrong += not err < 1e-5
                    cells[label] = [[], err, kernel_of(x, w, layout, kw, options)]
                    del y
                call, _ = bind(conv, [x], w, layout, kw)
                cells[label][0].append(prob.flops / device.time(call) / 1e12)
        rows.append((name, layout, cells))
        print(name, layout, {k: (v[0], v[1]) for k, v in cells.items()}, flush=True)
        del x, w
        cupy.get_default_memory_pool().free_all_blocks()
    print("\nfloat32, TFLOPS, best of the rounds (max error against float64; kernel)")
    for name, layout, cells in rows:
        print(f"{name} {layout}: " + "  ".join(
            f"{label}={max(t):.1f} ({err:.0e}; {kernel})" for label, (t, err, kernel)
            in cells.items()))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
