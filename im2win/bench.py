"""The main job: time im2win on the twelve benchmark layers, check every result, print a table.

``python -m im2win [bench] [--suite NETWORK|all] [--layers cv1,cv5] [--batch N]
[--dtype float32] [--layout NCHW] [--device auto|cpu|gpu] [--precision float32|tf32|3xtf32]
[--op forward|backward_data|backward_filter] [--compare] [--json PATH]``

With ``--suite``, the layers are every distinct convolution of a network of `im2win.networks`
(ResNet-50, MobileNetV2, EfficientNet-B0, ConvNeXt-T, ResNeXt-50 32x4d, or all), and a summary
follows the table: speed against the baseline by layer class and by network, each layer
weighted by how often the network runs it.

Every row times what a user pays for (the window transform, padding, layout copies, allocation,
the host's work) after a warm-up call, as the median of repeated synchronised calls, and counts
FLOPs as 2*N*K*P*Q*(C/G)*R*S whatever the algorithm does. On the GPU a second time, "GPU ms", is
that of the same call issued back to back without synchronising (CUDA events around a run of
calls, divided by their number): what a user's loop sees once the host keeps ahead. Extra memory
is the peak allocated during one call, less the output. Each result is compared, on a sample of
images, with the float64 reference on the same inputs; the exit status is 1 if any is wrong.

``python -m im2win overhead [--device auto|cpu|gpu] [--calls 200] [--repeats 5] [--json PATH]``
times the host's cost of one cached call on a tiny convolution (`OVERHEAD_CASE`), and the same
calls until the device has finished them, against ``torch.nn.functional.conv2d`` on the same
arrays when PyTorch can run there.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import itertools
import json
import math
import os
import platform
import statistics
import sys
import time
import tracemalloc
from typing import Callable, NamedTuple

import numpy as np

import im2win
from im2win import baselines, cuda, reference
from im2win.layers import LAYERS, Layer
from im2win.networks import NETWORKS
from im2win.problem import make_problem
from im2win.testing import allowed_error, relative_error

# Default CPU batch: the twelve layers, checks included, take about 12 s on 2 cores (20-30 s with
# --compare), well inside the minute the main job may take there.
CPU_BATCH = 8
GPU_BATCH = 128
# The networks' convolutions (--suite): batch 32 on the GPU (issue 12's), 2 on the CPU.
SUITE_BATCH = {"gpu": 32, "cpu": 2}


class CPU:
    """Host timing (perf_counter) and host memory (tracemalloc, which NumPy reports to)."""

    name = "cpu"
    batch = CPU_BATCH

    @staticmethod
    def sync():
        """Wait for queued work (none on the CPU)."""

    @staticmethod
    def asarray(a):
        return a

    @staticmethod
    def to_host(a):
        return a

    @staticmethod
    def time(fn, min_runs=3, max_runs=20, min_seconds=0.5) -> float:
        """Median seconds of `fn()` after one warm-up call."""
        fn()
        runs, start = [], time.perf_counter()
        while len(runs) < min_runs or (len(runs) < max_runs
                                       and time.perf_counter() - start < min_seconds):
            t0 = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - t0)
        return statistics.median(runs)

    @staticmethod
    def back_to_back(fn):
        """None: on the CPU a call is synchronous, so its time is already the whole story."""
        return None

    @staticmethod
    def extra_memory(fn) -> int:
        """Peak bytes allocated during `fn()` beyond what it returns."""
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            y = fn()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        return max(0, peak - before - y.nbytes)


class GPU:
    """CUDA-event timing on the current stream and device-memory high-water marks (CuPy's pool
    through a memory hook, PyTorch's allocator through its peak statistics)."""

    name = "gpu"
    batch = GPU_BATCH

    def __init__(self):
        import cupy
        self.cupy = cupy

    def sync(self):
        self.cupy.cuda.get_current_stream().synchronize()

    def asarray(self, a):
        return self.cupy.asarray(a)

    def to_host(self, a):
        return self.cupy.asnumpy(a)

    def host_time(self, fn, calls=20) -> float:
        """Seconds of host time per call of `fn()`, `calls` calls issued without synchronising
        (after one warm-up call; the GPU runs behind): what issuing a call costs the CPU."""
        fn()
        self.sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        self.sync()
        return (t1 - t0) / calls

    def back_to_back(self, fn, calls=10, repeats=3) -> float:
        """Median seconds per call of `calls` calls of `fn()` issued without synchronising,
        between CUDA events (after one warm-up call)."""
        cupy = self.cupy
        fn()
        runs = []
        for _ in range(repeats):
            begin, end = cupy.cuda.Event(), cupy.cuda.Event()
            begin.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            runs.append(cupy.cuda.get_elapsed_time(begin, end) / 1e3 / calls)
        return statistics.median(runs)

    def time(self, fn, min_runs=10, max_runs=100, min_seconds=0.3) -> float:
        """Median seconds of `fn()` between CUDA events, after one warm-up call."""
        cupy = self.cupy
        fn()
        runs, start = [], time.perf_counter()
        while len(runs) < min_runs or (len(runs) < max_runs
                                       and time.perf_counter() - start < min_seconds):
            begin, end = cupy.cuda.Event(), cupy.cuda.Event()
            begin.record()
            fn()
            end.record()
            end.synchronize()
            runs.append(cupy.cuda.get_elapsed_time(begin, end) / 1e3)
        return statistics.median(runs)

    def extra_memory(self, fn) -> int:
        """Peak device bytes allocated during `fn()` beyond what it returns."""
        torch = sys.modules.get("torch")
        hook = _PeakHook(self.cupy)
        if torch is not None:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            torch_before = torch.cuda.memory_allocated()
        with hook:
            y = fn()
            self.sync()
        extra = hook.peak
        if torch is not None:
            extra += torch.cuda.max_memory_allocated() - torch_before
        return max(0, extra - y.nbytes)


def _PeakHook(cupy):
    """A CuPy memory hook that keeps the high-water mark of bytes allocated while it is on."""
    class PeakHook(cupy.cuda.MemoryHook):
        name = "im2win_peak"

        def __init__(self):
            self.current = self.peak = 0

        def malloc_postprocess(self, device_id, size, mem_size, mem_ptr, pmem_id):
            self.current += mem_size
            self.peak = max(self.peak, self.current)

        def free_postprocess(self, device_id, mem_size, mem_ptr, pmem_id):
            self.current -= mem_size
    return PeakHook()


def select_device(name: str):
    """Return the device object for "cpu", "gpu" or "auto" (the GPU when CuPy sees one)."""
    if name == "gpu" and not cuda.is_available():
        raise NotImplementedError("no GPU is visible (CuPy missing, or no CUDA device); use "
                                  "--device cpu")
    if name == "gpu" or (name == "auto" and cuda.is_available()):
        return GPU()
    return CPU


class Native(NamedTuple):
    """An implementation that runs on arrays of its own library, as its users hold them:
    `adopt(a, layout)` makes one from a benchmark CuPy array (once, outside the timing),
    `call(x, w, layout=, **kwargs)` is what is timed, and `back(y, layout)` gives its result
    as a CuPy array (outside the timing)."""

    adopt: Callable
    call: Callable
    back: Callable


def torch_view(a, layout: str):
    """A zero-copy PyTorch view of the CuPy array `a` as torch's conv2d takes it: NHWC arrays
    become channels-last NCHW tensors, cuDNN's NHWC path."""
    import torch
    t = torch.from_dlpack(a)
    return t.permute(0, 3, 1, 2) if layout == "NHWC" else t


def torch_conv2d(tx, tw, *, layout, **kwargs):
    """PyTorch's conv2d (cuDNN: best algorithm, TF32 off) with conv2d's stride, padding
    (symmetric), dilation and groups, on torch tensors."""
    import torch
    return torch.nn.functional.conv2d(tx, tw, **kwargs)


def from_torch(ty, layout: str):
    """The CuPy array of torch's result, in the layout's shape (zero-copy)."""
    import cupy
    return cupy.from_dlpack(ty.permute(0, 2, 3, 1) if layout == "NHWC" else ty)


# cuDNN as a PyTorch user meets it: the timed call is torch's conv2d on tensors they already
# hold, not our DLPack conversions at its door.
CUDNN = Native(torch_view, torch_conv2d, from_torch)


def bind(fn, inputs: list, w, layout: str, kwargs: dict):
    """(call, first): `call()` runs fn on the next of `inputs` (cycling) with w, the timed
    unit; `first()` runs it on inputs[0] and returns the result as the benchmark's array type.
    A `Native` fn gets its own arrays, made here once."""
    back = lambda y: y                               # noqa: E731
    if isinstance(fn, Native):
        native, fn = fn, fn.call
        inputs, w = [native.adopt(a, layout) for a in inputs], native.adopt(w, layout)
        back = lambda y: native.back(y, layout)      # noqa: E731
    turn = itertools.cycle(inputs)

    def call():
        return fn(next(turn), w, layout=layout, **kwargs)

    def first():
        return back(fn(inputs[0], w, layout=layout, **kwargs))
    return call, first


def torch_cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    if not torch.cuda.is_available():
        return False
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    return True


def materialised(x, w, **kwargs):
    """im2win with the window tensor materialised (transform, then convolve) on the GPU."""
    return im2win.conv2d(x, w, algorithm="im2win", **kwargs)


def implementations(device, compare: bool, dtype: str = "float32",
                    precision: str = "float32") -> dict:
    """The callables to time, by name: im2win (the planner's default, at `precision`), then
    with --compare its FP32 path ("im2win-float32", when `precision` is another), on the GPU
    its materialised mode, then the baselines on the same device (no im2col+GEMM for bfloat16
    on the GPU)."""
    impls = {"im2win": im2win.conv2d}
    if precision != "float32":
        impls["im2win"] = functools.partial(im2win.conv2d, precision=precision)
        if compare:
            impls["im2win-float32"] = im2win.conv2d
    if compare:
        if device.name == "gpu":
            impls["im2win-materialised"] = materialised
        if not (device.name == "gpu" and dtype == "bfloat16"):
            impls["im2col+gemm"] = baselines.im2col_gemm
        if device.name == "gpu" and torch_cuda_available():
            impls["cudnn"] = CUDNN
    return impls


def make_inputs(layer: Layer, batch: int, dtype: str, layout: str, seed: int = 0):
    """Random x, w of `layer` (uniform in [-1, 1), never zeros) on the host, in `dtype`."""
    rng = np.random.default_rng(seed)
    x_shape, w_shape = layer.shapes(batch, layout)
    x = rng.uniform(-1, 1, x_shape).astype(dtype)
    w = rng.uniform(-1, 1, w_shape).astype(dtype)
    return x, w


@dataclasses.dataclass
class Row:
    """One measured (layer, implementation)."""

    layer: str
    impl: str
    x_shape: tuple
    w_shape: tuple
    stride: int
    gflop: float
    time_ms: float
    tflops: float
    gpu_ms: float | None
    extra_bytes: int
    rel_error: float
    allowed_error: float

    @property
    def ok(self) -> bool:
        return self.rel_error <= self.allowed_error     # False for NaN too


def sample_images(batch: int) -> list[int]:
    """Images whose outputs are checked: the first and the last."""
    return sorted({0, batch - 1})


def prepare(layer: Layer, batch: int, dtype: str, layout: str, device):
    """Random inputs of `layer` on `device`; return (problem, host x, host w, device x, device w)."""
    x_host, w_host = make_inputs(layer, batch, dtype, layout)
    x, w = device.asarray(x_host), device.asarray(w_host)
    return make_problem(x, w, layout=layout, **layer.kwargs), x_host, w_host, x, w


def rotation(x, device) -> list:
    """x and enough copies of it that cycling through them never finds the inputs in the
    GPU's L2 cache (three times its size); just x on the CPU."""
    if device.name != "gpu":
        return [x]
    l2 = device.cupy.cuda.Device().attributes["L2CacheSize"]
    return [x] + [x.copy() for _ in range(min(15, 3 * l2 // max(x.nbytes, 1)))]


def bench_layer(layer: Layer, batch: int, dtype: str, layout: str, device, compare: bool,
                precision: str = "float32"):
    """Measure every implementation on one layer; return its rows (im2win's at `precision`,
    its error bound that precision's)."""
    prob, x_host, w_host, x, w = prepare(layer, batch, dtype, layout, device)
    sample = sample_images(batch)
    ref = reference.conv2d(x_host[sample].astype(np.float64), w_host.astype(np.float64),
                           layout=layout, **layer.kwargs)
    inputs = rotation(x, device)
    rows = []
    for impl, fn in implementations(device, compare, dtype, precision).items():
        call, first = bind(fn, inputs, w, layout, layer.kwargs)
        try:
            y = device.to_host(first())[sample]
        except ValueError as err:
            if impl != "im2win" or precision == "float32":
                raise
            # The Tensor-Core precisions refuse what they cannot run (no silent fallback):
            # the layer has no im2win row, and its geometric mean counts the layers it has.
            print(f"{layer.name}: im2win at precision {precision!r} skipped: {err}",
                  file=sys.stderr)
            continue
        rows.append(measured(layer, impl, prob, x, w, device, call, relative_error(y, ref),
                             allowed_error(dtype, prob.reduction,
                                           precision if impl == "im2win" else "float32")))
    return rows


def measured(layer: Layer, impl: str, prob, x, w, device, call, rel_error: float,
             allowed: float) -> Row:
    """The Row of one implementation's timed `call` (its result already checked)."""
    seconds = device.time(call)
    gpu_seconds = device.back_to_back(call)
    return Row(layer=layer.name, impl=impl, x_shape=tuple(x.shape), w_shape=tuple(w.shape),
               stride=layer.kwargs["stride"], gflop=prob.flops / 1e9, time_ms=seconds * 1e3,
               tflops=prob.flops / seconds / 1e12,
               gpu_ms=None if gpu_seconds is None else gpu_seconds * 1e3,
               extra_bytes=device.extra_memory(call), rel_error=rel_error,
               allowed_error=allowed)


OPS = ("forward", "backward_data", "backward_filter")


def pair(v) -> list[int]:
    return [v, v] if isinstance(v, int) else list(v)


def torch_backward(op: str, shape: tuple):
    """cuDNN's gradient as a PyTorch user's autograd meets it: aten.convolution_backward on
    tensors held (channels-last for NHWC), the array the gradient does not read (x for
    backward data, w for backward filter; `shape` is its shape in the benchmark's layout) a
    placeholder in the same memory format, made at the first (untimed) call."""
    held = {}

    def call(a, b, *, layout, stride=1, padding=0, dilation=1, groups=1):
        import torch
        if "other" not in held:
            nchw = shape if layout == "NCHW" else (shape[0], shape[3], *shape[1:3])
            fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
            held["other"] = torch.empty(nchw, dtype=a.dtype, device=a.device,
                                        memory_format=fmt)
        dy, x, w = (a, held["other"], b) if op == "backward_data" else (b, a, held["other"])
        mask = [op == "backward_data", op == "backward_filter", False]
        grads = torch.ops.aten.convolution_backward(
            dy, x, w, None, pair(stride), pair(padding), pair(dilation), False, [0, 0], groups,
            mask)
        return grads[0] if op == "backward_data" else grads[1]
    return Native(CUDNN.adopt, call, CUDNN.back)


def bench_backward_layer(layer: Layer, batch: int, dtype: str, layout: str, device,
                         compare: bool, op: str):
    """One layer's gradient (`op`): im2win's and, with --compare on the GPU, cuDNN's; TFLOPS
    count the forward's FLOPs (the same multiply-adds). Backward data is checked on the first
    and last image as the forward is; backward filter sums over the batch, so each
    implementation is checked by a second, untimed call on those two images alone."""
    prob, x_host, w_host, x, w = prepare(layer, batch, dtype, layout, device)
    rng = np.random.default_rng(1)
    dy_host = rng.uniform(-1, 1, prob.y_shape).astype(x_host.dtype)
    dy = device.asarray(dy_host)
    sample = sample_images(batch)
    wide = lambda a: a.astype(np.float64)  # noqa: E731
    if op == "backward_data":
        shape, first_in, second = prob.x_shape, rotation(dy, device), w
        ours = functools.partial(_backward_data, shape=shape)
        ref = reference.conv2d_backward_data(wide(dy_host[sample]), wide(w_host),
                                             (len(sample), *shape[1:]), layout=layout,
                                             **layer.kwargs)
    else:
        shape, first_in, second = prob.w_shape, rotation(x, device), dy
        ours = functools.partial(_backward_filter, shape=shape)
        ref = reference.conv2d_backward_filter(wide(x_host[sample]), wide(dy_host[sample]),
                                               shape, layout=layout, **layer.kwargs)
    impls = {"im2win": ours}
    if compare and device.name == "gpu" and torch_cuda_available():
        impls["cudnn"] = torch_backward(op, prob.x_shape if op == "backward_data"
                                        else prob.w_shape)
    if op == "backward_filter":     # the two images the check's own calls take
        x_s, dy_s = device.asarray(x_host[sample]), device.asarray(dy_host[sample])
    reduction = prob.Kg * prob.R * prob.S if op == "backward_data" else prob.N * prob.P * prob.Q
    rows = []
    for impl, fn in impls.items():
        call, first = bind(fn, first_in, second, layout, layer.kwargs)
        if op == "backward_data":
            result = device.to_host(first())[sample]
        else:       # a call of its own on the two images (w's placeholder: any batch)
            result = device.to_host(bind(fn, [x_s], dy_s, layout, layer.kwargs)[1]())
        rows.append(measured(layer, impl, prob, x, w, device, call,
                             relative_error(result, ref), allowed_error(dtype, reduction)))
    return rows


def _backward_data(dy, w, *, shape, layout, **kwargs):
    return im2win.conv2d_backward_data(dy, w, shape, layout=layout, **kwargs)


def _backward_filter(x, dy, *, shape, layout, **kwargs):
    return im2win.conv2d_backward_filter(x, dy, shape, layout=layout, **kwargs)


def suite_summary(rows: list[Row], convs: list) -> dict | None:
    """im2win against the first baseline measured (cuDNN, else im2col+GEMM): the geometric
    mean of per-layer speed ratios over all layers and by layer class (a layer counts in each
    class it has, `NetConv.kinds`; with the slowest layer's ratio), and by network the ratio
    of total times, each layer weighted by how often the network runs it. `rows` need only
    layer, impl and time_ms. None without a baseline."""
    times = {(r.layer, r.impl): r.time_ms for r in rows}
    base = next((b for b in ("cudnn", "im2col+gemm") if any(r.impl == b for r in rows)), None)
    if base is None:
        return None
    ratios, by_kind, by_net = [], {}, {}
    for conv in convs:
        ratio = times[conv.name, base] / times[conv.name, "im2win"]
        ratios.append(ratio)
        for kind in conv.kinds:
            by_kind.setdefault(kind, []).append(ratio)
        ours, theirs = by_net.get(conv.name.split(".")[0], (0.0, 0.0))
        by_net[conv.name.split(".")[0]] = (ours + conv.count * times[conv.name, "im2win"],
                                           theirs + conv.count * times[conv.name, base])
    geo = lambda v: math.exp(sum(map(math.log, v)) / len(v))  # noqa: E731
    return {"baseline": base, "all": {"layers": len(ratios), "speedup": geo(ratios)},
            "kinds": {k: {"layers": len(v), "speedup": geo(v), "slowest": min(v)}
                      for k, v in by_kind.items()},
            "networks": {n: {"im2win_ms": ours, f"{base}_ms": theirs, "speedup": theirs / ours}
                         for n, (ours, theirs) in by_net.items()}}


def format_summary(summary: dict) -> str:
    base = summary["baseline"]
    lines = [f"speed against {base} (>1: im2win faster), by layer class (geometric mean):"]
    lines += [f"  {kind:>10}: {v['speedup']:.2f}x over {v['layers']} layers"
              for kind, v in summary["kinds"].items()]
    lines.append("by network (total time of its convolutions, each as often as it occurs):")
    lines += [f"  {net:>16}: {v['speedup']:.2f}x ({v['im2win_ms']:.2f} ms against "
              f"{v[base + '_ms']:.2f} ms)" for net, v in summary["networks"].items()]
    return "\n".join(lines)


def progress(done: int, total: int, label: str) -> None:
    """Draw a progress bar on stderr when it is a terminal."""
    if not sys.stderr.isatty():
        return
    width = 30
    filled = width * done // total
    end = "\n" if done == total else ""
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label:<8}{end}")
    sys.stderr.flush()


def format_table(rows: list[Row]) -> str:
    """Rows as an aligned text table, then the geometric-mean TFLOPS of each implementation."""
    head = ("layer", "impl", "x", "w", "s", "GFLOP", "ms", "TFLOPS", "GPU ms", "extra MiB",
            "rel err", "ok")
    body = [(r.layer, r.impl, "x".join(map(str, r.x_shape)), "x".join(map(str, r.w_shape)),
             str(r.stride), f"{r.gflop:.2f}", f"{r.time_ms:.3f}", f"{r.tflops:.4f}",
             "-" if r.gpu_ms is None else f"{r.gpu_ms:.3f}",
             f"{r.extra_bytes / 2**20:.1f}", f"{r.rel_error:.1e}", "yes" if r.ok else "NO")
            for r in rows]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(cell.rjust(wd) for cell, wd in zip(line, widths)) for line in [head, *body]]
    lines.insert(1, "  ".join("-" * wd for wd in widths))
    for impl in dict.fromkeys(r.impl for r in rows):
        tflops = [r.tflops for r in rows if r.impl == impl]
        geomean = math.exp(sum(map(math.log, tflops)) / len(tflops))
        lines.append(f"geometric mean, {impl}: {geomean:.4f} TFLOPS over {len(tflops)} layers")
    return "\n".join(lines)


# The tiny convolution whose cached call measures the host's cost (issue 9): x (N, C, H, W),
# w (K, C, R, S), padding 1. Its kernel takes a few microseconds, so the host's time shows.
OVERHEAD_CASE = ((1, 16, 8, 8), (16, 16, 3, 3), 1)


def torch_viewer(device):
    """The function that shows `device`'s arrays to PyTorch without a copy (DLPack on the GPU),
    or None where PyTorch cannot run there."""
    try:
        import torch
    except ImportError:
        return None
    if device.name == "gpu":
        return torch.from_dlpack if torch_cuda_available() else None
    return torch.from_numpy


def host_overhead(device, calls: int = 200, repeats: int = 5) -> dict:
    """Microseconds per cached call of OVERHEAD_CASE, by implementation, after a warm-up call:
    "host", the wall-clock time to issue `calls` calls (what the host spends; the GPU runs
    behind it), and "synchronised", the same run timed until the device has finished them
    (no less than the GPU's time). Medians of `repeats` runs. Implementations: im2win on the
    device's arrays, on the GPU im2win on PyTorch tensors of them ("im2win_torch"), and
    torch.nn.functional.conv2d where PyTorch runs there."""
    x_shape, w_shape, padding = OVERHEAD_CASE
    rng = np.random.default_rng(0)
    x = device.asarray(rng.standard_normal(x_shape, dtype=np.float32))
    w = device.asarray(rng.standard_normal(w_shape, dtype=np.float32))
    impls = {"im2win": (im2win.conv2d, x, w)}
    view = torch_viewer(device)
    if view is not None:
        import torch
        if device.name == "gpu":        # PyTorch CUDA tensors in and out (launch.TorchCall)
            impls["im2win_torch"] = (im2win.conv2d, view(x), view(w))
        impls["torch"] = (torch.nn.functional.conv2d, view(x), view(w))
    result = {}
    for name, (fn, a, b) in impls.items():
        fn(a, b, padding=padding)
        device.sync()
        host, synchronised = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn(a, b, padding=padding)
            t1 = time.perf_counter()
            device.sync()
            t2 = time.perf_counter()
            host.append((t1 - t0) / calls * 1e6)
            synchronised.append((t2 - t0) / calls * 1e6)
        result[name] = {"host": statistics.median(host),
                        "synchronised": statistics.median(synchronised)}
    return result


def overhead_main(args, device) -> int:
    us = host_overhead(device, args.calls, args.repeats)
    x_shape, w_shape, padding = OVERHEAD_CASE
    print(f"time per cached call on {device.name}: x {x_shape}, w {w_shape}, padding "
          f"{padding}, float32; median of {args.repeats} runs of {args.calls} calls; host: "
          f"until the last call returns, synchronised: until the device has finished")
    for name, value in us.items():
        cells = []
        for kind in ("host", "synchronised"):
            ratio = f" ({value[kind] / us['torch'][kind]:.2f}x torch)" if "torch" in us else ""
            cells.append(f"{kind} {value[kind]:7.2f} us{ratio}")
        print(f"{name:>12}: " + ", ".join(cells))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": "python -m im2win overhead", "case": OVERHEAD_CASE,
                       "calls": args.calls, "repeats": args.repeats, "us_per_call": us,
                       "machine": machine_info(device)}, f, indent=1)
    return 0


