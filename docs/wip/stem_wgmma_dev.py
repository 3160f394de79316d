"""NOT RUN YET. Develop docs/wip/stem_wgmma.cu (a warp-specialised wgmma form of narrow.cu's
dense stems) in one GPU call: compile it (sm_90a) after common.cuh, gemm.cuh,
im2win_wgmma.cu and narrow.cu, check it against the float64 reference on awkward stems (an
infinity in x included), then time it against im2win's "auto" (narrow_dense) and cuDNN.

    python3 docs/wip/stem_wgmma_dev.py [--layers cv3,cv7,resnet50.0,mobilenet_v2.0]
        [--stages 4] [--dtype float16] [--check-only]

--check-only runs the checks alone (small: for compute-sanitizer memcheck, racecheck and
synccheck).

Times are back-to-back calls between CUDA events (bench.GPU().back_to_back), batch 128 for
the cv layers and 32 for the networks' stems.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np

import im2win
from im2win import bench, reference
from im2win.cuda.plan import KERNEL_DIR, source
from im2win.layers import LAYERS as BENCHMARK_LAYERS
from im2win.networks import NETWORKS
from im2win.problem import make_problem
from im2win.testing import allowed_error, relative_error

HERE = pathlib.Path(__file__).resolve().parent
CHECKS = [  # x (N, C, H, W), w (K, C, R, S), keyword arguments
    ((2, 3, 29, 31), (64, 3, 7, 7), dict(stride=2)),
    ((2, 3, 13, 17), (32, 3, 3, 3), dict(padding=((1, 0), (2, 1)))),       # sw*C odd
    ((3, 3, 40, 45), (64, 3, 7, 7), dict(stride=2, padding=3)),
    ((1, 2, 11, 9), (32, 2, 5, 5), dict(stride=2, padding=2)),
    ((2, 1, 9, 50), (32, 1, 2, 7), dict(stride=(1, 3), padding=(0, 3))),
]


def stem_layout(bn: int, stages: int, e: int, steps: int, rows: int, win: int,
                raw_pitch: int) -> int:
    """stem_wgmma.cu's StemLayout.total plus the 1 KB of alignment slack."""
    atoms = -(-e // 64)
    total = (atoms * bn * 128 + stages * 2 * win * 2 + 2 * rows * raw_pitch * 2 +
             2 * 128 * (bn + 8) * 2 + 2 * steps * 4 * 16 + 128 * 4 + bn * 4 + 16 * stages)
    return 1024 + total


class Stem:
    def __init__(self, dtype: str, stages: int):
        import cupy
        self.T = {"float16": "half_t", "bfloat16": "bf16_t"}[dtype]
        self.stages = stages
        code = "\n".join([source("im2win_wgmma"), (KERNEL_DIR / "narrow.cu").read_text(),
                          (HERE / "stem_wgmma.cu").read_text()])
        self.names = {bn: f"stem_wgmma<{self.T}, {bn}, {stages}>" for bn in (32, 64)}
        self.module = cupy.RawModule(code=code, options=("-std=c++17", "-arch=sm_90a"),
                                     name_expressions=list(self.names.values()))
        self.sms = cupy.cuda.Device().attributes["MultiProcessorCount"]

    def __call__(self, x, w, bias, prob, out=None):
        import cupy
        assert prob.K in self.names and prob.G == 1 and prob.dw == 1, "K 32 or 64, dw 1"
        kernel = self.module.get_function(self.names[prob.K])
        tq = -(-prob.Q // -(-prob.Q // 128))
        tp = max(1, min(prob.P, 128 // tq))
        tp = -(-prob.P // -(-prob.P // tp))
        tiles = prob.N * -(-prob.P // tp) * -(-prob.Q // tq)
        sc = prob.S * prob.C
        er = -(-sc // 2) * 2
        e = -(-prob.R * er // 16) * 16
        rows = (tp - 1) * prob.sh + (prob.R - 1) * prob.dh + 1
        cols = (tq - 1) * prob.sw + prob.S
        length = cols * prob.C
        wr = -(-(length + 2) // 8) * 8
        raw_pitch = -(-(length + 16) // 8) * 8
        smem = stem_layout(prob.K, self.stages, e, e // 16, rows, rows * wr, raw_pitch)
        kernel.max_dynamic_shared_size_bytes = smem
        y = cupy.empty(prob.y_shape, x.dtype) if out is None else out
        i32 = np.int32
        args = (x, w, bias if bias is not None else np.uint64(0), y,
                *(i32(v) for v in (prob.N, prob.C, prob.H, prob.W, prob.K, prob.R, prob.S,
                                   prob.P, prob.Q, prob.sh, prob.sw, prob.dh, prob.pt, prob.pl,
                                   tp, tq)),
                np.int64(prob.H * prob.W * prob.C), np.int64(prob.W * prob.C))
        kernel((min(tiles, self.sms), 1, 1), (384, 1, 1), args, shared_mem=smem)
        return y


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", default="cv3,cv7,resnet50.0,mobilenet_v2.0")
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--check-only", action="store_true")
    args = parser.parse_args(argv)
    import cupy
    stem = Stem(args.dtype, args.stages)
    dtype = np.float16 if args.dtype == "float16" else np.dtype(
        __import__("ml_dtypes").bfloat16)
    rng = np.random.default_rng(0)
    wrong = 0
    for x_shape, w_shape, kwargs in CHECKS + [((2, 3, 12, 15), (32, 3, 3, 3),
                                              dict(padding=1, inf=True))]:
        kwargs = dict(kwargs)
        inf = kwargs.pop("inf", False)
        x = rng.uniform(-1, 1, x_shape).astype(dtype).transpose(0, 2, 3, 1).copy()
        w = rng.uniform(-1, 1, w_shape).astype(dtype).transpose(0, 2, 3, 1).copy()
        b = rng.uniform(-1, 1, w_shape[0]).astype(dtype)
        if inf:
            x[1, 4, 6, 0] = np.inf
        prob = make_problem(x, w, layout="NHWC", **kwargs)
        ref = reference.conv2d(x.astype(np.float64), w.astype(np.float64),
                               b.astype(np.float64), layout="NHWC", **kwargs)
        poisoned = cupy.full(prob.y_shape, np.nan, x.dtype)   # every output must be written
        y = cupy.asnumpy(stem(cupy.asarray(x), cupy.asarray(w), cupy.asarray(b), prob,
                              poisoned)).astype(np.float64)
        finite = np.isfinite(ref)
        ok = (np.isfinite(y) == finite).all() and relative_error(
            np.where(finite, y, 0), np.where(finite, ref, 0)) <= allowed_error(
                np.dtype(dtype), prob.reduction)
        wrong += not ok
        print(f"check {x_shape} {w_shape} {kwargs}{' inf' if inf else ''}: "
              f"{'ok' if ok else 'WRONG'}", flush=True)
    if args.check_only:
        return 1 if wrong else 0
    device = bench.GPU()
    convs = {c.name: c for net in NETWORKS.values() for c in net}
    convs.update(BENCHMARK_LAYERS)
    lines = []
    for name in args.layers.split(","):
        conv = convs[name]
        batch = bench.GPU_BATCH if name in BENCHMARK_LAYERS else 32
        x_host, w_host = bench.make_inputs(conv, batch, args.dtype, "NHWC")
        x, w = cupy.asarray(x_host), cupy.asarray(w_host)
        prob = make_problem(x, w, layout="NHWC", **conv.kwargs)
        ref = reference.conv2d(x_host[:1].astype(np.float64), w_host.astype(np.float64),
                               layout="NHWC", **conv.kwargs)
        inputs = bench.rotation(x, device)
        turn = iter(range(1 << 30))
        y = stem(x, w, None, prob)
        err = relative_error(cupy.asnumpy(y[:1]).astype(np.float64), ref)
        ok = err <= allowed_error(np.dtype(x.dtype), prob.reduction)
        wrong += not ok
        t_stem = device.back_to_back(lambda: stem(inputs[next(turn) % len(inputs)], w, None,
                                                  prob), calls=20, repeats=5)
        t_auto = device.back_to_back(lambda: im2win.conv2d(
            inputs[next(turn) % len(inputs)], w, layout="NHWC", **conv.kwargs), calls=20,
            repeats=5)
        row = (f"{name:16s} stem_wgmma {t_stem * 1e6:7.1f} us{'' if ok else ' WRONG'} | "
               f"auto {t_auto * 1e6:7.1f} us")
        if bench.torch_cuda_available():
            call, _ = bench.bind(bench.CUDNN, inputs, w, "NHWC", conv.kwargs)
            row += f" | cudnn {device.back_to_back(call, calls=20, repeats=5) * 1e6:7.1f} us"
        lines.append(row)
        print(row, flush=True)
    print("\n".join(["", f"GPU us per call (back to back), {args.dtype} NHWC"] + lines))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
