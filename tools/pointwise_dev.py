"""The pointwise kernel (pointwise.cu, algorithm="pointwise") on the float16 NHWC network layers
it takes, in one GPU call: each result checked against float64, then GPU microseconds a call
replayed from a CUDA graph (`suite_profile.graph_time`) of the path "auto" took before it
(pointwise.cu out of its choices), of the kernel with the planner's grid and with at most 4
blocks an SM, and of cuDNN; and the kernel's rate on the bytes it must move (x, w, y once).

``python3 tools/pointwise_dev.py [--layers NAME,...] [--min-pixels 0] [--dtype float16]`` on the
GPU machine. Layers: the network layers `algorithm="pointwise"` can run (default: all of them,
whether "auto" takes them or not).
"""

import argparse
import pathlib
import sys

import cupy
import numpy as np

import im2win
from im2win import bench
from im2win.bench import GPU, SUITE_BATCH, bind, prepare
from im2win.cuda import plan as cuda_plan
from im2win.cuda import launch
from im2win.cuda.launch import element_strides
from im2win.networks import NETWORKS

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from suite_profile import graph_time  # noqa: E402

SAMPLE = 4096


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers")
    ap.add_argument("--min-pixels", type=int, default=0)
    ap.add_argument("--dtype", default="float16")
    args = ap.parse_args()
    device = GPU()
    have_torch = bench.torch_cuda_available()
    pays, grid = cuda_plan.pointwise_pays, cuda_plan.PointwiseArgs.grid
    print("layer | C | K | pixels | error | before us | pointwise us | at most 4 a SM us | "
          "cuDNN us | GB/s")
    for conv in (c for net in NETWORKS.values() for c in net):
        if args.layers and conv.name not in args.layers.split(","):
            continue
        if SUITE_BATCH["gpu"] * conv.H * conv.W < args.min_pixels:
            continue
        prob, _, _, x, w = prepare(conv, SUITE_BATCH["gpu"], args.dtype, "NHWC", device)
        if cuda_plan.pointwise_refusal(prob, element_strides(x, "NHWC"), True,
                                       im2win.cuda.compute_capability(0)):
            continue
        bias = cupy.asarray(np.random.default_rng(1).uniform(-1, 1, conv.K), x.dtype)
        kw = dict(layout="NHWC", **conv.kwargs)
        y = cupy.full(prob.y_shape, np.nan, x.dtype)
        im2win.conv2d(x, w, bias, out=y, algorithm="pointwise", **kw)
        pixels = prob.N * prob.H * prob.W
        rows = np.r_[0:SAMPLE, pixels - SAMPLE:pixels] if pixels > 2 * SAMPLE else \
            np.arange(pixels)
        x2 = x.reshape(pixels, conv.C)[rows].astype(np.float64)
        ref = x2 @ w.reshape(conv.K, conv.C).astype(np.float64).T + bias.astype(np.float64)
        got = y.reshape(pixels, conv.K)[rows].astype(np.float64)
        error = float(cupy.abs(got - ref).max() / cupy.abs(ref).max())
        ok = bool(cupy.isfinite(y).all()) and error < 2e-3
        times = []
        for variant in ("before", "pointwise", "four"):
            cuda_plan.pointwise_pays = (lambda prob: False) if variant == "before" else pays
            cuda_plan.PointwiseArgs.grid = grid if variant != "four" else (
                lambda self, prob, sms: (cuda_plan.even(self.tiles, min(self.per_sm, 4) * sms),
                                         1, 1))
            im2win.cuda._calls.clear()          # remembered calls hold the last variant's plan
            launch._executables.clear()         # and Executables the grid of its own
            call, _ = bind(im2win.conv2d, [x], w, "NHWC", conv.kwargs)
            times.append(graph_time(call, False) * 1e6)
        cuda_plan.pointwise_pays, cuda_plan.PointwiseArgs.grid = pays, grid
        im2win.cuda._calls.clear()
        cudnn_us = float("nan")
        if have_torch:
            call, _ = bind(bench.CUDNN, [x], w, "NHWC", conv.kwargs)
            cudnn_us = graph_time(call, True) * 1e6
        moved = (x.nbytes + w.nbytes + y.nbytes) / (times[1] * 1e-6) / 1e9
        print(f"{conv.name} | {conv.C} | {conv.K} | {pixels} | {error:.1e}{'' if ok else ' WRONG'}"
              f" | {times[0]:.1f} | {times[1]:.1f} | {times[2]:.1f} | {cudnn_us:.1f} | "
              f"{moved:.0f}", flush=True)
        del x, w, y
        cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
