"""float32 NCHW through channels-last plans, in one process on the GPU machine: each layer's
planned call (`algorithm="auto"`) with `Options.nchw_epilogue` on (the kernel writes the NCHW
y) and off (a channels-last y transposed into y), on with scalar stores where P*Q is not a
multiple of 4 (`plan.FFMA_STAGED_NCHW` off: im2win_ffma_to_nchw in place of its staged form),
with `Options.x_in_place` off (x copied channels-last, not read in place by the strided
form) and with im2win_ffma's kernels from a copy of the file (xplace-base); for the stems (C
not a multiple of 8) "im2win_columns" the three ways; against cuDNN FP32 (TF32 off, NCHW).

``python3 tools/nchw_dev.py [--layers cv1,cv7,...] [--batch 128] [--variants auto,xcopy]
[--rounds 3] [--base FILE] [--tiles f128x64,...]`` (variants: auto, scalar, ytrans, xcopy,
xplace-base, columns, columns-scalar, columns-ytrans; default all but xcopy and xplace-base;
rounds: the variants timed in turn that many times, the median kept; xplace-base: "auto" with
im2win_ffma's kernels from FILE.cu, a copy of im2win_ffma.cu in im2win/cuda, e.g. `git show
HEAD:im2win/cuda/im2win_ffma.cu > im2win/cuda/im2win_ffma__head.cu` with --base
im2win_ffma__head, timed against the tree's; --tiles: "im2win_nhwc" on each of im2win_ffma.cu's
tiles named, variants "tile NAME"): each variant checked against float64 (PyTorch on the GPU,
first 2 images) with y poisoned first, then timed with CUDA events (median, `bench.GPU.time`).
Table last (TFLOPS, plan).
"""

import argparse

import cupy
import numpy as np
import torch

import im2win
from im2win import bench
from im2win.arrays import checked_problem
from im2win.bench import GPU, make_inputs
from im2win import cuda
from im2win.cuda import launch, plan as planning
from im2win.cuda.tuning import Options
from im2win.layers import LAYERS


def relative_error(x, w, y, kw) -> float:
    xt = torch.as_tensor(x[:2].astype(np.float64), device="cuda")
    wt = torch.as_tensor(w.astype(np.float64), device="cuda")
    ref = cupy.asarray(torch.nn.functional.conv2d(xt, wt, **kw).contiguous())
    got = y[:2].astype(np.float64)
    if not bool(cupy.isfinite(got).all()):
        return float("inf")
    return float(cupy.abs(got - ref).max() / cupy.abs(ref).max())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="cv1,cv2,cv3,cv7,cv4,cv8,cv9,cv10")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--variants", default="auto,scalar,ytrans,columns,columns-scalar,"
                                          "columns-ytrans")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--base", default="im2win_ffma__head")
    ap.add_argument("--tiles", default="")
    args = ap.parse_args()
    device = GPU()
    if not bench.torch_cuda_available():          # also: cuDNN benchmark on, TF32 off
        raise SystemExit("needs PyTorch on the GPU (cuDNN)")
    variants = {"auto": ("auto", Options()),
                "auto, scalar": ("auto", Options()),
                "auto, y transposed": ("auto", Options(nchw_epilogue=False)),
                "auto, x copied": ("auto", Options(x_in_place=False)),
                f"auto ({args.base})": ("auto", Options()),
                "columns": ("im2win_columns", Options()),
                "columns, scalar": ("im2win_columns", Options()),
                "columns, y transposed": ("im2win_columns", Options(nchw_epilogue=False))}
    keys = dict(zip(("auto", "scalar", "ytrans", "xcopy", "xplace-base", "columns",
                     "columns-scalar", "columns-ytrans"), variants))
    variants = {keys[k]: variants[keys[k]] for k in args.variants.split(",")}
    variants.update({f"tile {t}": ("im2win_nhwc", Options()) for t in args.tiles.split(",") if t})
    rows, kernel = [], launch.kernel
    for name in args.layers.split(","):
        layer = LAYERS[name]
        x_host, w_host = make_inputs(layer, args.batch, "float32", "NCHW")
        x, w = cupy.asarray(x_host), cupy.asarray(w_host)
        kw = dict(layer.kwargs)
        flops = None
        cells, times = {}, {}
        for label, (algorithm, options) in list(variants.items()) * args.rounds:
            if algorithm == "im2win_columns" and layer.C % 8 == 0:
                continue
            # ", scalar": im2win_ffma_to_nchw's scalar stores where P*Q % 4 != 0, in place of
            # its staged form (plan.FFMA_STAGED_NCHW off while planned)
            planning.FFMA_STAGED_NCHW = not label.endswith(", scalar")
            if label.endswith(f"({args.base})"):      # im2win_ffma's kernels from the copy
                launch.kernel = (lambda file, expression: kernel(
                    args.base if file == "im2win_ffma" else file, expression))
            cuda._calls.clear()
            launch._executables.clear()
            tile = label[5:] if label.startswith("tile ") else None
            prob = checked_problem(x, w, **kw)[0]

            def call(out=None, a=algorithm, o=options, t=tile, x=x, w=w, prob=prob):
                if t is None:
                    return im2win.conv2d(x, w, algorithm=a, options=o, out=out, **kw)
                key = None if out is not None else ("nchw_dev", t)   # planned once, as conv2d's
                remembered = cuda.cached_call(key)
                if remembered is not None:
                    return remembered(x, w, None, None)
                return cuda.conv2d(prob, x, w, out=out, algorithm=a, options=o, tile=t, key=key)
            y = call()
            y.fill(np.nan)
            y = call(out=y)
            err = relative_error(x, w, y, kw)
            flops = flops or 2 * y.size * layer.C * layer.R * layer.S
            times.setdefault(label, []).append(device.time(call))
            cells[label] = (flops / float(np.median(times[label])) / 1e12, err)
            planning.FFMA_STAGED_NCHW = True
            launch.kernel = kernel
            cuda._calls.clear()
            launch._executables.clear()
            del y
        call, _ = bench.bind(bench.CUDNN, [x], w, "NCHW", layer.kwargs)
        cells["cudnn"] = (flops / device.time(call) / 1e12, 0.0)
        rows.append((name, cells))
        print(name, cells, flush=True)
        del x, w
        cupy.get_default_memory_pool().free_all_blocks()
    print(f"\nfloat32 NCHW, batch {args.batch}: TFLOPS (max error vs float64)")
    for name, cells in rows:
        print(f"{name:5s} " + "  ".join(
            f"{label}={tf:5.1f}" + ("" if label == "cudnn" else
                                    f" ({err:.0e}{'' if err < 1e-4 else ' WRONG'})")
            for label, (tf, err) in cells.items()))


if __name__ == "__main__":
    main()
