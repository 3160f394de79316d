"""Where the time of an NCHW problem run on its NHWC twin goes (algorithm "im2win_nhwc").

``python3 tools/twin_dev.py [--layers cv8,cv10,cv12] [--dtype float16] [--batch 128]``: per
layer, GPU time (bench.GPU.time: CUDA events, median after warm-up) of the whole NCHW call, of
the twin's NHWC call on channels-last copies made beforehand, and of each layout copy alone
(layout.cu's, as the call plans them, x's also on 64 x 64 tiles and the filter's by
transpose_narrow; CuPy's own strided copy of x for scale), with the bandwidth each copy reaches
on the bytes it must move (read once, written once); then the host time per call. One process,
table last.
"""

import argparse

import cupy

import im2win
from im2win import cuda
from im2win.bench import GPU, GPU_BATCH, make_inputs
from im2win.cuda import launch
from im2win.cuda.plan import dtype_of
from im2win.layers import LAYERS
from im2win.problem import make_problem


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="cv8,cv10,cv12")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--batch", type=int, default=GPU_BATCH)
    args = parser.parse_args()
    names = args.layers.split(",")
    device, rows = GPU(), []
    for layer in (LAYERS[name] for name in names):
        x_host, w_host = make_inputs(layer, args.batch, dtype_of(args.dtype), "NCHW")
        x, w = cupy.asarray(x_host), cupy.asarray(w_host)
        kwargs = layer.kwargs
        prob = make_problem(x, w, layout="NCHW", **kwargs)
        plan = cuda._plan(prob, x, w, "auto", None, None)
        if plan.algorithm != "im2win_nhwc":
            raise SystemExit(f"{layer.name}: the planner runs {plan.algorithm!r} here, not the "
                             "NHWC twin (it takes it on Hopper, where the twin runs wgmma)")
        exe = launch.executable(prob, plan)
        N, C, K, P, Q = prob.N, prob.C, prob.K, prob.P, prob.Q
        HW, item = prob.H * prob.W, prob.dtype.itemsize
        x_nhwc = cupy.ascontiguousarray(x.transpose(0, 2, 3, 1))
        w_nhwc = cupy.ascontiguousarray(w.transpose(0, 2, 3, 1))
        x_t = cupy.empty_like(x_nhwc)
        y_t = cupy.empty((N, P, Q, K), prob.dtype)
        y = cupy.empty((N, K, P, Q), prob.dtype)
        full = lambda: im2win.conv2d(x, w, **kwargs)                       # noqa: E731
        inner = lambda: im2win.conv2d(x_nhwc, w_nhwc, layout="NHWC", **kwargs)  # noqa: E731
        RS, Cg = prob.R * prob.S, prob.Cg
        w_t = cupy.empty_like(w_nhwc)
        tx = lambda: exe._transpose(x, x_t, N, C, HW, C * HW, HW, 1)       # noqa: E731
        ty = lambda: exe._transpose(y_t, y, N, P * Q, K, P * Q * K, K, 1)  # noqa: E731
        tw = lambda: exe._transpose(w, w_t, K, Cg, RS, Cg * RS, RS, 1)     # noqa: E731
        stream = lambda: cupy.cuda.get_current_stream().ptr                 # noqa: E731
        tn = lambda: exe.transpose_narrow(                                  # noqa: E731
            (min(-(-w.size // 256), 8 * 65535), 1, 1), (256, 1, 1), stream(), w.data.ptr,
            w_t.data.ptr, K, Cg, RS, Cg * RS, RS, 1)
        tiles64 = -(-C // 64) * -(-HW // 64)
        t64 = lambda: exe.transpose(                                        # noqa: E731
            (tiles64, min(N, 65535), 1), (32, 8, 1), stream(), x.data.ptr, x_t.data.ptr, N, C,
            HW, C * HW, HW, 1)
        cp = lambda: cupy.ascontiguousarray(x.transpose(0, 2, 3, 1))       # noqa: E731
        x_bytes, y_bytes, w_bytes = (2 * a.size * item for a in (x, y, w))
        calls = (("full", full), ("inner", inner), ("x copy", tx), ("x 64", t64),
                 ("y copy", ty), ("w copy", tw), ("w narrow", tn), ("cupy x", cp))
        t = {name: 1e3 * device.time(fn) for name, fn in calls}      # ms
        rows.append((layer.name, plan.algorithm, t, x_bytes / t["x copy"] / 1e9,
                     x_bytes / t["x 64"] / 1e9,
                     y_bytes / t["y copy"] / 1e9, w_bytes / t["w copy"] / 1e9,
                     x_bytes / t["cupy x"] / 1e9,
                     1e6 * device.host_time(full, 50), 1e6 * device.host_time(inner, 50)))
    print(f"{args.dtype} NCHW, batch {args.batch}: GPU ms (median), copies' TB/s, host us/call "
          "(x copy: the planned one; x 64: on 64 x 64 tiles; w copy: the planned filter copy; "
          "w narrow: transpose_narrow's)")
    print("layer  plan         full   inner  x copy    x 64  y copy  w copy w narrow cupy x | "
          "x TB/s  x 64 y TB/s w TB/s cupy | host full inner")
    for name, algorithm, t, bx, b64, by, bw, bc, hf, hi in rows:
        print(f"{name:5s}  {algorithm:11s} {t['full']:6.3f} {t['inner']:7.3f} {t['x copy']:7.3f}"
              f" {t['x 64']:7.3f} {t['y copy']:7.3f} {t['w copy']:7.4f} {t['w narrow']:7.4f} "
              f"{t['cupy x']:7.3f} | {bx:6.2f} {b64:5.2f} {by:6.2f} {bw:6.2f} {bc:4.2f} | "
              f"{hf:6.1f} {hi:5.1f}")


if __name__ == "__main__":
    main()
