"""Develop rows_wgmma.cu in one GPU call: check it on awkward problems against the float64
reference (forced where it runs, outputs poisoned first), then time it on layers against the
planner's choice without it and cuDNN; a short table last.

    python3 tools/rows_dev.py [--layers cv4,cv8] [--dtypes float16,bfloat16] [--no-check]
        [--variants before,rows,rows2,rowsP2] [--batch 32]

"rows" is the layer on rows_wgmma (plan.rows_wgmma_pays forced true; "rowsS": S filter
stages where they fit; "rowsPN": its PROBE N, parts left out, wrong results, for timing),
"before" the planner's choice with it out (Options(window_rows=False)).
Times are back-to-back calls between CUDA events (the GPU's figure); TFLOPS count
2*N*K*P*Q*C*R*S. The twelve benchmark layers run at batch 128, the networks' at --batch.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import im2win
from im2win import bench, reference
from im2win.cuda import Options
from im2win.cuda import plan as cuda_plan
from im2win.layers import LAYERS as BENCHMARK_LAYERS
from im2win.networks import NETWORKS
from im2win.problem import make_problem
from im2win.testing import allowed_error, relative_error

# (x NHWC, w KRSC, kwargs, x's row offset into a taller buffer: strided views)
CASES = [
    ((2, 19, 30, 32), (64, 7, 7, 32), dict(stride=2), 0),
    ((3, 17, 21, 32), (20, 5, 5, 32), dict(stride=2, padding=2, bias=True), 0),
    ((2, 23, 25, 32), (64, 3, 3, 32), dict(stride=2, dilation=(2, 1), padding=(1, 0)), 0),
    ((2, 12, 40, 64), (128, 3, 3, 64), dict(padding=1, bias=True), 0),
    ((1, 6, 112, 64), (96, 3, 3, 64), dict(padding=1), 0),
    ((2, 9, 33, 64), (64, 2, 5, 64), dict(padding=((0, 3), (2, 1))), 1),
    ((3, 224, 224, 32), (64, 7, 7, 32), dict(stride=2), 0),
    ((2, 40, 31, 32), (64, 5, 3, 32), dict(stride=2, padding=((3, 2), (0, 1)), bias=True), 2),
    ((1, 5, 20, 64), (8, 3, 3, 64), dict(padding=1), 0),
]


def check(cupy, dtype) -> int:
    wrong = 0
    rng = np.random.default_rng(1)
    pays = cuda_plan.rows_wgmma_pays
    cuda_plan.rows_wgmma_pays = lambda prob: True
    try:
        for x_shape, w_shape, kwargs, offset in CASES:
            kwargs = dict(kwargs)
            has_bias = kwargs.pop("bias", False)
            N, H, W, C = x_shape
            tall = rng.standard_normal((N, H + 2 * offset, W, C)).astype(dtype)
            tall[:, :offset] = tall[:, offset + H:] = np.inf   # rows outside the view
            x_host = tall[:, offset:offset + H]
            w_host = rng.standard_normal(w_shape).astype(dtype)
            b_host = rng.standard_normal(w_shape[0]).astype(dtype) if has_bias else None
            x = cupy.asarray(tall)[:, offset:offset + H]
            w, b = cupy.asarray(w_host), None if b_host is None else cupy.asarray(b_host)
            ref = reference.conv2d(x_host.astype(np.float64), w_host.astype(np.float64),
                                   None if b_host is None else b_host.astype(np.float64),
                                   layout="NHWC", **kwargs)
            prob = make_problem(x, w, b, layout="NHWC", **kwargs)
            plan = im2win.cuda._plan(prob, x, w, "auto", None, None)
            y = cupy.full(ref.shape, np.nan, dtype)
            im2win.conv2d(x, w, b, layout="NHWC", out=y, **kwargs)
            err = relative_error(cupy.asnumpy(y).astype(np.float64), ref)
            ok = err <= allowed_error(np.dtype(dtype), prob.reduction)
            wrong += not ok
            print(f"check {np.dtype(dtype).name:8s} x{x_shape} w{w_shape} {kwargs} off {offset}: "
                  f"{plan.kernel} err {err:.2e} {'ok' if ok else 'WRONG'}",
                  flush=True)
    finally:
        cuda_plan.rows_wgmma_pays = pays
    return wrong


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", default="cv4,cv8")
    parser.add_argument("--dtypes", default="float16,bfloat16")
    parser.add_argument("--variants", default="before,rows")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--no-check", action="store_true")
    args = parser.parse_args(argv)
    import cupy
    import ml_dtypes
    wrong = 0
    dtypes = [ml_dtypes.bfloat16 if d == "bfloat16" else np.dtype(d)
              for d in args.dtypes.split(",")]
    if not args.no_check:
        for dtype in dtypes:
            wrong += check(cupy, dtype)
    device = bench.GPU()
    convs = {c.name: c for net in NETWORKS.values() for c in net}
    convs.update(BENCHMARK_LAYERS)
    pays, stages = cuda_plan.rows_wgmma_pays, cuda_plan.ROWS_WGMMA_STAGES
    kernel_name = cuda_plan.rows_wgmma_kernel_name
    lines, layout = [], "NHWC"
    for name in filter(None, args.layers.split(",")):
        conv = convs[name]
        kwargs = conv.kwargs
        batch = bench.GPU_BATCH if name in BENCHMARK_LAYERS else args.batch
        for dtype in args.dtypes.split(","):
            x_host, w_host = bench.make_inputs(conv, batch, dtype, layout)
            x, w = cupy.asarray(x_host), cupy.asarray(w_host)
            prob = make_problem(x, w, layout=layout, **kwargs)
            ref = reference.conv2d(x_host[::max(batch - 1, 1)].astype(np.float64),
                                   w_host.astype(np.float64), layout=layout, **kwargs)
            inputs = bench.rotation(x, device)
            row = [f"{name:8s} {dtype:8s}"]
            for variant in args.variants.split(","):
                rows = variant.startswith("rows")
                probe = variant[5:] if variant.startswith("rowsP") else ""
                cuda_plan.rows_wgmma_pays = (lambda prob: True) if rows else pays
                cuda_plan.ROWS_WGMMA_STAGES = (int(variant[4:]),) if rows and variant[4:] and \
                    not probe else stages
                cuda_plan.rows_wgmma_kernel_name = (
                    (lambda *a, p=probe: kernel_name(*a)[:-1] + f", {p}>") if probe else
                    kernel_name)
                options = Options(window_rows=rows)
                im2win.cuda._calls.clear()     # remembered calls hold the last variant's plan
                turn = iter(range(1 << 30))

                def call():
                    return im2win.conv2d(inputs[next(turn) % len(inputs)], w, layout=layout,
                                         options=options, **kwargs)
                try:
                    y = im2win.conv2d(x, w, layout=layout, options=options, **kwargs)
                    err = relative_error(
                        cupy.asnumpy(y[::max(batch - 1, 1)]).astype(np.float64), ref)
                    ok = err <= allowed_error(np.dtype(x.dtype), prob.reduction)
                    wrong += not ok and not probe
                    seconds = device.back_to_back(call, calls=20, repeats=5)
                    row.append(f"{variant} {seconds * 1e6:6.1f}us "
                               f"{prob.flops / seconds / 1e12:5.1f}{'' if ok else ' WRONG'}")
                except Exception as e:    # a variant that does not build or launch
                    row.append(f"{variant} ERR {type(e).__name__}: {str(e)[:200]}")
            cuda_plan.rows_wgmma_pays, cuda_plan.ROWS_WGMMA_STAGES = pays, stages
            cuda_plan.rows_wgmma_kernel_name = kernel_name
            if bench.torch_cuda_available():
                call, _ = bench.bind(bench.CUDNN, inputs, w, layout, kwargs)
                seconds = device.back_to_back(call, calls=20, repeats=5)
                row.append(f"cudnn {seconds * 1e6:6.1f}us {prob.flops / seconds / 1e12:5.1f}")
            lines.append(" | ".join(row))
            print(lines[-1], flush=True)
    print("\n".join(["", "GPU us per call (back to back) and TFLOPS, NHWC"] + lines))
    print(f"wrong: {wrong}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
