"""Split-K of im2win_ffma.cu (float32 on CUDA cores) on the layers it is for, in one GPU call:
each split count checked against float64 with y poisoned first, then GPU microseconds a call
replayed from a CUDA graph (`suite_profile.graph_time`) of `im2win.conv2d` with the planner's
split count, with each split count forced (1, 2, 4, 8) on the planner's tile or on each of
--tiles, and of cuDNN FP32 (TF32 off).

``python3 tools/ffma_split_dev.py [--layers resnet50.22,cv10,...] [--layouts NHWC,NCHW]
[--tiles f64x64,f64x128]`` on the GPU machine; network layers at batch 32, benchmark layers
(cv*) at 128. Table last. A tile named without "k8" takes its 8-deep form where C/G is not a
multiple of 16, as the planner's rule does.
"""

import argparse
import pathlib
import sys

import cupy
import numpy as np

import im2win
from im2win import bench
from im2win.bench import GPU, SUITE_BATCH, bind, prepare
from im2win.cuda import launch
from im2win.cuda import plan as cuda_plan
from im2win.layers import LAYERS
from im2win.networks import NETWORKS

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from suite_profile import graph_time  # noqa: E402

DEFAULT = ("resnet50.10,resnet50.16,resnet50.22,resnet50.12,resnet50.18,convnext_tiny.6,"
           "convnext_tiny.4,cv6,cv10,cv11,cv12")


def layer_of(name: str):
    if name in LAYERS:
        return LAYERS[name], 128
    for net in NETWORKS.values():
        for conv in net:
            if conv.name == name:
                return conv, SUITE_BATCH["gpu"]
    raise SystemExit(f"unknown layer {name}")


def layer_inputs(layers: str, layouts: str, device):
    """(name, layout, problem, x, w, kwargs) of each of the comma-separated layers in each
    layout: random float32 inputs on `device` (network layers at batch 32, cv* at 128)."""
    for name in layers.split(","):
        conv, batch = layer_of(name)
        for layout in layouts.split(","):
            prob, _, _, x, w = prepare(conv, batch, "float32", layout, device)
            yield name, layout, prob, x, w, dict(conv.kwargs)


def error_of(x, w, kwargs, layout, y) -> float:
    """max |y - ref| / max |ref| against float64 (PyTorch on the GPU) on the first 2 images."""
    import torch
    xt = torch.as_tensor(x[:2].astype(np.float64), device="cuda")
    wt = torch.as_tensor(w.astype(np.float64), device="cuda")
    if layout == "NHWC":
        xt, wt = xt.permute(0, 3, 1, 2), wt.permute(0, 3, 1, 2)
    ref = torch.nn.functional.conv2d(xt, wt, **kwargs)
    if layout == "NHWC":
        ref = ref.permute(0, 2, 3, 1)
    ref = cupy.asarray(ref.contiguous())
    got = y[:2].astype(np.float64)
    if not bool(cupy.isfinite(got).all()):
        return float("inf")
    return float(cupy.abs(got - ref).max() / cupy.abs(ref).max())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", default=DEFAULT)
    ap.add_argument("--layouts", default="NHWC,NCHW")
    ap.add_argument("--splits", default="1,2,4,8")
    ap.add_argument("--tiles", default="", help="im2win_ffma.cu tiles to force (default: the "
                    "planner's own)")
    args = ap.parse_args()
    device = GPU()
    if not bench.torch_cuda_available():          # also: cuDNN benchmark on, TF32 off
        raise SystemExit("needs PyTorch on the GPU (cuDNN)")
    count, choose = cuda_plan.ffma_split_count, cuda_plan.choose_ffma_tile
    forced = [int(s) for s in args.splits.split(",")]
    tiles = args.tiles.split(",") if args.tiles else [None]
    variants = ["auto"] + [(tile, n) for tile in tiles for n in forced]
    rows = []
    for name, layout, prob, x, w, kw in layer_inputs(args.layers, args.layouts, device):
        cells, chosen, worst = [], None, 0.0
        for variant in variants:
            tile, n = (None, None) if variant == "auto" else variant
            if tile and prob.Cg % 16 and not tile.endswith("k8"):
                tile += "k8"
            cuda_plan.choose_ffma_tile = choose if tile is None else (
                lambda *args, t=tile: t)
            cuda_plan.ffma_split_count = count if n is None else (
                lambda *args, n=n, **kw: n)
            im2win.cuda._calls.clear()
            launch._executables.clear()
            y = cupy.full(prob.y_shape, np.nan, np.float32)
            im2win.conv2d(x, w, out=y, layout=layout, **kw)
            worst = max(worst, error_of(x, w, kw, layout, y))
            if variant == "auto":
                xs = x if layout == "NHWC" else cupy.ascontiguousarray(x.transpose(0, 2, 3, 1))
                ws = w if layout == "NHWC" else cupy.ascontiguousarray(w.transpose(0, 2, 3, 1))
                p = im2win.cuda._plan(bench.make_problem(xs, ws, layout="NHWC", **kw), xs, ws,
                                      "auto", None, None)
                chosen = f"{p.file}:{p.tile.name if p.tile else '-'}/{p.splits}"
            call, _ = bind(im2win.conv2d, [x], w, layout, kw)
            cells.append(graph_time(call, False) * 1e6)
        cuda_plan.ffma_split_count, cuda_plan.choose_ffma_tile = count, choose
        im2win.cuda._calls.clear()
        call, _ = bind(bench.CUDNN, [x], w, layout, kw)
        cudnn = graph_time(call, True) * 1e6
        rows.append((name, layout, chosen, worst, cells, cudnn))
        print(rows[-1], flush=True)
        del x, w, y
        cupy.get_default_memory_pool().free_all_blocks()
    print("\nlayer | layout | auto plan | max error | auto us | "
          + " | ".join(f"{t + ' ' if t else ''}{n} ranges us" for t, n in variants[1:])
          + " | cuDNN us | auto/cuDNN")
    for name, layout, chosen, worst, cells, cudnn in rows:
        print(f"{name} | {layout} | {chosen} | {worst:.1e}{'' if worst < 1e-4 else ' WRONG'} | "
              + " | ".join(f"{c:.1f}" for c in cells) + f" | {cudnn:.1f} | {cudnn / cells[0]:.2f}x")


if __name__ == "__main__":
    main()
