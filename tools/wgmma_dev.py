"""Develop the Hopper kernel in one GPU call: check it on awkward shapes, then time it on some
benchmark layers against the mma.sync kernel and cuDNN; a short table last.

    python3 tools/wgmma_dev.py [--layers cv4,cv8] [--layouts NHWC]
        [--tiles wg256x128,wg128x128:no_resident_filter,wg256x64:multicast:no_ping_pong,
                 wg128x128:probe1,...]
        [--dtypes float16,bfloat16] [--no-check] [--ablation] [--multicast CTAS]

Every timed variant's output is compared with the float64 reference on the first image.
``--multicast CTAS`` plans clusters of CTAS blocks where the filter is multicast
(plan.MULTICAST_CTAS; the tile's BN a multiple of 8 * CTAS). A tile's ``:probeN`` switch runs
its TMA kernel's PROBE N (im2win_wgmma_tma's bits: 1, no x boxes; 2, no wgmmas; 4, no
stores of y; 8, streaming stores; 16, y staged and bulk-copied; 32, whole tiles' stores as
straight-line code; 64, the ping-pong consumers' early hand-over; not where x's boxes are
halves of 32 channels, kHalf, which refuses to compile it): with bits 1, 2 or 4, parts left
out, wrong results, for timing only; 8, 16, 32 and 64 are checked like the rest.
``:stagesN`` runs the TMA kernel with a ring of N stages (at most the plan's) in the plan's
shared memory.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
import traceback

import numpy as np

import im2win
from im2win import bench, reference
from im2win.cuda import Options
from im2win.cuda.plan import dtype_of
from im2win.cuda.tuning import WGMMA_TILES
from im2win.layers import LAYERS
from im2win.problem import make_problem
from im2win.testing import allowed_error, relative_error

CHECKS = [  # x (N, C, H, W), w (K, C/G, R, S), keyword arguments
    ((3, 5, 13, 17), (7, 5, 3, 3), dict(padding=1)),
    ((2, 8, 11, 9), (67, 8, 3, 2), dict(padding=(0, 1))),
    ((2, 6, 19, 11), (10, 3, 3, 2), dict(groups=2, stride=(2, 1), dilation=(1, 2),
                                         padding=((2, 0), (1, 3)))),
    ((1, 3, 23, 23), (131, 3, 5, 5), dict(stride=4)),
    ((5, 8, 7, 5), (9, 8, 7, 5), dict()),
    ((2, 16, 33, 31), (300, 16, 3, 3), dict(padding=1)),
    ((3, 64, 20, 21), (96, 64, 3, 3), dict(padding=1, dilation=2)),
    ((2, 32, 15, 15), (520, 32, 1, 1), dict()),
    ((4, 128, 9, 9), (128, 128, 3, 3), dict(padding="same")),
    ((2, 96, 12, 11), (40, 96, 3, 3), dict(padding=1)),
]


def check(cupy, dtype: str, checks: int) -> list[str]:
    """Every check shape, both layouts, both window modes, each wgmma tile (and the default),
    against the float64 reference; returns the failures."""
    rng = np.random.default_rng(0)
    failures, count = [], 0
    np_dtype = np.dtype(dtype_of(dtype))
    for (x_shape, w_shape, kwargs), layout, algorithm in itertools.product(
            CHECKS[:checks], ("NHWC", "NCHW"), ("im2win_fused", "im2win")):
        x = rng.uniform(-1, 1, x_shape).astype(np_dtype)
        w = rng.uniform(-1, 1, w_shape).astype(np_dtype)
        b = rng.uniform(-1, 1, w_shape[0]).astype(np_dtype)
        if layout == "NHWC":
            x, w = x.transpose(0, 2, 3, 1).copy(), w.transpose(0, 2, 3, 1).copy()
        prob = make_problem(x, w, b, layout=layout, **kwargs)
        ref = reference.conv2d(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64),
                               layout=layout, **kwargs)
        xg, wg, bg = cupy.asarray(x), cupy.asarray(w), cupy.asarray(b)
        every_tile = len(failures) == 0 and CHECKS.index((x_shape, w_shape, kwargs)) < 3
        for tile in [None, *WGMMA_TILES] if every_tile and dtype == "float16" else [None]:
            out = cupy.full(prob.y_shape, np.nan, np_dtype)
            try:
                if tile is None:
                    im2win.conv2d(xg, wg, bg, out=out, layout=layout, algorithm=algorithm,
                                  **kwargs)
                else:
                    im2win.cuda.conv2d(prob, xg, wg, bg, out, algorithm=algorithm, tile=tile)
                cupy.cuda.Device().synchronize()
                err = relative_error(cupy.asnumpy(out).astype(np.float64), ref)
            except Exception:
                failures.append(f"{x_shape} {w_shape} {kwargs} {layout} {algorithm} {tile}: "
                                f"{traceback.format_exc(limit=2)}")
                continue
            count += 1
            if count % 20 == 1:
                print(f"  checked {count}: {x_shape} {layout} {algorithm} {tile}", flush=True)
            if not err <= allowed_error(np_dtype, prob.reduction):
                failures.append(f"{x_shape} {w_shape} {kwargs} {layout} {algorithm} {tile}: "
                                f"error {err:.3g} > {allowed_error(np_dtype, prob.reduction):.3g}")
    print(f"check {dtype}: {count - len(failures)} of {count} agree", flush=True)
    return failures


def timed(device, fn, inputs, w, layout, kwargs):
    turn = itertools.cycle(inputs)
    return device.time(lambda: fn(next(turn), w, layout=layout, **kwargs), min_runs=10,
                       min_seconds=0.2)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", default="cv4,cv5,cv8,cv10,cv12")
    parser.add_argument("--layouts", default="NHWC")
    parser.add_argument("--dtypes", default="float16")
    parser.add_argument("--check-dtypes", default="float16,bfloat16")
    parser.add_argument("--tiles", default="")
    parser.add_argument("--no-check", action="store_true")
    parser.add_argument("--ablation", action="store_true")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--checks", type=int, default=len(CHECKS))
    parser.add_argument("--multicast", type=int, default=None)
    args = parser.parse_args(argv)
    if args.multicast is not None:
        from im2win.cuda import plan as cuda_plan
        cuda_plan.MULTICAST_CTAS = args.multicast
    import cupy
    device = bench.GPU()
    have_torch = bench.torch_cuda_available()
    failures = []
    if not args.no_check:
        for dtype in args.check_dtypes.split(","):
            failures += check(cupy, dtype, args.checks)
        for f in failures[:20]:
            print("FAIL", f)
    lines = []
    for dtype, layout, name in itertools.product(args.dtypes.split(","), args.layouts.split(","),
                                                 args.layers.split(",")):
        layer = LAYERS[name]
        x_host, w_host = bench.make_inputs(layer, args.batch, "float32", layout)
        x_host, w_host = x_host.astype(dtype_of(dtype)), w_host.astype(dtype_of(dtype))
        x, w = cupy.asarray(x_host), cupy.asarray(w_host)
        prob = make_problem(x, w, layout=layout, **layer.kwargs)
        ref = reference.conv2d(x_host[:1].astype(np.float64), w_host.astype(np.float64),
                               layout=layout, **layer.kwargs)
        inputs = bench.rotation(x, device)
        variants = {"wgmma": dict()}
        for spec in filter(None, args.tiles.split(",")):   # TILE[:SWITCH|:no_SWITCH]...
            tile, *switches = spec.split(":")
            probes = {s for s in switches if s.startswith("probe")}
            if len(probes) > 1 or not all(0 < int(p[5:]) < 128 for p in probes):
                raise SystemExit(f"{spec}: im2win_wgmma_tma's PROBE is one of 1 .. 127")
            stages = [int(s[6:]) for s in switches if s.startswith("stages")]
            switches = [s for s in switches if s not in probes and not s.startswith("stages")]
            options = Options.ablations(tensor_cores=True, hopper=True)["full"]
            for switch in switches:
                on = not switch.startswith("no_")
                options = dataclasses.replace(options, **{switch.removeprefix("no_"): on})
            variants[spec] = dict(tile=tile, options=options,
                                  probe=int(probes.pop()[5:]) if probes else 0,
                                  stages=stages[0] if stages else 0)
        if args.ablation:
            for label, options in Options.ablations(tensor_cores=True, hopper=True).items():
                if label != "full":
                    variants[label] = dict(options=options)
        variants["mma.sync"] = dict(options=Options(hopper=False))
        row = [f"{name:5s} {layout} {dtype[:4]}"]
        for label, extra in variants.items():
            try:
                if "tile" in extra:      # planned once, like a remembered call
                    from im2win.cuda import _plan, launch
                    plan = _plan(prob, x, w, "im2win_fused", extra["options"], None,
                                 extra["tile"])
                    if extra["probe"]:
                        if not plan.kernel.startswith("im2win_wgmma_tma<"):
                            raise ValueError(f"no probe in {plan.kernel}")
                        plan = dataclasses.replace(
                            plan, kernel=f"{plan.kernel[:-1]}, {extra['probe']}>")
                    if extra["stages"]:    # a shallower ring in the plan's shared memory
                        head, args_ = plan.kernel[:-1].split("<", 1)
                        targs = args_.split(", ")
                        if not head.startswith("im2win_wgmma_tma") or \
                                int(targs[3]) < extra["stages"]:
                            raise ValueError(f"no ring of {extra['stages']} in {plan.kernel}")
                        targs[3] = str(extra["stages"])
                        plan = dataclasses.replace(plan, kernel=f"{head}<{', '.join(targs)}>")
                    label = f"{label}({plan.kernel.split('<')[1].split('>')[0]})"
                    call = launch.Call(prob, launch.executable(prob, plan), x, w, None, None)

                    def fn(x, w, layout, call=call, **kw):
                        return call(x, w, None, None)
                else:
                    def fn(x, w, layout, extra=extra, **kw):
                        return im2win.conv2d(x, w, layout=layout, **extra, **kw)
                y = fn(x, w, layout, **layer.kwargs)
                err = relative_error(cupy.asnumpy(y[:1]).astype(np.float64), ref)
                ok = err <= allowed_error(np.dtype(dtype_of(dtype)), prob.reduction) or \
                    bool(extra.get("probe", 0) & 7)   # parts left out: wrong by design
                seconds = timed(device, fn, inputs, w, layout, layer.kwargs)
                row.append(f"{label} {prob.flops / seconds / 1e12:6.1f}{'' if ok else ' WRONG'}")
            except Exception as e:
                row.append(f"{label} ERR {type(e).__name__}: {str(e)[:200]}")
        if have_torch and dtype in ("float16", "bfloat16"):
            call, _ = bench.bind(bench.CUDNN, inputs, w, layout, layer.kwargs)
            seconds = device.time(call, min_runs=10, min_seconds=0.2)
            row.append(f"cudnn {prob.flops / seconds / 1e12:6.1f}")
        lines.append(" | ".join(row))
        print(lines[-1], flush=True)
    print("\n".join(["", "TFLOPS (batch %d)" % args.batch] + lines))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
