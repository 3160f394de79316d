"""im2win_ffma.cu's kTaps form (a float32 stem's window runs read from x through the reduction
table, no window tensor) against the materialised runs, in one process on the GPU machine.

``python3 tools/taps_dev.py [--layers cv1,cv2,cv3,cv7] [--layouts NCHW,NHWC] [--batch 128]``:
for each layer and layout, launches the kTaps kernel (with and without kExact) on the same x
and w as `im2win.conv2d` with Options(fused_runs=False) ("runs": cv1 and cv2 over their
materialised window's runs; cv3 and cv7 on narrow_ffma.cu), checks that its output equals
that call's bit for bit where it runs the runs (the same products in the same order) and
against float64 (PyTorch) on the first and last images with y poisoned first, then times the
kernel alone (the filter's window order, one small launch in the library, not counted), the
"runs" call, the call with Options(fused_runs=True) ("fused": kTaps) and cuDNN FP32
(TF32 off; channels-last for NHWC), CUDA events, median of 20, alternating. Table last
(TFLOPS).
"""

import argparse

import cupy
import numpy as np
import torch

import im2win
from im2win.arrays import checked_problem
from im2win.cuda import Options, launch
from im2win.cuda.plan import (FFMA_STAGED_NCHW, ffma_kernel_name, geometry, make_plan,
                              runs_reduction, runs_taps, runs_tile)
from im2win.layers import LAYERS


def window_filter(w, layout: str, redp: int):
    """w_win[k, (s*R + r)*C + c] = w[k, r, s, c], rows redp long (zeros past S*R*C)."""
    wt = w.transpose((0, 3, 2, 1) if layout == "NCHW" else (0, 2, 1, 3))   # (k, s, r, c)
    K = w.shape[0]
    out = cupy.zeros((K, redp), cupy.float32)
    out[:, :wt[0].size] = wt.reshape(K, -1)
    return out


