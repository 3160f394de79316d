"""Where a float32 layer's time goes in whole waves of blocks: each layer's planned call
("auto", and with split-K off) timed over a range of batch sizes in one process on the GPU
machine, with the blocks its im2win_ffma.cu grid launches and the waves they make (blocks /
(SMs x blocks an SM)). If the time per image falls as a partial last wave fills, the tail
costs what it saves; a time that steps with whole waves says a persistent or stream-K
schedule would pay (docs/hopper.md, step 24: it does not, on cv9 and cv10).

``python3 tools/waves_probe.py [--layers cv5,cv6,cv9,cv10,cv11,cv12,cv8] [--layouts NHWC]
[--batches 96,104,...]`` (default: for each layer 96, 128 and the batches on either side of
the last two whole waves below 129, where one more image adds a wave's tail). GPU time by
CUDA events (median, `bench.GPU.time`), inputs from `bench.prepare`; each call's first image
checked against the float64 GPU path. Table last.
"""

import argparse
import pathlib
import sys

import cupy
import numpy as np

import im2win
from im2win import bench
from im2win.cuda import launch, plan as planning
from im2win.cuda.tuning import Options
from im2win.layers import LAYERS

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from prewarm import shape_problem  # noqa: E402

NO_SPLIT = Options(split_k=False)


def blocks(layer, batch: int, layout: str, sms: int, options: Options) -> tuple[str, int, int]:
    """(kernel, blocks launched, blocks an SM) of the planned im2win_ffma.cu launch for a
    contiguous x and w, or (algorithm, 0, 0) for another plan (shapes only: nothing
    allocated)."""
    prob, strides = shape_problem(layer, batch, "float32", layout)
    p = planning.make_plan(prob, x_strides=strides, w_aligned=True, arch=90, sms=sms,
                           options=options)
    inner = p.inner if p.inner is not None else p
    if inner.file != "im2win_ffma":
        return p.algorithm, 0, 0
    gx, gy, gz = inner.grid(batch, prob.G)
    return inner.kernel, gx * gy * gz, planning.ffma_blocks_per_sm(inner.tile)


def edges(layer, layout: str, sms: int) -> list[int]:
    """96, 128, and N, N + 1 where N + 1 images are the first to start another wave (the last
    two such N below 128)."""
    def waves(n):
        _, count, per_sm = blocks(layer, n, layout, sms, NO_SPLIT)
        return count // (sms * per_sm) if per_sm else 0
    out, n, full = {96, 128}, 128, waves(128)
    while n > 64 and len(out) < 6:
        n -= 1
        now = waves(n)
        if now < full:
            out |= {n, n + 1}
            full = now
    return sorted(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="cv5,cv6,cv9,cv10,cv11,cv12,cv8")
    ap.add_argument("--layouts", default="NHWC")
    ap.add_argument("--batches")
    args = ap.parse_args()
    device = bench.GPU()
    sms = launch.sm_count(0)
    rows = []
    for layout in args.layouts.split(","):
        for name in args.layers.split(","):
            layer = LAYERS[name]
            batches = [int(b) for b in args.batches.split(",")] if args.batches else \
                edges(layer, layout, sms)
            for batch in batches:
                prob, _, _, x, w = bench.prepare(layer, batch, "float32", layout, device)
                ref = im2win.conv2d(x[:1].astype(np.float64), w.astype(np.float64),
                                    layout=layout, **layer.kwargs)      # the float64 kernels
                for label, options in (("auto", None), ("no split", NO_SPLIT)):
                    kernel, n_blocks, per_sm = blocks(layer, batch, layout, sms,
                                                      options or Options())

                    def call():
                        return im2win.conv2d(x, w, layout=layout, options=options,
                                             **layer.kwargs)
                    y = call()
                    err = float(cupy.abs(y[:1] - ref).max() / cupy.abs(ref).max())
                    seconds = device.time(call)
                    waves = n_blocks / (sms * per_sm) if per_sm else float("nan")
                    rows.append((layout, name, label, batch, seconds * 1e6,
                                 seconds * 1e6 / batch, prob.flops / seconds / 1e12, n_blocks,
                                 waves, err, kernel))
                    print(*rows[-1], flush=True)
    print(f"\n{'layout':6} {'layer':5} {'plan':8} {'batch':>5} {'us':>8} {'us/img':>7} "
          f"{'TFLOPS':>6} {'blocks':>6} {'waves':>6} {'error':>8}  kernel")
    for r in rows:
        print(f"{r[0]:6} {r[1]:5} {r[2]:8} {r[3]:5d} {r[4]:8.1f} {r[5]:7.3f} {r[6]:6.1f} "
              f"{r[7]:6d} {r[8]:6.2f} {r[9]:8.1e}  {r[10]}")


if __name__ == "__main__":
    main()
