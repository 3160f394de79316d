"""Develop im2win_ffma.cu (float32 NHWC on CUDA cores) in one process on the GPU machine.

``python3 tools/ffma_dev.py [--layers cv4,cv8,...] [--tiles 128x128x8,...] [--batch 128]``:
compiles the tiles, checks each against float64 (PyTorch on the GPU) on awkward problems
(padding, stride, dilation, groups, filters not a multiple of 4, pixel tails, bias) with the
output poisoned first, then times each tile's kernel alone (CUDA events, median) on the
benchmark layers next to `im2win.conv2d` as planned and cuDNN FP32 (TF32 off, channels-last).
Table last.
"""

import argparse

import cupy
import numpy as np
import torch

import im2win
from im2win import bench
from im2win.arrays import checked_problem
from im2win.bench import GPU, make_inputs
from im2win.cuda import launch
from im2win.cuda.plan import geometry
from im2win.layers import LAYERS


def depth(tile: str) -> int:
    """The slice depth BK of "BMxBNxBK" or "FILE:BMxBNxBK"."""
    return int(tile.rpartition(":")[2].split("x")[2])


def ffma(tile: str, double=True, swizzle=True):
    """Tile "BMxBNxBK" of im2win_ffma.cu, or "FILE:BMxBNxBK" of a modified copy FILE.cu of it
    in im2win/cuda (the same template: a variant timed against the original in one process),
    named im2win_ffma__TAG so that it compiles with im2win_ffma's headers (plan.kernel_family);
    e.g. the tree's kernel against main's: `git show HEAD:im2win/cuda/im2win_ffma.cu >
    im2win/cuda/im2win_ffma__head.cu`, then --tiles 64x128x16,im2win_ffma__head:64x128x16."""
    file, _, tile = tile.rpartition(":")
    BM, BN, BK = map(int, tile.split("x"))
    name = (f"im2win_ffma<{BM}, {BN}, {BK}, {str(double).lower()}, {str(swizzle).lower()}, "
            "false>")                                 # x's channels contiguous (NHWC)
    fn = launch.kernel(file or "im2win_ffma", name)

    def run(x, w, bias, y, **kw):
        prob, _, _, _ = checked_problem(x, w, bias, layout="NHWC", **kw)
        geo = geometry(prob, True, prob.N, launch.element_strides(x, "NHWC"))
        grid = (-(-geo.npix // BN), -(-prob.Kg // BM), prob.G)
        fn(grid, (BM * BN // 64, 1, 1), (x, w, launch.NULL if bias is None else bias, y,
                                         launch.NULL, launch.geometry_scalar(geo, prob.N),
                                         np.int32(0)))
        return y
    return run


def reference(x, w, bias, **kw):
    """float64 on the GPU through PyTorch, NHWC in and out."""
    xt = torch.as_tensor(cupy.asnumpy(x), dtype=torch.float64, device="cuda").permute(0, 3, 1, 2)
    wt = torch.as_tensor(cupy.asnumpy(w), dtype=torch.float64, device="cuda").permute(0, 3, 1, 2)
    bt = None if bias is None else torch.as_tensor(cupy.asnumpy(bias), dtype=torch.float64,
                                                   device="cuda")
    pad = kw.get("padding", 0)
    y = torch.nn.functional.conv2d(xt, wt, bt, stride=kw.get("stride", 1), padding=pad,
                                   dilation=kw.get("dilation", 1), groups=kw.get("groups", 1))
    return cupy.asarray(y.permute(0, 2, 3, 1).contiguous().cpu().numpy())


CASES = [  # (N, H, W, C, K, R, S, kwargs, bias)
    (3, 13, 11, 16, 36, 3, 3, dict(padding=1), True),
    (2, 20, 17, 32, 64, 5, 3, dict(stride=2, padding=(2, 1)), False),
    (1, 15, 15, 8, 130, 3, 3, dict(dilation=2, padding=2), True),
    (2, 9, 9, 32, 48, 3, 3, dict(groups=2, padding=1), True),
    (5, 7, 7, 64, 200, 1, 1, dict(), False),
    (1, 33, 30, 24, 20, 7, 7, dict(stride=3, padding=3), True),
]


def check(tiles):
    rng = cupy.random.default_rng(0)
    worst = {}
    variants = [(tile, True, True) for tile in tiles] + [(tiles[0], False, True),
                                                          (tiles[0], True, False)]
    for tile, double, swizzle in variants:
        run = ffma(tile, double, swizzle)
        for N, H, W, C, K, R, S, kw, has_bias in CASES:
            G = kw.get("groups", 1)
            if (C // G) % depth(tile):
                continue
            x = rng.standard_normal((N, H, W, C), dtype=cupy.float32)
            w = rng.standard_normal((K, R, S, C // G), dtype=cupy.float32)
            b = rng.standard_normal(K, dtype=cupy.float32) if has_bias else None
            ref = reference(x, w, b, **kw)
            y = cupy.full(ref.shape, cupy.nan, cupy.float32)
            run(x, w, b, y, **kw)
            err = float(cupy.linalg.norm(y - ref) / cupy.linalg.norm(ref))
            key = (tile, double, swizzle)
            worst[key] = max(worst.get(key, 0.0), err)
            if not err < 1e-5:
                print("FAIL", key, (N, H, W, C, K, R, S, kw), err)
    for key, err in worst.items():
        print("check", key, f"worst rel error {err:.2e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="cv4,cv5,cv6,cv8,cv9,cv10,cv11,cv12")
    parser.add_argument("--tiles", default="128x128x8,64x128x8,128x64x8,64x64x8")
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args()
    tiles = args.tiles.split(",")
    check(tiles)
    device = GPU()
    bench.torch_cuda_available()                  # cuDNN's settings: benchmark, TF32 off
    rows = []
    for name in args.layers.split(","):
        layer = LAYERS[name]
        x_host, w_host = make_inputs(layer, args.batch, "float32", "NHWC")
        x, w = cupy.asarray(x_host), cupy.asarray(w_host)
        kw = dict(layer.kwargs)
        y = im2win.conv2d(x, w, layout="NHWC", **kw)
        flops = 2 * y.size * layer.C * layer.R * layer.S
        t = {"planned": device.time(lambda: im2win.conv2d(x, w, layout="NHWC", **kw))}
        call, _ = bench.bind(bench.CUDNN, [x], w, "NHWC", layer.kwargs)
        t["cudnn"] = device.time(call)
        # cuBLAS SGEMM of the same implicit GEMM (pixels x reduction by reduction x filters),
        # operands already laid out: the CUDA-core ceiling this kernel is measured against.
        a = cupy.ones((y.size // layer.K, layer.C * layer.R * layer.S), cupy.float32)
        b = cupy.ones((layer.C * layer.R * layer.S, layer.K), cupy.float32)
        t["sgemm"] = device.time(lambda: a @ b)
        del a, b
        for tile in tiles:
            if layer.C % depth(tile):
                continue
            run = ffma(tile)
            out = cupy.empty_like(y)
            run(x, w, None, out, **kw)
            err = float(cupy.abs(out - y).max() / cupy.abs(y).max())
            t[tile] = device.time(lambda: run(x, w, None, out, **kw))
            t[tile + " err"] = err
        rows.append((name, flops, t))
    print(f"float32 NHWC, batch {args.batch}: TFLOPS (GPU time, median); err: max diff vs planned")
    for name, flops, t in rows:
        cells = "  ".join(f"{k}={flops / v / 1e12:6.1f}" if not k.endswith("err") else
                          f"({v:.0e})" for k, v in t.items())
        print(f"{name:5s} {cells}")


if __name__ == "__main__":
    main()
