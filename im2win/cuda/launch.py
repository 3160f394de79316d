"""Run a `Plan` with CuPy: the only module that compiles kernels (`kernel`), and the one that
launches the forward's. The gradients' own launches live with their families: the
backward-filter kernel and its window columns in `im2win.cuda.wgrad`, the window gradients in
`im2win.cuda.dgrad`, backward data's filter gather in `im2win.api`.

Kernel sources are the .cu files beside this one, each prefixed with common.cuh (CuPy's disk
cache does not see #include'd files). Each template instantiation is compiled once per device,
on first use, with NVRTC for the device's own architecture.

A plan becomes an `Executable` on a device once: its kernel, its reduction table uploaded to
that device, and the packed arguments of every launch. Nothing a launch reads is shared
between problems or changed after it is built, so launches never wait for each other, run on
whatever stream is current, and can be captured into CUDA graphs. Temporaries of a call come
from `Scratch`: CuPy's pool, or graph-owned memory while the stream is being captured.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import sys
import threading
import weakref

import cupy
import numpy as np

from im2win import baselines
from im2win.interop import cupy_view
from im2win.cuda.plan import (CUDA_TYPES, FILE_ARCH, GEOMETRY, ONE_LAUNCH, Geometry,
                              Plan, columns_stage, fixup_counter_bytes, kernel_family,
                              nhwc_twin, runs_pitch, runs_stage, source, transpose_launch)
from im2win.cuda.wgrad import COLUMN_BLOCKS, columns_into, window_columns_kernel
from im2win.problem import Problem

OPTIONS = ("-std=c++17",)

NULL = np.uint64(0)

CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


@functools.cache
def _kernel(device: int, file: str, expression: str):
    arch = FILE_ARCH.get(kernel_family(file))
    options = OPTIONS + ((f"-arch={arch}",) if arch else ())
    module = cupy.RawModule(code=source(file), options=options, name_expressions=[expression])
    return module.get_function(expression)


@functools.cache
def sm_count(device: int) -> int:
    return cupy.cuda.runtime.deviceGetAttribute(
        cupy.cuda.runtime.cudaDevAttrMultiProcessorCount, device)


def kernel(file: str, expression: str):
    """The compiled `expression` from `file`.cu on the current device (compiled on first use)."""
    return _kernel(cupy.cuda.runtime.getDevice(), file, expression)


_dynamic_smem: dict = {}      # CUfunction -> the most dynamic shared memory it is allowed
_smem_lock = threading.Lock()


def allow_shared_memory(function_ptr: int, smem: int) -> None:
    """Let the kernel `function_ptr` (a CUfunction) launch with `smem` bytes of dynamic shared
    memory. The attribute belongs to the function, which problems of one instantiation share
    with smem of their own (stages, a resident filter): it only ever grows, else a problem
    launched after a smaller one's Executable was made would be refused (invalid argument)."""
    with _smem_lock:
        if smem > _dynamic_smem.get(function_ptr, 48 * 1024):
            cupy.cuda.driver.funcSetAttribute(
                function_ptr, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
            _dynamic_smem[function_ptr] = smem


@functools.cache
def active_clusters(function_ptr: int, smem: int, block: int, cluster: int, device: int) -> int:
    """Clusters of `cluster` blocks of the kernel `function_ptr` (its cluster size compiled
    in) that the device runs at once with `smem` bytes of dynamic shared memory a block
    (cuOccupancyMaxActiveClusters: SMs that no cluster can pair are left out); at least 1."""
    from cuda.bindings import driver
    config = driver.CUlaunchConfig()
    config.gridDimX = max(sm_count(device) // cluster, 1) * cluster
    config.gridDimY = config.gridDimZ = config.blockDimY = config.blockDimZ = 1
    config.blockDimX, config.sharedMemBytes, config.numAttrs = block, smem, 0
    result, clusters = driver.cuOccupancyMaxActiveClusters(driver.CUfunction(function_ptr),
                                                           config)
    if result != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuOccupancyMaxActiveClusters failed: {result}")
    return max(int(clusters), 1)


def persistent_blocks(function_ptr: int, smem: int, block: int, cluster: int,
                      items: int) -> int:
    """The grid of a persistent launch of `items` work items: at most one block an SM; in
    clusters of `cluster` > 1, whole clusters, at most as many as run at once (a later cluster
    would start only once one has finished all its items)."""
    device = cupy.cuda.runtime.getDevice()
    if cluster == 1:
        return min(items, sm_count(device))
    clusters = active_clusters(function_ptr, smem, block, cluster, device)
    return cluster * min(-(-items // cluster), clusters)


def element_strides(a, letters: str) -> tuple[int, ...]:
    """a's strides in elements, NCHW-lettered: `letters` names a's axes, e.g. "NHWC"."""
    by_letter = dict(zip(letters, (s // a.itemsize for s in a.strides)))
    return tuple(by_letter[letter] for letter in "NCHW")


def contiguous_element_strides(shape, letters: str) -> tuple[int, ...]:
    """`element_strides` of a C-contiguous array of `shape`."""
    by_letter, step = {}, 1
    for letter, n in zip(reversed(letters), reversed(shape)):
        by_letter[letter], step = step, step * n
    return tuple(by_letter[letter] for letter in "NCHW")


class Packed:
    """One kernel launched straight through cuLaunchKernel, its arguments written into a
    buffer of this thread's, made once: CuPy's RawKernel call converts every argument on
    every launch (an NCHW call on its NHWC twin, three copies around its kernel, spent 60-70
    us of host time so on the H200). `params` names the kernel's parameters in order with
    their C types as NumPy types (pointers as np.uint64: give them `.data.ptr`, or 0)."""

    def __init__(self, function, params):
        self.ptr = function.kernel.ptr
        self.record = np.dtype(params, align=True)
        self.offsets = argument_offsets(self.record)
        self.local = threading.local()

    def __call__(self, grid, block, stream: int, *values) -> None:
        """Launch on `stream` (a pointer) with the parameters `values`."""
        buffer = getattr(self.local, "buffer", None)
        if buffer is None:
            # cuLaunchKernel needs the device's context current in this thread (see
            # Executable._argument_buffers).
            cupy.cuda.runtime.setDevice(cupy.cuda.runtime.getDevice())
            args = np.zeros((), self.record)
            params = np.array([args.ctypes.data + offset for offset in self.offsets], np.uint64)
            buffer = self.local.buffer = (args, params, params.ctypes.data)
        args, _, at = buffer
        args[()] = values
        cupy.cuda.driver.launchKernel(self.ptr, *grid, *block, 0, stream, at, 0)


def packed(file: str, expression: str, params) -> Packed:
    """`kernel(file, expression)` as a Packed launch (`params`: as Packed takes them)."""
    return _packed(cupy.cuda.runtime.getDevice(), file, expression, tuple(params))


@functools.cache
def _packed(device: int, file: str, expression: str, params) -> Packed:
    return Packed(_kernel(device, file, expression), list(params))


P64, I64, I32 = np.uint64, np.int64, np.int32
TRANSPOSE_PARAMS = [("src", P64), ("dst", P64)] + [(n, I64) for n in ("batch", "rows", "cols",
                                                                      "sb", "sr", "sc")]
TRANSPOSE_WORDS_PARAMS = TRANSPOSE_PARAMS[:-1]
TRANSPOSE_TAPS_PARAMS = TRANSPOSE_PARAMS[:-2]
SPLIT_REDUCE_PARAMS = [("partial", P64), ("bias", P64), ("y", P64), ("total", I64),
                       ("K", I32), ("splits", I32)]
TF32_SPLIT_PARAMS = [("w", P64), ("split", P64), ("n", I64)]
GATHER5_PARAMS = [("src", P64), ("dst", P64), ("total", I64)] + \
    [(f"d{i}", I32) for i in range(1, 5)] + [(f"s{i}", I64) for i in range(5)]
WINDOW_COLUMNS_PARAMS = [("x", P64), ("x2", P64), ("rows", I64)] + \
    [(n, I32) for n in ("H", "W", "Q", "C2", "C", "S", "sw", "dw", "pl")] + \
    [(n, I64) for n in ("xn", "xh", "xw", "xc")]

WINDOW_RUNS_PARAMS = [("x", P64), ("x_win", P64), ("rows", I64)] + \
    [(n, I32) for n in ("P", "pitch", "H", "W", "C", "R", "sh", "dh", "pt", "pl")] + \
    [(n, I64) for n in ("xn", "xc", "xh", "xw")]
WINDOW_RUNS_BLOCKS = 6        # window_runs' blocks an SM (a 32 KB row copy each: 192 KB of
                              # Hopper's 228; fewer fit elsewhere, and the grid loops)


def geometry_scalar(geo: Geometry, images: int) -> np.void:
    """The Geometry kernel argument for a launch over `images` images, packed by value."""
    return np.array(tuple(geo._replace(npix=images * geo.PQ)), GEOMETRY)[()]


class Scratch:
    """The temporary device buffers of one call on the current stream.

    Outside a capture they come from CuPy's pool. While the stream is being captured into a CUDA
    graph they are stream-ordered allocations (cudaMallocAsync, freed with cudaFreeAsync after
    the call's last kernel), which become the graph's own memory nodes: a replay never touches
    memory that CuPy's pool has handed to someone else since the capture.
    """

    def __init__(self):
        self.stream = cupy.cuda.get_current_stream().ptr
        self.capturing = cupy.cuda.runtime.streamIsCapturing(self.stream) != 0
        self.owned = []

    def empty(self, shape, dtype):
        if not self.capturing:
            return cupy.empty(shape, dtype)
        nbytes = max(int(np.prod(shape)) * np.dtype(dtype).itemsize, 1)
        ptr = cupy.cuda.runtime.mallocAsync(nbytes, self.stream)
        self.owned.append(ptr)
        memory = cupy.cuda.UnownedMemory(ptr, nbytes, None, cupy.cuda.runtime.getDevice())
        return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0))

    def contiguous(self, a):
        """A C-contiguous copy of a."""
        copy = self.empty(a.shape, a.dtype)
        copy[...] = a
        return copy

    def release(self):
        for ptr in self.owned:
            cupy.cuda.runtime.freeAsync(ptr, self.stream)
        self.owned = []


def image_to_window(prob: Problem, x, x_win=None):
    """The window tensor of x on the GPU (im2win.reference.image_to_window's, bit for bit)."""
    N = x.shape[0]
    if x_win is None:
        x_win = cupy.empty((N,) + prob.x_win_shape[1:], prob.dtype)
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


def direct(prob: Problem, x, w, bias, y):
    """Direct convolution into the contiguous y: one thread per output element."""
    T, Acc = CUDA_TYPES[prob.dtype.name]
    expr = f"direct_conv<{T}, {Acc}, {str(prob.layout == 'NHWC').lower()}>"
    i32 = np.int32
    kernel("direct", expr)(
        (min(-(-y.size // 256), 65536 * 8),), (256,),
        (x, w, NULL if bias is None else bias, y, np.int64(prob.N), i32(prob.K), i32(prob.Kg),
         i32(prob.Cg), i32(prob.H), i32(prob.W), i32(prob.R), i32(prob.S), i32(prob.P),
         i32(prob.Q), i32(prob.sh), i32(prob.sw), i32(prob.dh), i32(prob.dw), i32(prob.pt),
         i32(prob.pl), *map(np.int64, element_strides(x, prob.layout)),
         *map(np.int64, element_strides(w, prob.layout))))
    return y


# cuBLAS's element types and compute types for each dtype: FP32 accumulation for the 16-bit
# types, FP32 pedantic for float32 (never TF32, whatever the handle's math mode or CUPY_TF32),
# FP64 for float64. Filled on first use (cupy.cuda.cublas loads the library).
_CUBLAS_TYPES: dict = {}


def _cublas_types(dtype: str):
    if not _CUBLAS_TYPES:
        from cupy.cuda import cublas
        runtime = cupy.cuda.runtime
        _CUBLAS_TYPES.update({
            "float16": (runtime.CUDA_R_16F, cublas.CUBLAS_COMPUTE_32F, np.float32),
            "bfloat16": (runtime.CUDA_R_16BF, cublas.CUBLAS_COMPUTE_32F, np.float32),
            "float32": (runtime.CUDA_R_32F, cublas.CUBLAS_COMPUTE_32F_PEDANTIC, np.float32),
            "float64": (runtime.CUDA_R_64F, cublas.CUBLAS_COMPUTE_64F, np.float64)})
    return _CUBLAS_TYPES[dtype]


@functools.cache
def _cublas():
    """libcublas as CuPy loaded it, through ctypes, or None where it is not found: CuPy's
    wrappers refuse to run while a stream is being captured, and cuBLAS's GEMMs can be
    captured (alpha and beta in host memory are captured by value). Outside a capture
    CuPy's wrapper is used: with ctypes converting its 23 arguments, a bare GEMM took 20-28 us
    of host time against the wrapper's 14-22 (`tools/gemm_lt.py`, H200)."""
    from cupy.cuda import cublas  # noqa: F401  (loads the library)
    try:
        with open("/proc/self/maps") as maps:
            paths = [line.split()[-1] for line in maps if "/libcublas.so" in line]
        lib = ctypes.CDLL(paths[0])
    except (OSError, IndexError):
        return None
    i, p, ll = ctypes.c_int, ctypes.c_void_p, ctypes.c_longlong
    lib.cublasSetStream_v2.argtypes = [p, p]
    lib.cublasGemmStridedBatchedEx.argtypes = [p, i, i, i, i, i, p, p, i, i, ll, p, i, i, ll, p,
                                               p, i, i, ll, i, i, i]
    return lib


_primed: set = set()


def prime_cublas(dtype) -> bool:
    """One tiny GEMM of `dtype` on the current stream, once per device and dtype, outside any
    capture: cuBLAS makes its handle and workspace at first use, which a CUDA graph capture
    refuses (a Call whose graph plan is cuBLAS's, plan.graph_plan, may first run it there).
    Whether cuBLAS is primed: False inside a capture, if it was not before."""
    device = cupy.cuda.runtime.getDevice()
    if (device, dtype.name) in _primed:
        return True
    if cupy.cuda.runtime.streamIsCapturing(cupy.cuda.get_current_stream().ptr):
        return False
    from cupy.cuda import cublas
    data, compute, scale = _cublas_types(dtype.name)
    scalars = np.array([1, 0], scale)
    a = cupy.zeros(64, dtype)
    cublas.gemmStridedBatchedEx(cupy.cuda.device.get_cublas_handle(), 0, 0, 8, 8, 8,
                                scalars.ctypes.data, a.data.ptr, data, 8, 0, a.data.ptr, data,
                                8, 0, scalars.ctypes.data + scalars.itemsize, a.data.ptr, data,
                                8, 0, 1, compute, cublas.CUBLAS_GEMM_DEFAULT)
    _primed.add((device, dtype.name))
    return True


class GemmCall:
    """A plan's cuBLAS GEMM (plan.geometry: GemmArgs) with what every call passes the same,
    made once: the element and compute types and the host scalars alpha = 1 and beta (0, or 1
    over a bias-filled y), which are never written after this."""

    def __init__(self, prob: Problem, plan: Plan):
        from cupy.cuda import cublas
        self.prob, self.g, self.cublas = prob, plan.geometry, cublas
        self.data, self.compute, scale = _cublas_types(prob.dtype.name)
        self.scalars = np.array([1, 0, 1], scale)        # alpha, beta without and with a bias
        self.alpha = self.scalars.ctypes.data
        self.betas = (self.alpha + self.scalars.itemsize, self.alpha + 2 * self.scalars.itemsize)
        self.gather = packed("layout", f"gather5<{CUDA_TYPES[prob.dtype.name][0]}>",
                             GATHER5_PARAMS) if self.g.gather else None

    def __call__(self, x, w, bias, y, scratch: Scratch):
        """conv(x, w) + bias into the contiguous y, on the current stream (set on CuPy's
        cuBLAS handle); w contiguous. At a stride, the pixels read are gathered into scratch
        first (GemmArgs.gather). Safe to capture into a CUDA graph."""
        g, prob = self.g, self.prob
        if y.size == 0:
            return y
        if g.gather:              # x's pixels (n, p*sh, q*sw) into a contiguous x
            N, C, P, Q = prob.N, prob.C, prob.P, prob.Q
            xn, xc, xh, xw = element_strides(x, prob.layout)
            if prob.layout == "NHWC":
                dims, steps = (N, P, Q, C), (xn, xh * prob.sh, xw * prob.sw, xc)
            else:
                dims, steps = (N, C, P, Q), (xn, xc, xh * prob.sh, xw * prob.sw)
            gathered = scratch.empty(dims, prob.dtype)
            self.gather((min(-(-gathered.size // 256), 8 * 65535), 1, 1), (256, 1, 1),
                        scratch.stream, x.data.ptr, gathered.data.ptr, gathered.size, *dims,
                        0, *steps)
            x = gathered
        if bias is not None:
            y[...] = bias if prob.layout == "NHWC" else bias[:, None, None]
        a, b = (x, w) if g.a_is_x else (w, x)
        args = (g.transa, g.transb, g.m, g.n, g.k, self.alpha, a.data.ptr, self.data, g.lda,
                g.stride_a, b.data.ptr, self.data, g.ldb, g.stride_b, self.betas[bias is not None],
                y.data.ptr, self.data, g.ldc, g.stride_c, g.batch, self.compute,
                self.cublas.CUBLAS_GEMM_DEFAULT)
        handle = cupy.cuda.device.get_cublas_handle()
        lib = _cublas() if scratch.capturing else None
        if lib is None:     # CuPy's wrapper: less host time, but it refuses a stream capture
            self.cublas.gemmStridedBatchedEx(handle, *args)
            return y
        lib.cublasSetStream_v2(handle, scratch.stream)
        status = lib.cublasGemmStridedBatchedEx(handle, *args)
        if status != 0:
            raise RuntimeError(f"cublasGemmStridedBatchedEx failed with status {status}")
        return y


def im2col_gemm(prob: Problem, x, w, bias, y):
    y[...] = baselines.im2col_gemm(x, w, bias, stride=(prob.sh, prob.sw),
                                   padding=((prob.pt, prob.pb), (prob.pl, prob.pr)),
                                   dilation=(prob.dh, prob.dw), groups=prob.G,
                                   layout=prob.layout)
    return y


# The arguments of a fused im2win kernel after its four pointers (src, w, bias, y), packed once
# per launch: the table's address, the Geometry and g0, each where the C ABI wants it.
FIXED_ARGS = np.dtype([("taps", np.uint64), ("geo", GEOMETRY), ("g0", np.int32)], align=True)
# The split-K form's (im2win_wgmma_tma_split): its fifth pointer, the partial sums, is per call.
SPLIT_ARGS = np.dtype([("geo", GEOMETRY), ("g0", np.int32)], align=True)
@functools.cache
def ints_and_strides(count: int) -> np.dtype:
    """The arguments of depthwise.cu's, narrow.cu's and pointwise.cu's kernels after their
    four pointers:
    `count` ints (the plan's `ints`: extents, the block's tile) and x's four i64 strides."""
    return np.dtype([("ints", np.int32, count), ("strides", np.int64, 4)], align=True)


def argument_offsets(record: np.dtype) -> list[int]:
    """Byte offsets of each kernel argument in a packed record (array fields: per element)."""
    offsets = []
    for name in record.names:
        field, start = record.fields[name][:2]
        count = int(np.prod(field.shape)) if field.shape else 1
        step = field.base.itemsize if field.shape else field.itemsize
        offsets += [start + i * step for i in range(count)]
    return offsets


class TmaMaps:
    """A launch's TMA descriptors (x's and w's, or w's alone), as 128 bytes each, by the
    pointers of the arrays they map (`encode(a, b)` makes them; a plan without x's descriptor
    passes 0 for x's pointer): a small memo, since a descriptor holds its array's address
    and encoding costs host time (a loop over the same buffers encodes once)."""

    MEMO = 16

    def __init__(self, encode):
        self.encode, self.memo, self.lock = encode, {}, threading.Lock()

    def bytes_for(self, a_ptr: int, b_ptr: int, arrays) -> bytes:
        """The descriptors of the arrays at these pointers; `arrays()` gives the two arrays
        (CuPy) when they must be encoded."""
        key = (a_ptr, b_ptr)
        found = self.memo.get(key)
        if found is None:
            found = b"".join(ctypes.string_at(m.getPtr(), 128) for m in self.encode(*arrays()))
            with self.lock:
                if len(self.memo) >= self.MEMO:
                    self.memo.pop(next(iter(self.memo)))
                self.memo[key] = found
        return found


class Executable:
    """A plan made ready on one device; immutable once built.

    Holds the compiled kernel, the plan's reduction table on the device, and for every launch
    (chunks of images, groups in blocks of 65535) its offsets, grid and packed Geometry. A fused
    plan's launches, and the one launch of depthwise.cu or narrow.cu (its grid from the plan's
    args and the device's SM count), go straight to cuLaunchKernel with arguments packed once
    (`FIXED_ARGS`, `ints_and_strides`) behind four pointers that each thread writes into
    buffers of its own.
    """

    def __init__(self, prob: Problem, plan: Plan):
        self.prob, self.plan = prob, plan
        self.function = kernel(plan.file, plan.kernel) if plan.kernel else None
        self.function_ptr = self.function.kernel.ptr if plan.kernel else 0   # its CUfunction
        self.smem = plan.smem
        allow_shared_memory(self.function_ptr, self.smem)
        self.taps = NULL
        # A graph that captures a launch reads the table at replay (`_captured` keeps the
        # Executable for it); nothing else of the Executable's is read then.
        self.has_table = bool(plan.taps)
        if plan.taps:
            # Uploaded on a stream of its own, so that a first call made while another stream
            # is being captured does not put the upload into that graph.
            stream = cupy.cuda.Stream(non_blocking=True)
            with stream:
                self.taps = cupy.asarray(np.frombuffer(plan.taps, np.int32))
            stream.synchronize()
        launches, record = [], FIXED_ARGS
        if plan.one_launch:
            args = plan.geometry
            record = ints_and_strides(len(args.ints))
            grid = args.grid(prob, sm_count(cupy.cuda.runtime.getDevice()))
            launches.append((0, prob.N, grid, (args.ints, args.x_strides)))
        elif plan.algorithm in ("im2win", "im2win_fused"):
            for g0 in range(0, prob.G, 65535):
                groups = min(65535, prob.G - g0)
                for n0 in range(0, max(prob.N, 1), plan.chunk):
                    images = min(plan.chunk, prob.N - n0)
                    grid = plan.grid(images, groups)
                    if plan.persistent:
                        grid = (persistent_blocks(self.function_ptr, self.smem, plan.block,
                                                  plan.cluster, grid[0]), 1, 1)
                    taps = 0 if self.taps is NULL else self.taps.data.ptr
                    geo = geometry_scalar(plan.geometry, images)
                    launches.append((n0, images, grid,
                                     (geo, g0) if plan.splits > 1 else (taps, geo, g0)))
            if plan.splits > 1:
                record = SPLIT_ARGS
        self.launches = tuple(launches)
        self.block = plan.geometry.block if plan.one_launch else \
            (plan.block, 1, 1)
        self.fixed = np.zeros(len(launches), record)
        for i, (_, _, _, fixed) in enumerate(launches):
            self.fixed[i] = fixed
        self.offsets = argument_offsets(record)
        self.tma, self.maps = None, 0
        if plan.tma is not None:              # x's descriptor (where the plan has one), w's
            from im2win.cuda import tma
            args = plan.tma
            self.maps = 1 if args.x is None else 2
            self.tma = TmaMaps(lambda x, w: (
                () if args.x is None else (tma.encode_im2col(x, args.x, True),)) + (
                tma.encode_tiled(w, args.w_dims, args.w_stride, args.w_box),))
        self.inner = self.transpose = self.transpose_words = self.transpose_narrow = None
        self.transpose_taps = self.transpose32 = None
        self.columns = self.runs = None
        T = CUDA_TYPES[prob.dtype.name][0]
        if plan.algorithm == "im2win_nhwc":      # the twin's Executable, held while this lives
            self.inner = executable(nhwc_twin(prob)[0], plan.inner)
            self.transpose = packed("layout", f"transpose_batched<{T}, 64>", TRANSPOSE_PARAMS)
        if plan.algorithm == "im2win_columns":   # the R x 1 problem's, held likewise
            self.inner = executable(columns_stage(prob, precision=plan.inner.precision),
                                    plan.inner)
            self.columns = window_columns_kernel(T)
            self.column_blocks = COLUMN_BLOCKS * sm_count(cupy.cuda.runtime.getDevice())
        if plan.algorithm == "im2win_runs":      # the 1 x 1 problem's, held likewise
            self.inner = executable(runs_stage(prob), plan.inner)
            self.runs = packed("window", f"window_runs<{T}>", WINDOW_RUNS_PARAMS)
            self.run_blocks = WINDOW_RUNS_BLOCKS * sm_count(cupy.cuda.runtime.getDevice())
        if plan.algorithm in ("im2win_columns", "im2win_runs") and prob.layout == "NCHW":
            self.transpose = packed("layout", f"transpose_batched<{T}, 64>", TRANSPOSE_PARAMS)
        if self.transpose is not None:
            self.transpose32 = packed("layout", f"transpose_batched<{T}, 32>", TRANSPOSE_PARAMS)
            self.transpose_narrow = packed("layout", f"transpose_narrow<{T}>", TRANSPOSE_PARAMS)
            self.transpose_taps = packed("layout", f"transpose_taps<{T}>", TRANSPOSE_TAPS_PARAMS)
        if self.transpose is not None and prob.dtype.itemsize == 2:
            self.transpose_words = packed("layout", f"transpose_words<{T}>",
                                          TRANSPOSE_WORDS_PARAMS)
        self.reduce = None
        # split-K's fixup (plan.fixup): its tiles' counters after the partial sums, zeroed
        # before each launch, and no second launch
        self.counters = fixup_counter_bytes(prob, plan.tile) if plan.fixup else 0
        if plan.splits > 1 and not plan.fixup:   # into an NCHW y where the plan says so
            self.reduce = packed(plan.file, f"split_reduce_nchw<{T}>", SPLIT_REDUCE_PARAMS +
                                 [("PQ", I64)]) if plan.geometry.y_nchw else \
                packed(plan.file, f"split_reduce<{T}>", SPLIT_REDUCE_PARAMS)
        self.split = packed(plan.file, "tf32_split", TF32_SPLIT_PARAMS) \
            if plan.precision == "3xtf32" else None
        self.gemm = GemmCall(prob, plan) if plan.algorithm == "gemm" else None
        self.local = threading.local()
        # One cuLaunchKernel (and, for split-K, the sum of its FP32 partial sums; with a
        # filter prelude, below, the filter's copy before it) with nothing else in scratch: a
        # call can take y's memory (and its workspace) from an allocator of its own and
        # launch by pointers before y's array exists (Call.__call__, TorchCall); `single`:
        # that one launch alone.
        self.by_pointers = (plan.algorithm == "im2win_fused" or plan.algorithm in ONE_LAUNCH) \
            and len(launches) == 1 and self.split is None
        self.outputs = prob.N * prob.P * prob.Q * prob.K
        # launch_workspace: the bytes a launch by pointers needs besides y (split-K's partial
        # sums and the fixup's counters; a filter prelude's copy, below)
        self.launch_workspace = 4 * plan.splits * self.outputs + self.counters \
            if plan.splits > 1 else 0
        self.single = self.by_pointers and not self.launch_workspace
        # An NCHW problem whose twin reads x in place and writes the NCHW y, or a stem on its
        # fused runs: nothing but the filter is copied before the inner launch, so the call
        # goes by pointers too: the filter's copy (`prelude`: its launch, for w 16-byte
        # aligned or not) into the workspace's first `filter_bytes`, the inner launch's
        # workspace after it (Executable.__call__ keeps through_nhwc and through_runs for
        # the Scratch path: out=, copies of w, captures with partial sums, and C = 0, where
        # there is no filter to copy).
        self.prelude, self.filter_bytes = None, 0
        inner = self.inner
        if inner is not None and plan.x_in_place and inner.by_pointers and \
                inner.tma is None and plan.algorithm in ("im2win_nhwc", "im2win_runs") and \
                (prob.layout == "NHWC" or plan.inner.geometry.y_nchw) and prob.Cg > 0:
            K, Cg, RS = prob.K, prob.Cg, prob.R * prob.S
            if plan.algorithm == "im2win_nhwc":      # through_nhwc's transpose of w
                self.prelude = tuple(self._transpose_form(
                    prob.dtype.itemsize, K, Cg, RS, Cg * RS, RS, 1, aligned)
                    for aligned in (False, True))
                elements = K * RS * Cg
            else:                                    # through_runs' window_runs of w
                red = plan.inner.geometry.redp
                form = (self.runs, (min(K, self.run_blocks), 1, 1), (256, 1, 1),
                        (K, 1, red, prob.R, prob.S, Cg, prob.R, 1, 1, 0, 0,
                         *contiguous_element_strides(prob.w_shape, prob.layout)))
                self.prelude, elements = (form, form), K * red
            self.filter_bytes = -(-elements * prob.dtype.itemsize // 256) * 256
            self.launch_workspace = self.filter_bytes + inner.launch_workspace
            self.by_pointers = True
            self.has_table = self.has_table or inner.has_table

    def through_nhwc(self, x, w, bias, y, scratch: Scratch):
        """The NCHW problem on its NHWC twin: x and w copied channels-last into scratch, the
        twin's kernel into a channels-last y, and that copied into y (contiguous NCHW); or,
        where the twin's plan says so (Geometry.y_nchw), the kernel into y itself; x not
        copied where the twin reads it in place (Plan.x_in_place)."""
        prob = self.prob
        N, C, K = prob.N, prob.C, prob.K
        HW, RS = prob.H * prob.W, prob.R * prob.S
        x_t = x
        if not self.plan.x_in_place:
            xn, xc, xh, xw = element_strides(x, "NCHW")
            x_t = scratch.empty((N, prob.H, prob.W, C), prob.dtype)
            self._transpose(x, x_t, N, C, HW, xn, xc, xw if prob.W > 1 else xh)
        w_t = scratch.empty((K, prob.R, prob.S, prob.Cg), prob.dtype)
        self._transpose(w, w_t, K, prob.Cg, RS, prob.Cg * RS, RS, 1)
        return self._inner_into(x_t, w_t, bias, y, scratch)

    def through_columns(self, x, w, bias, y, scratch: Scratch):
        """The stem on x's window columns: x2[n, h, q, s*C + c] = x[n, h, q*sw + s*dw - pl, c]
        and w2[k, r, 0, s*C + c] = w[k, r, s, c] (layout.cu's window_columns, zeros past S*C
        and outside x) into scratch, then the R x 1 problem's kernel into y (NHWC, or NCHW
        where its plan says so: Geometry.y_nchw), or into a channels-last y transposed into y
        (NCHW)."""
        prob = self.prob
        N, K, Q, C2 = prob.N, prob.K, prob.Q, self.inner.prob.C
        order = (0, 2, 3, 1) if prob.layout == "NCHW" else (0, 1, 2, 3)   # (n, h, w, c) views
        x2 = scratch.empty((N, prob.H, Q, C2), prob.dtype)
        columns_into(self.columns, x.transpose(order), x2, prob.H, prob.W, prob.C, prob.S,
                     prob.sw, prob.dw, prob.pl, self.column_blocks)
        w2 = scratch.empty((K, prob.R, 1, C2), prob.dtype)      # w's: one output column
        columns_into(self.columns, w.transpose(order), w2, prob.R, prob.S, prob.C, prob.S, 1, 1,
                     0, self.column_blocks)
        return self._inner_into(x2, w2, bias, y, scratch)

    def through_runs(self, x, w, bias, y, scratch: Scratch):
        """The stem on its materialised window's runs: x_win[n, p, (m*R + r)*C + c] =
        xp[n, p*sh + r*dh, m, c] (rows runs_pitch apart) and w_win[k, (s*R + r)*C + c] =
        w[k, r, s, c] (rows the padded reduction long), both by window.cu's window_runs (w as
        K images of R x S, one output row each), into scratch; then the 1 x 1 problem's kernel
        over x_win's runs into y (as through_columns). Where the runs are fused
        (Plan.x_in_place: im2win_ffma.cu's kTaps), no x_win: the kernel reads x itself."""
        prob, geo = self.prob, self.plan.inner.geometry
        N, P, K, pitch, red = prob.N, prob.P, prob.K, runs_pitch(prob), geo.redp
        stream = cupy.cuda.get_current_stream().ptr
        x_win = x
        if not self.plan.x_in_place:
            x_win = scratch.empty((N * P * pitch + red,), prob.dtype)
            self.runs((min(N * P, self.run_blocks), 1, 1), (256, 1, 1), stream, x.data.ptr,
                      x_win.data.ptr, N * P, P, pitch, prob.H, prob.W, prob.C, prob.R,
                      prob.sh, prob.dh, prob.pt, prob.pl, *element_strides(x, prob.layout))
        w_win = scratch.empty((K, red), prob.dtype)
        self.runs((min(K, self.run_blocks), 1, 1), (256, 1, 1), stream, w.data.ptr,
                  w_win.data.ptr, K, 1, red, prob.R, prob.S, prob.Cg, prob.R, 1, 1, 0, 0,
                  *element_strides(w, prob.layout))
        return self._inner_into(x_win, w_win, bias, y, scratch)

    def _inner_into(self, x, w, bias, y, scratch: Scratch):
        """The inner plan's kernel on x and w (NHWC) into y itself where it writes y's layout
        (an NHWC y, or Geometry.y_nchw), else into a channels-last y transposed into the NCHW
        y (layout.cu)."""
        prob = self.prob
        if prob.layout == "NHWC" or self.plan.inner.geometry.y_nchw:
            self.inner(x, w, bias, y, scratch)
            return y
        N, K, PQ = prob.N, prob.K, prob.P * prob.Q
        y_t = scratch.empty((N, prob.P, prob.Q, K), prob.dtype)
        self.inner(x, w, bias, y_t, scratch)
        self._transpose(y_t, y, N, PQ, K, PQ * K, K, 1)
        return y

    def _transpose(self, src, dst, batch, rows, cols, sb, sr, sc):
        """dst (contiguous (batch, cols, rows)) = each of src's batch (rows x cols) matrices,
        elements at b*sb + r*sr + c*sc, transposed by the layout.cu kernel that
        plan.transpose_launch picks, on its grid."""
        a, b = src.data.ptr, dst.data.ptr
        launch, grid, block, args = self._transpose_form(
            src.dtype.itemsize, batch, rows, cols, sb, sr, sc, a % 16 == 0 and b % 16 == 0)
        launch(grid, block, cupy.cuda.get_current_stream().ptr, a, b, *args)

    def _transpose_form(self, itemsize, batch, rows, cols, sb, sr, sc, aligned: bool):
        """(Packed launch, grid, block, its arguments after src and dst) of `_transpose`."""
        kernel, grid, block = transpose_launch(itemsize, batch, rows, cols, sb, sr, sc, aligned)
        if kernel == "transpose_taps":
            return self.transpose_taps, grid, block, (batch, rows, cols, sb)
        if kernel == "transpose_words":
            return self.transpose_words, grid, block, (batch, rows, cols, sb, sr)
        return {"transpose_narrow": self.transpose_narrow, "transpose_batched32": self.transpose32,
                "transpose_batched": self.transpose}[kernel], grid, block, \
            (batch, rows, cols, sb, sr, sc)

    def _argument_buffers(self):
        """This thread's (pointers, kernel-parameter arrays): four pointer slots, and per
        launch the addresses of all its arguments, as cuLaunchKernel reads them."""
        buffers = getattr(self.local, "buffers", None)
        if buffers is None:
            # cuLaunchKernel needs the device's context current in this thread; CuPy makes it
            # current lazily, and setting the device does so at once.
            cupy.cuda.runtime.setDevice(cupy.cuda.runtime.getDevice())
            pointers = np.zeros(5, np.uint64)   # x, w, bias, y; split-K's partial sums
            first = pointers.ctypes.data
            split = [first + 32] if self.plan.splits > 1 else []
            fixed = self.fixed.ctypes.data
            # TMA plans: this thread's 128-byte descriptors (64-byte aligned) close the list.
            maps = np.zeros(256 + 64, np.uint8)
            at = maps.ctypes.data + (-maps.ctypes.data) % 64
            tail = [at + 128 * i for i in range(self.maps)]
            params = [np.array([first, first + 8, first + 16, first + 24] + split +
                               [fixed + i * self.fixed.itemsize + offset
                                for offset in self.offsets] + tail, np.uint64)
                      for i in range(len(self.launches))]
            buffers = self.local.buffers = (pointers, params,
                                            [a.ctypes.data for a in params], maps, at)
        return buffers

    def launch_into(self, x, w, bias, y_ptr: int, stream: int, partial: int = 0) -> None:
        """The launch of a `by_pointers` Executable: conv(x, w) + bias into the contiguous
        output at y_ptr on `stream` (through `launch_workspace` bytes at `partial` where it
        needs them: split-K's partial sums, a filter prelude's copy); w and bias contiguous."""
        self.launch_pointers(x.data.ptr, w.data.ptr, 0 if bias is None else bias.data.ptr,
                             y_ptr, stream, lambda: (x, w), partial)

    def launch_pointers(self, x: int, w: int, bias: int, y: int, stream: int, arrays,
                        partial: int = 0) -> None:
        """`launch_into` by the arrays' pointers (bias 0: none); `arrays()` gives x and w as
        CuPy arrays where a TMA descriptor must be encoded."""
        if self.prelude is not None:             # the filter's copy, then the inner launch
            if not partial:
                raise ValueError("a launch with a filter prelude needs its workspace")
            launch, grid, block, args = self.prelude[(w | partial) % 16 == 0]
            launch(grid, block, stream, w, partial, *args)
            # arrays() gives the caller's w, not its copy: no TMA maps on the inner launch
            self.inner.launch_pointers(x, partial, bias, y, stream, arrays,
                                       partial + self.filter_bytes)
            return
        pointers, params = self._set_pointers(x, w, bias, y, arrays)
        grid = self.launches[0][2]
        if self.launch_workspace:
            if not partial:
                raise ValueError("a split-K launch needs its partial sums' memory")
            pointers[4] = partial
            self._zero_counters(partial, stream)
        cupy.cuda.driver.launchKernel(self.function_ptr, *grid, *self.block, self.smem, stream,
                                      params[0], 0)
        if self.reduce is not None:
            self._sum_splits(partial, bias, y, stream)

    def _zero_counters(self, partial: int, stream: int) -> None:
        """Split-K's fixup: its tiles' counters (after the partial sums at `partial`) zeroed
        on `stream` before the launch."""
        if self.counters:
            cupy.cuda.runtime.memsetAsync(partial + self.launch_workspace - self.counters, 0,
                                          self.counters, stream)

    def _sum_splits(self, partial: int, bias: int, y: int, stream: int) -> None:
        """Split-K's second launch: y = the partial sums' sum, plus the bias (pointers); y
        NCHW where the plan says so (Geometry.y_nchw)."""
        prob = self.prob
        if self.plan.geometry.y_nchw:
            self.reduce((-(-prob.N * prob.P * prob.Q // 32), -(-prob.K // 32), 1), (32, 8, 1),
                        stream, partial, bias, y, self.outputs, prob.K, self.plan.splits,
                        prob.P * prob.Q)
            return
        self.reduce((min(-(-self.outputs // 256), 8 * 65535), 1, 1), (256, 1, 1), stream,
                    partial, bias, y, self.outputs, prob.K, self.plan.splits)

    def _set_pointers(self, x: int, w: int, bias: int, y: int, arrays):
        """This call's four pointers, and its TMA descriptors, into this thread's argument
        buffers; (the pointer slots, each launch's parameter array address)."""
        pointers, _, params, _, maps_at = self._argument_buffers()
        pointers[0], pointers[1], pointers[2], pointers[3] = x, w, bias, y
        if self.tma is not None:
            # keyed by x's pointer too only where x has a descriptor
            ctypes.memmove(maps_at, self.tma.bytes_for(x if self.maps == 2 else 0, w, arrays),
                           128 * self.maps)
        return pointers, params

    def __call__(self, x, w, bias, y, scratch: Scratch):
        """Write conv(x, w) + bias into the contiguous y; w and bias contiguous."""
        prob, plan = self.prob, self.plan
        if self.single:
            self.launch_into(x, w, bias, y.data.ptr, scratch.stream)
            return y
        if plan.algorithm == "direct":
            return direct(prob, x, w, bias, y)
        if plan.algorithm == "im2col_gemm":
            return im2col_gemm(prob, x, w, bias, y)
        if plan.algorithm == "gemm":
            return self.gemm(x, w, bias, y, scratch)
        if plan.algorithm == "im2win_nhwc":
            return self.through_nhwc(x, w, bias, y, scratch)
        if plan.algorithm == "im2win_columns":
            return self.through_columns(x, w, bias, y, scratch)
        if plan.algorithm == "im2win_runs":
            return self.through_runs(x, w, bias, y, scratch)
        if plan.algorithm == "im2win_fused" or plan.algorithm in ONE_LAUNCH:
            # One launch (im2win_fused: more only past 65535 groups), arguments packed once.
            if self.split is not None:          # "3xtf32": the filter's big and small parts
                split = scratch.empty((2 * w.size,), np.float32)
                self.split((min(-(-w.size // 256), 8 * 65535), 1, 1), (256, 1, 1),
                           scratch.stream, w.data.ptr, split.data.ptr, w.size)
                w = split
            pointers, params = self._set_pointers(
                x.data.ptr, w.data.ptr, 0 if bias is None else bias.data.ptr, y.data.ptr,
                lambda: (x, w))
            partial = None
            if self.launch_workspace:           # split-K: partial sums, then their sum
                partial = scratch.empty((self.launch_workspace // 4,), np.float32)
                pointers[4] = partial.data.ptr
                self._zero_counters(partial.data.ptr, scratch.stream)
            for (_, _, grid, _), param in zip(self.launches, params):
                cupy.cuda.driver.launchKernel(self.function_ptr, *grid, *self.block,
                                              self.smem, scratch.stream, param, 0)
            if self.reduce is not None:         # split_reduce (not the fixup's last blocks)
                self._sum_splits(partial.data.ptr, int(pointers[2]), y.data.ptr, scratch.stream)
            return y
        b = NULL if bias is None else bias
        # Materialised windows: the filter in window order (each pixel's reduction is then
        # the window's run), and the window tensor of `plan.chunk` images at a time.
        w_order = w.transpose((0, 1, 3, 2) if prob.layout == "NCHW" else (0, 2, 1, 3))
        w_win = scratch.empty(w_order.shape, w.dtype)
        w_win[...] = w_order
        x_win = scratch.empty((plan.chunk,) + prob.x_win_shape[1:], prob.dtype)
        for n0, images, grid, (_, geo, g0) in self.launches:
            image_to_window(prob, x[n0:n0 + images], x_win[:images])
            self.function(grid, self.block, (x_win, w_win, b, y[n0:n0 + images], self.taps,
                                             geo, np.int32(g0)), shared_mem=self.smem)
        return y


class TorchCall:
    """A remembered Call run on PyTorch CUDA tensors of its key (`torch_call_key`).

    Where the Call needs no copy of w or bias first (a contiguous w and bias), y is a torch
    tensor from PyTorch's allocator and the work goes onto PyTorch's current stream:
    - a launch by pointers into y (`Call.fast`, on the current device: one kernel, split-K's
      with its sum, or a filter's copy before it), its workspace from PyTorch's allocator
      too, no array made at all;
    - anything else (cuBLAS's GEMM, the channels-last twin's copies of x ...): the
      Executable on CuPy views of the tensors and of y (`interop.cupy_view`, 3 us each),
      PyTorch's stream made CuPy's current one (`_external_stream`, made once per stream).
    No DLPack exchange either way (`cupy.from_dlpack` of a tensor took 23 us of host time, and
    `torch.from_dlpack` of the result 8, on the H200's host). Otherwise the Call runs on CuPy
    views on that stream, and y comes back through DLPack.
    """

    __slots__ = ("call", "direct")

    def __init__(self, call: Call):
        self.call = call
        self.direct = not (call.copy_w or call.copy_bias)

    def __call__(self, x, w, bias):
        torch, call = sys.modules["torch"], self.call
        # The stream as torch's compiled code reads it (the public current_stream() took
        # 3-7 us of host time on the H200's host, this 0.2)
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        device = x.get_device()
        stream = raw(device) if raw else torch.cuda.current_stream(x.device).cuda_stream
        same_device = cupy.cuda.runtime.getDevice() == call.device
        # inside a capture, a Call with a graph plan runs that (below, or Call.__call__)
        graph = call.graph is not None and cupy.cuda.runtime.streamIsCapturing(stream)
        if call.fast and same_device and not graph:
            exe = call.exe
            if exe.has_table and cupy.cuda.runtime.streamIsCapturing(stream):
                _captured.add(exe)               # the graph holds its table's address
            y = x.new_empty(call.y_shape)
            partial = None       # split-K's partial sums, a filter's copy: PyTorch's
            #                      memory (graph-safe)
            if exe.launch_workspace:
                partial = torch.empty(exe.launch_workspace // 4, dtype=torch.float32,
                                      device=x.device)
            exe.launch_pointers(x.data_ptr(), w.data_ptr(),
                                0 if bias is None else bias.data_ptr(), y.data_ptr(), stream,
                                lambda: (cupy_view(x), cupy_view(w)),
                                0 if partial is None else partial.data_ptr())
            return y
        if self.direct:
            y = x.new_empty(call.y_shape)
            exe = call.graph if graph else call.exe
            if call.N > 0 and call.nbytes > 0:
                if same_device:
                    self._run(exe, x, w, bias, y, stream)
                else:
                    with cupy.cuda.Device(call.device):
                        self._run(exe, x, w, bias, y, stream)
            return y
        with cupy.cuda.Device(call.device), _external_stream(stream, call.device):
            y = call(cupy_view(x), cupy_view(w), None if bias is None else cupy_view(bias),
                     None)
            return torch.from_dlpack(y)      # on y's stream: DLPack makes no event

    def _run(self, exe, x, w, bias, y, stream: int) -> None:
        """The Executable `exe` on views of the tensors, on `stream` (the current device's)."""
        with _external_stream(stream, self.call.device):
            scratch = Scratch()
            if scratch.capturing:
                _captured.add(exe)               # the graph holds its table's address
            try:
                exe(cupy_view(x), cupy_view(w), None if bias is None else cupy_view(bias),
                    cupy_view(y), scratch)
            finally:
                scratch.release()


_streams: dict = {}


class _RawStream:
    """A CUDA stream handle offered through the CUDA stream protocol."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr

    def __cuda_stream__(self):
        return 0, self.ptr


def _external_stream(ptr: int, device: int):
    """A CuPy stream object for the foreign stream `ptr` of `device` (the current one), made
    once (making one takes host time): it owns nothing, so one object serves every call on
    that stream."""
    stream = _streams.get((ptr, device))
    if stream is None:
        if len(_streams) >= 64:
            _streams.clear()
        from_external = getattr(cupy.cuda.Stream, "from_external", None)
        made = from_external(_RawStream(ptr)) if from_external else \
            cupy.cuda.ExternalStream(ptr, device)
        stream = _streams.setdefault((ptr, device), made)
    return stream


# Executables by (device, problem, plan), shared by every call of that problem and plan. Weak:
# each lives as long as a remembered call (im2win.cuda's bounded memo) holds it, or for good
# once launched into a captured CUDA graph (`_captured`), whose replays read its table.
_executables: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_captured: set = set()
_lock = threading.Lock()


def executable(prob: Problem, plan: Plan) -> Executable:
    """The plan's Executable on the current device, built on first use (whether the call has
    a bias changes nothing the Executable holds, so it is not part of the key)."""
    key = (cupy.cuda.runtime.getDevice(), dataclasses.replace(prob, has_bias=False), plan)
    exe = _executables.get(key)
    if exe is None:
        exe = Executable(prob, plan)
        with _lock:
            exe = _executables.setdefault(key, exe)
    return exe


def run(exe: Executable, x, w, y, scratch: Scratch):
    """exe's convolution of x (of the strides it was planned for) and the contiguous w into the
    contiguous y, no bias, on the current stream and device; scratch (this call's) released
    after."""
    if scratch.capturing:
        _captured.add(exe)                       # the graph holds its table's address
    exe(x, w, None, y, scratch)
    scratch.release()
    return y


def copy_into(out, y):
    """out[...] = y (y contiguous, of out's shape and dtype), by one launch of layout.cu's
    copy_rows where out is 4-D with rows of whole 16-byte words (its last axis contiguous,
    16-byte aligned, the other strides multiples of 16 bytes), else by CuPy; out."""
    nbytes = out.shape[-1] * out.itemsize if out.ndim == 4 else 0
    if nbytes % 16 or not nbytes or out.strides[-1] != out.itemsize or out.data.ptr % 16 or \
            any(s % 16 for s in out.strides[:3]) or not y.flags.c_contiguous:
        out[...] = y
        return out
    words = y.nbytes // 16
    if words:
        kernel("layout", "copy_rows")(
            (min(-(-words // 256), 1 << 16),), (256,),
            (y, out, np.int64(words), np.int32(nbytes // 16), np.int32(out.shape[1]),
             np.int32(out.shape[2]), *(np.int64(s // 16) for s in out.strides[:3])))
    return out


def _extent(a) -> tuple[int, int]:
    """(first, last + 1) byte offsets that a's elements span from its data pointer."""
    if a.size == 0:
        return 0, 0
    low = sum((n - 1) * s for n, s in zip(a.shape, a.strides) if s < 0)
    high = sum((n - 1) * s for n, s in zip(a.shape, a.strides) if s > 0)
    return low, high + a.itemsize


class Call:
    """One validated and planned GPU call, ready to run again on arrays of its key.

    Holds the problem's Executable (kernel, table, packed launch arguments), how to treat w,
    bias and out, and the byte extents that the overlap test of `out` needs.
    """

    __slots__ = ("exe", "graph", "device", "N", "y_shape", "dtype", "copy_w", "copy_bias",
                 "out_direct", "extents", "nbytes", "fast")

    def __init__(self, prob, exe, x, w, bias, out, graph=None):
        # graph: the Executable run in place of exe inside a CUDA graph capture (plan.graph_plan)
        self.exe, self.graph, self.device, self.N = exe, graph, x.data.device_id, prob.N
        self.y_shape, self.dtype = prob.y_shape, prob.dtype
        self.copy_w = not w.flags.c_contiguous
        self.copy_bias = bias is not None and not bias.flags.c_contiguous
        self.out_direct = out is not None and out.flags.c_contiguous
        self.extents = None if out is None else tuple(
            None if a is None else _extent(a) for a in (out, x, w, bias))
        self.nbytes = int(np.prod(self.y_shape)) * self.dtype.itemsize
        # A new y, a launch by pointers, nothing to copy first: y's memory, the launch, then
        # y's array.
        self.fast = exe.by_pointers and out is None and self.nbytes > 0 and not (
            self.copy_w or self.copy_bias)

    def overlaps(self, out, *inputs) -> bool:
        """Whether out's memory span meets an input's (as cupy.may_share_memory bounds it): a
        quick test; where it is True, api.conv2d asks arrays.shares_memory, exactly."""
        (o0, o1), base = self.extents[0], out.data.ptr
        for a, extent in zip(inputs, self.extents[1:]):
            if a is not None and extent[1] > extent[0] and o1 > o0:
                ptr = a.data.ptr
                if base + o0 < ptr + extent[1] and ptr + extent[0] < base + o1:
                    return True
        return False

    def __call__(self, x, w, bias, out):
        """Run on the current stream; y, a new contiguous array, or `out`."""
        if cupy.cuda.runtime.getDevice() != self.device:
            with cupy.cuda.Device(self.device):
                return self(x, w, bias, out)
        exe = self.exe
        if self.graph is not None and \
                cupy.cuda.runtime.streamIsCapturing(cupy.cuda.get_current_stream().ptr):
            exe = self.graph                     # captured: the GPU time's plan (graph_plan)
        elif self.fast:
            # The kernel is launched as soon as y's memory exists; its array (2-3 us of host
            # time) is made while the GPU runs. The workspace (split-K's partial sums, a
            # filter prelude's copy) comes from CuPy's pool (back to it at once: the pool
            # orders its reuse on this stream), except in a capture, where the graph must own
            # it (Scratch, below).
            stream = cupy.cuda.get_current_stream().ptr
            capturing = (exe.has_table or exe.launch_workspace) and \
                cupy.cuda.runtime.streamIsCapturing(stream)
            if capturing and exe.has_table:
                _captured.add(exe)               # the graph holds its table's address
            if not (capturing and exe.launch_workspace):
                memory = cupy.cuda.alloc(self.nbytes)
                partial = cupy.cuda.alloc(exe.launch_workspace) \
                    if exe.launch_workspace else None
                exe.launch_into(x, w, bias, memory.ptr, stream,
                                0 if partial is None else partial.ptr)
                return cupy.ndarray(self.y_shape, self.dtype, memory)
        scratch = Scratch()
        if scratch.capturing:
            _captured.add(exe)                   # the graph holds its table's address
        if out is None:
            y = cupy.empty(self.y_shape, self.dtype)
        else:
            y = out if self.out_direct else scratch.empty(self.y_shape, self.dtype)
        if self.N > 0:
            if self.copy_w:
                w = scratch.contiguous(w)
            if self.copy_bias:
                bias = scratch.contiguous(bias)
            exe(x, w, bias, y, scratch)
        if out is not None and not self.out_direct:
            y = copy_into(out, y)
        scratch.release()
        return y
