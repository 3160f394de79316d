"""The WIP streaming 1x1 kernel (docs/wip/pointwise.cu, not in the planner) on the float16 NHWC
network layers it takes: checked against float64, then timed next to im2win's default and cuDNN.

``python3 tools/pointwise_dev.py [--blocks-per-sm 4] [--layers NAME,...] [--min-pixels 25088]`` on the GPU machine.
Layers: the stride-1 1x1 layers of `im2win.networks` of one group with C and K multiples of 8,
K at most 160 and the shared memory within 227 KB (default: those over at least
--min-pixels pixels). Per layer: the relative error of
the first and last 4096 pixels against float64 (y filled with NaN first); GPU microseconds a
call replayed from a CUDA graph (`suite_profile.graph_time`) of the kernel, im2win's default
and cuDNN; and the kernel's rate against the bytes it must move (x, w and y once).
"""

import argparse
import pathlib
import sys

import cupy
import numpy as np

import im2win
from im2win import bench
from im2win.bench import GPU, SUITE_BATCH, bind, prepare
from im2win.cuda import launch as launch_module
from im2win.networks import NETWORKS

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from suite_profile import graph_time  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLE = 4096


def smem_bytes(C: int, K: int) -> int:
    """pointwise_smem_bytes<C, K>(): the filter, two stages of 64 pixel rows, the staging."""
    BM, ROW = 64, -(-C // 16) * 16 + 8
    return 2 * ((K + 2 * BM) * ROW + BM * (K + 8))


def eligible(conv) -> bool:
    return (conv.R, conv.S, conv.stride, conv.groups) == (1, 1, (1, 1), 1) and \
        conv.C % 8 == 0 and conv.K % 8 == 0 and conv.K <= 160 and not any(conv.padding) and \
        smem_bytes(conv.C, conv.K) <= 227 * 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks-per-sm", type=int, default=4)
    ap.add_argument("--layers")
    ap.add_argument("--min-pixels", type=int, default=25088)
    args = ap.parse_args()
    device = GPU()
    have_torch = bench.torch_cuda_available()
    convs = [c for net in NETWORKS.values() for c in net if eligible(c)]
    if args.layers:
        convs = [c for c in convs if c.name in args.layers.split(",")]
    else:
        convs = [c for c in convs if SUITE_BATCH["gpu"] * c.H * c.W >= args.min_pixels]
    shapes = sorted({(c.C, c.K) for c in convs})
    names = [f"pointwise_nhwc<{C}, {K}>" for C, K in shapes]
    module = cupy.RawModule(code=(ROOT / "docs" / "wip" / "pointwise.cu").read_text(),
                            options=("-std=c++17",), name_expressions=names)
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    print("layer | C | K | pixels | error | kernel us | im2win us | cuDNN us | kernel GB/s")
    for conv in convs:
        prob, _, _, x, w = prepare(conv, SUITE_BATCH["gpu"], "float16", "NHWC", device)
        bias = cupy.asarray(np.random.default_rng(1).uniform(-1, 1, conv.K), np.float16)
        fn = module.get_function(f"pointwise_nhwc<{conv.C}, {conv.K}>")
        BM, smem = 64, smem_bytes(conv.C, conv.K)
        launch_module.allow_shared_memory(fn.kernel.ptr, smem)
        pixels = prob.N * prob.H * prob.W
        grid = (min(-(-pixels // BM), args.blocks_per_sm * sms),)
        y = cupy.full(prob.y_shape, np.nan, np.float16)

        def launch(x=x, y=y, fn=fn, grid=grid, smem=smem, pixels=pixels):
            fn(grid, (128,), (x, w, bias, y, np.int64(pixels)), shared_mem=smem)
            return y
        launch()
        rows = np.r_[0:SAMPLE, pixels - SAMPLE:pixels]
        x2 = x.reshape(pixels, conv.C)[rows].astype(np.float64)
        ref = x2 @ w.reshape(conv.K, conv.C).astype(np.float64).T + bias.astype(np.float64)
        got = y.reshape(pixels, conv.K)[rows].astype(np.float64)
        error = float(cupy.abs(got - ref).max() / cupy.abs(ref).max())
        ok = bool(cupy.isfinite(y).all()) and error < 2e-3
        kernel_us = graph_time(launch, False) * 1e6
        call, _ = bind(im2win.conv2d, [x], w, "NHWC", conv.kwargs)
        ours_us = graph_time(call, False) * 1e6
        cudnn_us = float("nan")
        if have_torch:
            call, _ = bind(bench.CUDNN, [x], w, "NHWC", conv.kwargs)
            cudnn_us = graph_time(call, True) * 1e6
        moved = (x.nbytes + w.nbytes + y.nbytes) / (kernel_us * 1e-6) / 1e9
        print(f"{conv.name} | {conv.C} | {conv.K} | {pixels} | {error:.1e}{'' if ok else ' WRONG'}"
              f" | {kernel_us:.1f} | {ours_us:.1f} | {cudnn_us:.1f} | {moved:.0f}", flush=True)
        del x, w, y
        cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