def taps_call(x, w, layout, stride, exact, padding=0, compile_only=False):
    """The kTaps kernel on the planner's runs tile, table and name (plan.runs_tile,
    plan.runs_taps, plan.ffma_kernel_name), forced also where runs_refusal would refuse the
    stem (cv3, cv7: their runs not 16-byte aligned, which kTaps does not need)."""
    prob, x, w, _ = checked_problem(x, w, None, layout=layout, stride=stride, padding=padding)
    xs = launch.element_strides(x, layout)
    tile = runs_tile(prob, None)
    geo = geometry(prob, True, prob.N, xs)._replace(
        red=prob.reduction, redp=runs_reduction(prob), y_nchw=int(layout == "NCHW"))
    nchw_y = 0 if layout == "NHWC" else 2 if FFMA_STAGED_NCHW and geo.PQ % 4 else 1
    name = ffma_kernel_name(tile, Options(), nchw_y=nchw_y, exact=exact, taps=True)
    if compile_only:
        return name
    fn = launch.kernel("im2win_ffma", name)
    table = cupy.asarray(np.frombuffer(runs_taps(prob, xs), np.int32))
    w_win = window_filter(w, layout, geo.redp)
    grid = (-(-geo.npix // tile.BN), -(-prob.K // tile.BM), 1)
    args_geo = launch.geometry_scalar(geo, prob.N)

    def run(y):
        fn(grid, (tile.threads, 1, 1), (x, w_win, launch.NULL, y, table, args_geo, np.int32(0)))
        return y
    return run, prob.y_shape, name


def reference64(x, w, layout, stride, images, padding=0):
    xt = torch.as_tensor(cupy.asnumpy(x[images]), dtype=torch.float64, device="cuda")
    wt = torch.as_tensor(cupy.asnumpy(w), dtype=torch.float64, device="cuda")
    if layout == "NHWC":
        xt, wt = xt.permute(0, 3, 1, 2), wt.permute(0, 3, 1, 2)
    y = torch.nn.functional.conv2d(xt, wt, stride=stride, padding=padding)
    if layout == "NHWC":
        y = y.permute(0, 2, 3, 1)
    return y.contiguous().cpu().numpy()


def rel_error(got, want) -> float:
    return float(np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want))


def timed(fn, reps=20):
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(reps):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return float(np.median(times))


def compile_one(name: str) -> str:
    launch.kernel("im2win_ffma", name)
    return name


def prewarm(layers, layouts, batch):
    """Compile every kTaps kernel the run needs, in parallel, into CuPy's disk cache."""
    import concurrent.futures
    import multiprocessing
    names = set()
    for name in layers:
        layer = LAYERS[name]
        for layout in layouts:
            xs, ws = layer.shapes(batch, layout)
            x, w = (np.lib.stride_tricks.as_strided(np.empty(1, np.float32), s, (0,) * 4)
                    for s in (xs, ws))
            for exact in (True, False):
                names.add(taps_call(x, w, layout, layer.stride, exact, compile_only=True))
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(16, mp_context=ctx) as pool:
        for done in pool.map(compile_one, sorted(names)):
            print("compiled", done, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", default="cv1,cv2,cv3,cv7")
    ap.add_argument("--layouts", default="NCHW,NHWC")
    ap.add_argument("--batch", type=int, default=128)
    args = ap.parse_args()
    prewarm(args.layers.split(","), args.layouts.split(","), args.batch)
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    rng = cupy.random.default_rng(0)
    rows = []
    for name in args.layers.split(","):
        layer = LAYERS[name]
        for layout in args.layouts.split(","):
            xs, ws = layer.shapes(args.batch, layout)
            x = rng.standard_normal(xs, dtype=cupy.float32)
            w = rng.standard_normal(ws, dtype=cupy.float32)
            prob, _, _, _ = checked_problem(x, w, None, layout=layout, stride=layer.stride)
            runs = Options(fused_runs=False)
            plan = make_plan(prob, x_strides=launch.element_strides(x, layout), w_aligned=True,
                             options=runs)
            y_auto = im2win.conv2d(x, w, stride=layer.stride, layout=layout, options=runs)
            cupy.cuda.Device().synchronize()
            want = reference64(x, w, layout, layer.stride, [0, args.batch - 1])
            auto_err = rel_error(cupy.asnumpy(y_auto[[0, args.batch - 1]]), want)
            row = dict(layer=name, layout=layout, path=plan.algorithm, auto_err=auto_err)
            variants = {}
            for exact in (True, False):
                run, y_shape, kname = taps_call(x, w, layout, layer.stride, exact)
                y = cupy.full(y_shape, cupy.nan, cupy.float32)
                run(y)
                cupy.cuda.Device().synchronize()
                err = rel_error(cupy.asnumpy(y[[0, args.batch - 1]]), want)
                same = bool((y == y_auto).all()) if plan.algorithm == "im2win_runs" else None
                print(f"{name} {layout} {kname}: rel error {err:.2e} (runs {auto_err:.2e}), "
                      f"bit-equal to the runs: {same}", flush=True)
                variants["exact" if exact else "checked"] = (run, y)
                row[f"err_{'exact' if exact else 'checked'}"] = err
                row[f"same_{'exact' if exact else 'checked'}"] = same
            xt = torch.as_tensor(x, device="cuda")
            wt = torch.as_tensor(w, device="cuda")
            if layout == "NHWC":
                xt = xt.permute(0, 3, 1, 2)
                wt = wt.permute(0, 3, 1, 2)
                xt = xt.contiguous(memory_format=torch.channels_last)
                wt = wt.contiguous(memory_format=torch.channels_last)
            out = cupy.empty_like(y_auto)
            fns = {"runs": lambda: im2win.conv2d(x, w, stride=layer.stride, layout=layout,
                                                 out=out, options=runs),
                   "auto": lambda: im2win.conv2d(x, w, stride=layer.stride, layout=layout,
                                                 out=out, options=Options(fused_runs=True)),
                   "cudnn": lambda: torch.nn.functional.conv2d(xt, wt, stride=layer.stride)}
            for key, (run, y) in variants.items():
                fns[key] = (lambda run=run, y=y: run(y))
            for fn in fns.values():
                for _ in range(3):
                    fn()
            cupy.cuda.Device().synchronize()
            times = {k: [] for k in fns}
            for _ in range(3):
                for k, fn in fns.items():
                    times[k].append(timed(fn))
            gflop = 2 * prob.N * prob.K * prob.P * prob.Q * prob.C * prob.R * prob.S / 1e9
            for k, ts in times.items():
                row[k] = gflop / min(ts)                  # TFLOPS: GFLOP a millisecond
            rows.append(row)
            print(row, flush=True)
    print()
    print(f"{'layer':6} {'layout':6} {'runs path':14} {'runs':>7} {'taps':>7} {'checked':>8} "
          f"{'fused':>7} {'cudnn':>7}  bit-equal  rel error (taps / runs)")
    for r in rows:
        print(f"{r['layer']:6} {r['layout']:6} {r['path']:14} {r['runs']:>7.1f} "
              f"{r['exact']:>7.1f} {r['checked']:>8.1f} {r['auto']:>7.1f} {r['cudnn']:>7.1f}  "
              f"{str(r['same_exact']):9}  {r['err_exact']:.1e} / {r['auto_err']:.1e}")


if __name__ == "__main__":
    main()