def machine_info(device) -> dict:
    """What the numbers were measured on: host, library versions, and the GPU if used."""
    info = {"device": device.name, "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "numpy": np.__version__,
            "im2win": im2win.__version__}
    if device.name == "gpu":
        cupy = device.cupy
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        info |= {"gpu": props["name"].decode(), "cupy": cupy.__version__,
                 "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion()}
        if torch_cuda_available():
            import torch
            info |= {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version()}
    return info


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m im2win",
        description="Time im2win on the twelve benchmark layers, check each result against "
                    "the float64 reference, and print a table.")
    parser.add_argument("command", nargs="?", default="bench", choices=["bench", "overhead"],
                        help="what to run: 'bench' (the default: the twelve layers) or "
                             "'overhead' (the host's time per cached call)")
    parser.add_argument("--suite", choices=list(NETWORKS) + ["all"],
                        help="instead of the twelve layers, every distinct convolution of a "
                             "network (im2win.networks; 'all': the five), with a summary per "
                             "layer class and per network")
    parser.add_argument("--layers", default=None,
                        help="comma-separated layer names (default: all of them)")
    parser.add_argument("--batch", type=int, default=None,
                        help=f"images per call (default: {GPU_BATCH} on the GPU, {CPU_BATCH} on "
                             f"the CPU; with --suite {SUITE_BATCH['gpu']} and "
                             f"{SUITE_BATCH['cpu']})")
    parser.add_argument("--dtype", default="float32",
                        choices=["float16", "bfloat16", "float32", "float64"],
                        help="bfloat16: ml_dtypes.bfloat16 arrays (cuDNN in bfloat16 as the "
                             "baseline; no im2col+cuBLAS on the GPU, CuPy's matmul has none)")
    parser.add_argument("--layout", default="NCHW", choices=["NCHW", "NHWC"])
    parser.add_argument("--precision", default="float32", choices=["float32", "tf32", "3xtf32"],
                        help="float32 only: im2win's precision (tf32, 3xtf32: Tensor Cores, "
                             "the Hopper kernel; with --compare its float32 path is timed too)")
    parser.add_argument("--op", default="forward", choices=list(OPS),
                        help="what to time: the forward convolution (the default) or one of "
                             "its gradients (cuDNN's through PyTorch's convolution_backward "
                             "with --compare)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"],
                        help="where to run (default: the GPU when CuPy sees one, else the CPU)")
    parser.add_argument("--compare", action="store_true",
                        help="also time the baselines on the same device (im2col+GEMM; on the "
                             "GPU also im2win with materialised windows, and cuDNN through "
                             "PyTorch when available)")
    parser.add_argument("--json", metavar="PATH", help="also write every number to this file")
    parser.add_argument("--calls", type=int, default=200,
                        help="overhead: calls per timed run (default 200)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="overhead: timed runs, median taken (default 5)")
    args = parser.parse_args(argv)
    if args.suite:
        args.pool = {c.name: c for net in (NETWORKS if args.suite == "all" else [args.suite])
                     for c in NETWORKS[net]}
    else:
        args.pool = dict(LAYERS)
    names = list(args.pool) if args.layers is None else \
        [name.strip() for name in args.layers.split(",") if name.strip()]
    unknown = [name for name in names if name not in args.pool]
    if unknown or not names:
        parser.error(f"unknown layer(s) {unknown}; choose from {', '.join(args.pool)}")
    args.layers = names
    if args.batch is not None and args.batch <= 0:
        parser.error("--batch must be positive")
    if args.calls <= 0 or args.repeats <= 0:
        parser.error("--calls and --repeats must be positive")
    if args.precision != "float32" and args.dtype != "float32":
        parser.error("--precision applies to --dtype float32 only")
    if args.precision != "float32" and args.op != "forward":
        parser.error("--precision applies to --op forward only")
    return args


def main(argv=None) -> int:
    """Run the benchmark; return 0 if every result is correct, 1 otherwise."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        device = select_device(args.device)
    except NotImplementedError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.precision != "float32" and device.name != "gpu":
        print(f"error: --precision {args.precision} runs on the GPU only", file=sys.stderr)
        return 2
    if args.command == "overhead":
        return overhead_main(args, device)
    batch = args.batch or (SUITE_BATCH[device.name] if args.suite else device.batch)
    print(f"im2win {im2win.__version__} on {device.name}: {args.op}, batch {batch}, "
          f"{args.dtype}, {args.layout}; median time after warm-up, everything a call "
          f"allocates included")
    rows = []
    for i, name in enumerate(args.layers):
        progress(i, len(args.layers), name)
        if args.op == "forward":
            rows += bench_layer(args.pool[name], batch, args.dtype, args.layout, device,
                                args.compare, args.precision)
        else:
            rows += bench_backward_layer(args.pool[name], batch, args.dtype, args.layout,
                                         device, args.compare, args.op)
    progress(len(args.layers), len(args.layers), "done")
    print(format_table(rows))
    summary = suite_summary(rows, [args.pool[name] for name in args.layers]) \
        if args.suite else None
    if summary:
        print(format_summary(summary))
    wrong = [f"{r.layer}/{r.impl}" for r in rows if not r.ok]
    print(f"{len(rows) - len(wrong)} of {len(rows)} results correct"
          + (f"; WRONG: {', '.join(wrong)}" if wrong else ""))
    if args.json:
        record = {"command": "python -m im2win " + " ".join(sys.argv[1:] if argv is None
                                                            else argv),
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "batch": batch, "dtype": args.dtype, "layout": args.layout, "op": args.op,
                  "machine": machine_info(device), "suite": args.suite, "summary": summary,
                  "rows": [dict(dataclasses.asdict(r), ok=r.ok) for r in rows]}
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
    return 1 if wrong else 0
