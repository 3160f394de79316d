"""Where the time of the GPU gradients goes, against cuDNN's and the forward's.

``python3 tools/gradients_dev.py [--layers cv8,cv10,cv12] [--dtype float16] [--layout NHWC]
[--batch 128]``: per layer, GPU time (bench.GPU.time: CUDA events, median after warm-up) of
the forward conv2d, of both gradients (im2win and cuDNN's convolution_backward), of backward
data's phase convolutions alone (filters re-ordered beforehand, each phase into a contiguous
output of its own: what the strided writes into dx add is the difference; stride 1 is one),
and the host time per gradient call (issuing it; the GPU runs behind). Backward filter names
the path it took (the Hopper kernel, after copies, or forward convolutions). One process,
table last.
"""

import argparse

import cupy

import im2win
from im2win import bench, gradients
from im2win.bench import GPU, GPU_BATCH, make_inputs
from im2win.cuda import wgrad
from im2win.cuda.plan import dtype_of
from im2win.layers import LAYERS
from im2win.problem import make_backward_data_problem, make_backward_filter_problem


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="cv8,cv10,cv12")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--layout", default="NHWC", choices=["NCHW", "NHWC"])
    parser.add_argument("--batch", type=int, default=GPU_BATCH)
    args = parser.parse_args()
    device, rows = GPU(), []
    bench.torch_cuda_available()                     # cuDNN's settings (benchmark, no TF32)
    for name in args.layers.split(","):
        layer = LAYERS[name]
        x_host, w_host = make_inputs(layer, args.batch, dtype_of(args.dtype), args.layout)
        x, w = cupy.asarray(x_host), cupy.asarray(w_host)
        kw = dict(layer.kwargs, layout=args.layout)
        y = im2win.conv2d(x, w, **kw)
        dy = cupy.asarray(cupy.random.default_rng(1).random(y.shape, dtype=cupy.float32)
                          .astype(y.dtype))
        data = make_backward_data_problem(dy, w, x.shape, **kw)
        filt = make_backward_filter_problem(x, dy, w.shape, **kw)
        staged = wgrad.staged(filt, x, dy)
        path = "forward convs" if staged is None else \
            "kernel" if staged[3] is None else "kernel, copies"
        calls = {
            "forward": lambda: im2win.conv2d(x, w, **kw),
            "data": lambda: im2win.conv2d_backward_data(dy, w, x.shape, **kw),
            "filter": lambda: im2win.conv2d_backward_filter(x, dy, w.shape, **kw)}
        for op, a, b, other in (("data", dy, w, data.x_shape), ("filter", x, dy, filt.w_shape)):
            fn = bench.torch_backward(f"backward_{op}", other)
            call, _ = bench.bind(fn, [a], b, args.layout, layer.kwargs)
            calls[f"cudnn {op}"] = call
        # The phases' convolutions alone, each into a contiguous output of its own.
        recorded = []
        gradients.backward_data(lambda *a, **k: recorded.append((a, k)), data, dy, w,
                                cupy.empty(data.x_shape, data.dtype))
        phases = [(a, {k: v for k, v in kwargs.items() if k != "out"})
                  for a, kwargs in recorded]
        calls["phase conv"] = lambda: [im2win.conv2d(*a, **k) for a, k in phases]
        t = {op: 1e3 * device.time(fn) for op, fn in calls.items()}
        rows.append((name, path, t, 1e6 * device.host_time(calls["data"]),
                     1e6 * device.host_time(calls["filter"])))
    print(f"{args.dtype} {args.layout}, batch {args.batch}: GPU ms (median); host us per call")
    print("layer  forward   data  cudnn  phase | filter  cudnn  path           | host data filter")
    for name, path, t, hd, hf in rows:
        phase = f"{t['phase conv']:6.3f}"
        print(f"{name:5s} {t['forward']:7.3f} {t['data']:6.3f} {t['cudnn data']:6.3f} {phase} | "
              f"{t['filter']:6.3f} {t['cudnn filter']:6.3f}  {path:14s} | {hd:9.1f} {hf:6.1f}")


if __name__ == "__main__":
    main()
