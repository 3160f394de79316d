"""Develop wgrad_ffma.cu (float32 NHWC backward filter on CUDA cores) in one process on the GPU.

``python3 tools/wgrad_ffma_dev.py [--layers cv1,...] [--batch 128]``: checks every tile (both x
loads, several split counts) against float64 (PyTorch on the GPU) on awkward problems with
the output poisoned first, then times each tile's Runner (CUDA events, median) on the
benchmark layers next to `im2win.conv2d_backward_filter` and cuDNN's backward filter (FP32,
TF32 off, channels-last). Table last.
"""

import argparse

import cupy
import numpy as np
import torch

import im2win
from im2win import bench
from im2win.bench import GPU, make_inputs
from im2win.cuda import launch, wgrad_ffma
from im2win.layers import LAYERS
from im2win.problem import make_backward_filter_problem

CASES = [  # (N, H, W, C, K, R, S, kwargs)
    (3, 13, 11, 16, 36, 3, 3, dict(padding=1)),
    (2, 20, 17, 32, 64, 5, 3, dict(stride=2, padding=(2, 1))),
    (1, 15, 15, 8, 132, 3, 3, dict(dilation=2, padding=2)),
    (2, 9, 9, 32, 48, 3, 3, dict(groups=2, padding=1)),
    (2, 23, 23, 3, 96, 11, 11, dict(stride=4)),
    (1, 33, 30, 6, 20, 7, 7, dict(stride=3, padding=3)),
]


def reference(x, dy, w_shape, **kw):
    """float64 on the GPU through PyTorch, NHWC in and out."""
    xt = torch.as_tensor(cupy.asnumpy(x), dtype=torch.float64, device="cuda").permute(0, 3, 1, 2)
    dt = torch.as_tensor(cupy.asnumpy(dy), dtype=torch.float64, device="cuda").permute(0, 3, 1, 2)
    K, R, S, Cg = w_shape
    dw = torch.nn.grad.conv2d_weight(xt, (K, Cg, R, S), dt, stride=kw.get("stride", 1),
                                     padding=kw.get("padding", 0),
                                     dilation=kw.get("dilation", 1), groups=kw.get("groups", 1))
    return cupy.asarray(dw.permute(0, 2, 3, 1).contiguous().cpu().numpy())


def check():
    rng = cupy.random.default_rng(0)
    worst = {}
    for N, H, W, C, K, R, S, kw in CASES:
        G = kw.get("groups", 1)
        x = rng.standard_normal((N, H, W, C), dtype=cupy.float32)
        w_shape = (K, R, S, C // G)
        y = im2win.conv2d(x, cupy.zeros(w_shape, cupy.float32), layout="NHWC", **kw)
        dy = rng.standard_normal(y.shape, dtype=cupy.float32)
        prob = make_backward_filter_problem(x, dy, w_shape, layout="NHWC", **kw)
        ref = reference(x, dy, w_shape, **kw)
        strides = launch.element_strides(x, "NHWC")
        for tile in wgrad_ffma.TILES:
            for vector in {False, wgrad_ffma.vector_x(prob, strides, x.data.ptr)}:
                for splits in (None, 1, 3):
                    run = wgrad_ffma.Runner(prob, strides, vector, tile, splits)
                    dw = cupy.full(w_shape, cupy.nan, cupy.float32)
                    run(x, dy, dw)
                    err = float(cupy.linalg.norm(dw - ref) / cupy.linalg.norm(ref))
                    key = (tile.name(vector), splits)
                    worst[key] = max(worst.get(key, 0.0), err)
                    if not err < 1e-5:
                        print("FAIL", key, (N, H, W, C, K, R, S, kw), err)
    for key, err in sorted(worst.items(), key=str):
        print("check", key, f"worst rel error {err:.2e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default=",".join(LAYERS))
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args()
    check()
    device = GPU()
    bench.torch_cuda_available()                  # cuDNN's settings: benchmark, TF32 off
    rows = []
    for name in args.layers.split(","):
        layer = LAYERS[name]
        x_host, w_host = make_inputs(layer, args.batch, "float32", "NHWC")
        x = cupy.asarray(x_host)
        w_shape = w_host.shape
        y = im2win.conv2d(x, cupy.asarray(w_host), layout="NHWC", **layer.kwargs)
        dy = cupy.random.default_rng(1).uniform(-1, 1, y.shape, dtype=cupy.float32)
        prob = make_backward_filter_problem(x, dy, w_shape, layout="NHWC", **layer.kwargs)
        flops = 2 * y.size * layer.C * layer.R * layer.S
        fn = bench.torch_backward("backward_filter", w_shape)
        call, first = bench.bind(fn, [x], dy, "NHWC", layer.kwargs)
        t = {"cudnn": device.time(call)}
        ref = first()
        strides = launch.element_strides(x, "NHWC")
        vector = wgrad_ffma.vector_x(prob, strides, x.data.ptr)
        auto = wgrad_ffma.Runner(prob, strides, vector).splits
        for tile, splits in [(tile, None) for tile in wgrad_ffma.TILES] + [
                (wgrad_ffma.TILES[0], max(1, auto // 2)), (wgrad_ffma.TILES[0], 2 * auto)]:
            run = wgrad_ffma.Runner(prob, strides, vector, tile, splits)
            dw = cupy.empty(w_shape, cupy.float32)
            run(x, dy, dw)
            err = float(cupy.linalg.norm(dw - ref) / cupy.linalg.norm(ref))
            t[f"{tile.BM}x{tile.BN}/{run.splits}"] = device.time(lambda: run(x, dy, dw))
            t[f"{tile.BM}x{tile.BN}/{run.splits} err"] = err
        rows.append((name, flops, t))
    print(f"float32 NHWC backward filter, batch {args.batch}: TFLOPS (GPU time, median); "
          f"tile/splits; err: vs cuDNN")
    for name, flops, t in rows:
        cells = "  ".join(f"{k}={flops / v / 1e12:6.1f}" if not k.endswith("err") else
                          f"({v:.0e})" for k, v in t.items())
        print(f"{name:5s} {cells}")


if __name__ == "__main__":
    main()
