"""Run a `Plan` with CuPy: the only module that compiles or launches kernels.

Kernel sources are the .cu files beside this one, each prefixed with common.cuh (CuPy's disk
cache does not see #include'd files). Each template instantiation is compiled once per device,
on first use, with NVRTC for the device's own architecture.
"""

from __future__ import annotations

import functools
import threading

import cupy
import numpy as np

from im2win import baselines
from im2win.cuda.plan import CUDA_TYPES, Plan, reduction_tables, source
from im2win.problem import Problem

OPTIONS = ("-std=c++17",)

# numpy twin of `struct Geometry` in gemm.cuh (64-bit fields first, no inner padding).
GEOMETRY = np.dtype([(name, np.int64) for name in
                     ("npix", "sn", "sg", "sp", "sq", "base0", "sc", "sr", "ss")] +
                    [(name, np.int32) for name in
                     ("K", "Kg", "red", "redp", "PQ", "Q", "sh", "sw", "pt", "pl", "H", "W", "Cg", "R",
                      "S", "dh", "dw")], align=True)


class Kernel:
    """One compiled instantiation, and the __constant__ tables last written to its module.

    The tables belong to the module, not to a launch: before writing new ones, the current stream
    waits for the module's last launch (which may be on another stream), so concurrent calls
    never see each other's tables.
    """

    def __init__(self, file: str, expression: str):
        self.module = cupy.RawModule(code=source(file), options=OPTIONS,
                                     name_expressions=[expression])
        self.function = self.module.get_function(expression)
        self.lock = threading.Lock()
        self.table_key = None
        self.done = None

    def __call__(self, grid, block, args, tables=None):
        if tables is None:
            self.function(grid, block, args)
            return
        key, off, hw = tables
        stream = cupy.cuda.get_current_stream()
        with self.lock:
            if self.done is not None:
                stream.wait_event(self.done)
            if key != self.table_key:
                for symbol, table in (("c_red_off", off), ("c_red_hw", hw)):
                    dst = self.module.get_global(symbol)
                    cupy.cuda.runtime.memcpyAsync(dst.ptr, table.data.ptr, table.nbytes,
                                                  cupy.cuda.runtime.memcpyDeviceToDevice,
                                                  stream.ptr)
                self.table_key = key
            self.function(grid, block, args)
            self.done = cupy.cuda.Event(block=False, disable_timing=True)
            self.done.record(stream)


@functools.cache
def _kernel(device: int, file: str, expression: str) -> Kernel:
    return Kernel(file, expression)


def kernel(file: str, expression: str) -> Kernel:
    """The compiled `expression` from `file`.cu on the current device (compiled on first use)."""
    return _kernel(cupy.cuda.Device().id, file, expression)


@functools.cache     # never evicted: a pending copy from a freed table would read garbage
def _device_tables(device: int, key) -> tuple:
    """The problem's tables on the device, complete before any stream copies from them."""
    prob, geo_items, window_order = key
    off, hw = reduction_tables(prob, dict(geo_items), window_order)
    tables = key, cupy.asarray(off), cupy.asarray(hw)
    cupy.cuda.get_current_stream().synchronize()
    return tables


def element_strides(a, letters: str) -> tuple[int, ...]:
    """a's strides in elements, NCHW-lettered: `letters` names a's axes, e.g. "NHWC"."""
    by_letter = dict(zip(letters, (s // a.itemsize for s in a.strides)))
    return tuple(by_letter[letter] for letter in "NCHW")


def geometry_scalar(geo: dict, images: int) -> np.void:
    values = dict(geo, npix=images * geo["PQ"])
    return np.array(tuple(values[name] for name in GEOMETRY.names), GEOMETRY)[()]


def image_to_window(prob: Problem, x, x_win=None):
    """The window tensor of x on the GPU (im2win.reference.image_to_window's, bit for bit)."""
    N = x.shape[0]
    if x_win is None:
        shape = (N, prob.C, prob.P, prob.Wp * prob.R) if prob.layout == "NCHW" else \
            (N, prob.P, prob.Wp * prob.R, prob.C)
        x_win = cupy.empty(shape, prob.dtype)
    T = CUDA_TYPES[prob.dtype.name][0]
    expr = f"image_to_window<{T}, {str(prob.layout == 'NHWC').lower()}>"
    total = x_win.size
    if total:
        i32 = np.int32
        kernel("window", expr)(
            (min(-(-total // 256), 65536 * 8),), (256,),
            (x, x_win, np.int64(N), i32(prob.C), i32(prob.H), i32(prob.W), i32(prob.P),
             i32(prob.Wp), i32(prob.R), i32(prob.sh), i32(prob.dh), i32(prob.pt), i32(prob.pl),
             *map(np.int64, element_strides(x, prob.layout))))
    return x_win


def pointer(a):
    """a for a kernel's pointer argument; a null pointer for None."""
    return np.uint64(0) if a is None else a


def direct(prob: Problem, x, w, bias, y):
    """Direct convolution into the contiguous y: one thread per output element."""
    T, Acc = CUDA_TYPES[prob.dtype.name]
    expr = f"direct_conv<{T}, {Acc}, {str(prob.layout == 'NHWC').lower()}>"
    i32 = np.int32
    kernel("direct", expr)(
        (min(-(-y.size // 256), 65536 * 8),), (256,),
        (x, w, pointer(bias), y, np.int64(prob.N), i32(prob.K), i32(prob.Kg), i32(prob.Cg), i32(prob.H),
         i32(prob.W), i32(prob.R), i32(prob.S), i32(prob.P), i32(prob.Q), i32(prob.sh),
         i32(prob.sw), i32(prob.dh), i32(prob.dw), i32(prob.pt), i32(prob.pl),
         *map(np.int64, element_strides(x, prob.layout)),
         *map(np.int64, element_strides(w, prob.layout))))
    return y


def filter_matrix(prob: Problem, plan: Plan, w):
    """w as the (K, red) matrix the kernel reads: a copy in window order for materialised
    windows (each pixel's reduction is then the window's run), w itself otherwise."""
    if plan.algorithm == "im2win":
        return cupy.ascontiguousarray(
            w.transpose((0, 1, 3, 2) if prob.layout == "NCHW" else (0, 2, 1, 3)))
    return w


def im2win(prob: Problem, plan: Plan, x, w, bias, y):
    """The im2win kernels into the contiguous y, `plan.chunk` images per launch."""
    conv = kernel(plan.file, plan.kernel)
    materialised = plan.algorithm == "im2win"
    tables = None
    if plan.tables:
        key = (prob, tuple(sorted(plan.geometry.items())), materialised)
        tables = _device_tables(cupy.cuda.Device().id, key)
    w = filter_matrix(prob, plan, w)
    x_win = cupy.empty((plan.chunk,) + prob.x_win_shape[1:], prob.dtype) if materialised \
        else None
    for g0 in range(0, prob.G, 65535):
        groups = min(65535, prob.G - g0)
        for n0 in range(0, prob.N, plan.chunk):
            images = min(plan.chunk, prob.N - n0)
            src = x[n0:n0 + images]
            if x_win is not None:
                src = image_to_window(prob, src, x_win[:images])
            grid = plan.grid(images, groups)
            conv(grid, (plan.block,),
                 (src, w, pointer(bias), y[n0:n0 + images], geometry_scalar(plan.geometry, images),
                  np.int32(g0)), tables)
    return y


def conv2d(prob: Problem, plan: Plan, x, w, bias, y):
    """Run `plan` on CuPy arrays; y is a contiguous output of prob.y_shape, written entirely."""
    if plan.algorithm == "im2col_gemm":
        y[...] = baselines.im2col_gemm(x, w, bias, stride=(prob.sh, prob.sw),
                                       padding=((prob.pt, prob.pb), (prob.pl, prob.pr)),
                                       dilation=(prob.dh, prob.dw), groups=prob.G,
                                       layout=prob.layout)
        return y
    if plan.algorithm == "direct":
        return direct(prob, x, w, bias, y)
    return im2win(prob, plan, x, w, bias, y)
