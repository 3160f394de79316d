"""Backward filter on the Hopper kernel: `im2win_wgmma_wgrad` (im2win_wgmma.cu).

dw = dy^T times the window operand, the pixels as the reduction: x's TMA im2col boxes (one tap,
CB = 64 channels, or 8 where C/G <= 16; 64 pixels) and dy's tiled boxes (64 pixels by 64
filters), both read MN-major by wgmma. A tile is 128 filters (64 where K/G <= 64) by NB boxes
side by side (a tile's boxes run over channel blocks, then taps, so one slice of dy serves
them all), each consumer warpgroup one wgmma m64nNCk16 a k16 step (`Tile`); split-K over
pixel ranges where the tiles are fewer than the SMs, the partial sums added in a
fixed order (`split_reduce`): the same bits every run. It takes float16 and bfloat16 NHWC
problems whose C/G is a multiple of 8 (channel boxes past the group's are computed and not
stored), with x's channels and dy contiguous and 16-byte aligned, on compute capability 9.0
(`refusal` says why not otherwise). `staged` gets other float16 and bfloat16 problems there
by copies: NCHW x and dy channels-last, and with one group of C not a multiple of 8 x's window
columns as channels (`window_columns`, where `columns_pay`) or C padded with zeros to a
multiple of 8; the rest runs as forward convolutions (`im2win.gradients`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import threading

import numpy as np

from im2win.cuda.plan import columns_stage
from im2win.problem import Problem

HOPPER = 90
SLICE = 64                    # pixels per slice of the reduction
WIDTHS = (256, 192, 128, 64)  # wgmma N of a consumer (NC)
RING = 225 * 1024             # shared memory for the ring's stages (and its barriers)
TABLE = 64 * 12 + 1024        # im2win_wgmma.cu's WGRAD_TABLE, and the ring's alignment
MIN_SLICES = 8                # ... with at least this many slices per pixel range
MAX_SPLITS = 256
WGRAD_GEO = np.dtype([("npix", np.int64)] + [(name, np.int32) for name in (
    "PQ", "Q", "sh", "sw", "pt", "pl", "dh", "dw", "R", "S", "Cg", "Kg", "K", "G", "splits")],
    align=True)
CUDA_TYPES = {"float16": "half_t", "bfloat16": "bf16_t"}


def refusal(prob: Problem, x_strides, x_ptr: int, dy_ptr: int, arch: int | None) -> str | None:
    """Why the kernel cannot take this backward filter (None: it can)."""
    if x_ptr % 16 or dy_ptr % 16:
        return "x and dy must start 16-byte aligned"
    return _refusal(prob, tuple(x_strides), arch)


@functools.lru_cache(maxsize=256)
def _refusal(prob: Problem, x_strides: tuple, arch: int | None) -> str | None:
    """`refusal` but for the pointers: the same for every call of a problem."""
    from im2win.cuda.tma import im2col_args
    if arch != HOPPER:
        return "it runs on compute capability 9.0"
    if prob.dtype.name not in CUDA_TYPES:
        return f"it takes float16 and bfloat16, not {prob.dtype.name}"
    if prob.layout != "NHWC" or prob.Cg * prob.dtype.itemsize % 16:
        return "it takes NHWC with C/groups a multiple of 8"
    if prob.K * prob.dtype.itemsize % 16:
        return "K must be a multiple of 8"
    if prob.N * prob.P * prob.Q >= 1 << 31:
        return "N*P*Q must stay below 2**31"
    try:
        im2col_args(prob, x_strides, box_channels(prob), SLICE)
    except ValueError as err:
        return str(err)
    return None


def staged(prob: Problem, x, dy, columns: bool | None = None):
    """(problem, x, dy, dw buffer, finish) for `run` where the kernel can take the problem
    after copies: NCHW x and dy copied channels-last, and with one group and C not a multiple
    of 8 either x's window columns as channels (`window_columns`: where `columns_pay`, or
    `columns` says; False for the ablation) or C padded with zeros to a multiple of 8 (the
    padded channels' gradients are dropped); finish(dw2, dw) writes the result into dw in its
    layout. None where it cannot even so (see `refusal`). The copies are workspace of about
    x's and dy's size (window columns: N*H*Q*C2 elements); the kernel alone needs none."""
    import cupy
    from im2win.cuda.launch import element_strides
    if prob.N == 0 or prob.dtype.name not in CUDA_TYPES or \
            _capability(x.data.device_id) != HOPPER:
        return None
    step = 16 // prob.dtype.itemsize
    nchw = prob.layout == "NCHW"
    pad = -prob.C % step if prob.G == 1 else 0
    if nchw:
        x = x.transpose(0, 2, 3, 1)
        dy = cupy.ascontiguousarray(dy.transpose(0, 2, 3, 1))
    if pad and (columns_pay(prob) if columns is None else columns and columns_pay(prob, True)):
        dy = cupy.ascontiguousarray(dy)
        x, inner = window_columns(prob, x)
        if refusal(inner, element_strides(x, "NHWC"), x.data.ptr, dy.data.ptr,
                   HOPPER) is not None:
            return None
        SC = prob.S * prob.C

        def finish(dw2, dw):        # (K, R, 1, (s, c) padded) -> (K, R, S, C) in dw's layout
            dw2 = dw2[:, :, 0, :SC].reshape(prob.K, prob.R, prob.S, prob.C)
            dw[...] = dw2.transpose(0, 3, 1, 2) if nchw else dw2
        return inner, x, dy, cupy.empty((prob.K, prob.R, 1, inner.C), prob.dtype), finish
    if pad:
        padded = cupy.zeros(x.shape[:3] + (prob.C + pad,), x.dtype)
        padded[..., :prob.C] = x
        x = padded
    elif nchw:
        x = cupy.ascontiguousarray(x)
    dy = cupy.ascontiguousarray(dy)
    inner = dataclasses.replace(prob, layout="NHWC", C=prob.C + pad) if nchw or pad else prob
    if refusal(inner, element_strides(x, "NHWC"), x.data.ptr, dy.data.ptr, HOPPER) is not None:
        return None
    if not (nchw or pad):
        return inner, x, dy, None, None            # as it is: run into dw directly

    def finish(dw2, dw):
        dw2 = dw2[..., :prob.Cg]
        dw[...] = dw2.transpose(0, 3, 1, 2) if nchw else dw2
    return inner, x, dy, cupy.empty((prob.K, prob.R, prob.S, inner.Cg), prob.dtype), finish


WINDOW_ROW = 4096             # layout.cu's WINDOW_ROW: elements of x's row a block holds
COLUMN_BLOCKS = 4             # window_columns' blocks an SM (two row buffers, 16 KB, each)


def columns_pay(prob: Problem, possible: bool = False) -> bool:
    """Whether one group with C not a multiple of 8 goes through window columns rather than C
    padded to 8: where S*C fits one box (64), x's row fits a block (WINDOW_ROW) and the
    columns at least halve the boxes the kernel computes. On the H200 (float16, batch 128,
    copy included) the whole call went from 0.568 to 0.368 ms on cv1 and from 1.004 to 0.648
    on cv3 (11 and 7 boxes of 64 channels in place of 121 and 49 of 8), but not on cv7 (6
    boxes in place of 9: 1.130 against 1.164; docs/hopper.md, step 7). possible: only
    whether it can."""
    if prob.G != 1 or prob.S == 1 or prob.S * prob.C > 64 or prob.W * prob.C > WINDOW_ROW:
        return False
    if possible:
        return True
    padded = dataclasses.replace(prob, layout="NHWC", C=-(-prob.C // 8) * 8)
    return 2 * boxes(columns_stage(prob, wide=False)) <= boxes(padded)


def window_columns(prob: Problem, x):
    """(x2, its problem `columns_stage`) for one group with few channels: x2[n, h, q, s*C + c]
    = x[n, h, q*sw + s*dw - pl, c] (zero outside x; the channels padded with zeros to C2),
    each output column's S window columns side by side as channels, as im2win lays a
    window's columns out (layout.cu's window_columns: COLUMN_BLOCKS blocks an SM, looping over
    x's rows). Its gradient is dw's, (s, c) flattened. x: NHWC-ordered (a view of NCHW is
    fine)."""
    import cupy
    from im2win.cuda.launch import sm_count
    inner = columns_stage(prob, wide=False)
    x2 = cupy.empty((prob.N, prob.H, prob.Q, inner.C), prob.dtype)
    columns_into(window_columns_kernel(CUDA_TYPES[prob.dtype.name]), x, x2, prob.H, prob.W,
                 prob.C, prob.S, prob.sw, prob.dw, prob.pl,
                 COLUMN_BLOCKS * sm_count(cupy.cuda.runtime.getDevice()))
    return x2, inner


def window_columns_kernel(T: str):
    """layout.cu's window_columns<T> on the current device, a launch.Packed."""
    from im2win.cuda.launch import WINDOW_COLUMNS_PARAMS, packed
    return packed("layout", f"window_columns<{T}>", WINDOW_COLUMNS_PARAMS)


def columns_into(function, src, dst, H: int, W: int, C: int, S: int, sw: int, dw: int,
                 pl: int, blocks: int) -> None:
    """Launch layout.cu's window_columns (`function`: window_columns_kernel's) on the current
    stream: dst (contiguous (rows / H, H, Q, C2)) = the window columns of src, an (n, h, w, c)
    view of any strides (W columns of C channels): S columns dw apart side by side for each
    of the Q output columns, sw apart from -pl; at most `blocks` blocks."""
    import cupy
    rows, Q, C2 = dst.shape[0] * H, dst.shape[2], dst.shape[3]
    function((min(rows, blocks), 1, 1), (256, 1, 1), cupy.cuda.get_current_stream().ptr,
             src.data.ptr, dst.data.ptr, rows, H, W, Q, C2, C, S, sw, dw, pl,
             *(s // src.itemsize for s in src.strides))


@dataclasses.dataclass(frozen=True)
class Tile:
    """A specialisation: NC columns a consumer, boxes of CB channels, SPLIT_N (64 filters a
    tile, the two consumers half the boxes each; else 128 filters, 64 a consumer)."""

    nc: int
    cb: int
    split_n: bool

    @property
    def kt(self) -> int:
        return 64 if self.split_n else 128

    @property
    def nb(self) -> int:
        """Boxes a tile."""
        return (2 if self.split_n else 1) * self.nc // self.cb

    @property
    def stage_bytes(self) -> int:
        """im2win_wgmma.cu's wgrad_stage_bytes."""
        return self.kt * 128 + (2 if self.split_n else 1) * self.nc * 128

    @property
    def stages(self) -> int:
        return min(8, RING // (self.stage_bytes + 16))

    @property
    def smem(self) -> int:
        """im2win_wgmma.cu's wgrad_smem_bytes."""
        return TABLE + self.stages * (self.stage_bytes + 16)

    def name(self, dtype_name: str) -> str:
        return (f"im2win_wgmma_wgrad<{CUDA_TYPES[dtype_name]}, {self.nc}, {self.cb}, "
                f"{str(self.split_n).lower()}, {self.stages}>")


TILES = tuple(Tile(nc, cb, split) for nc in WIDTHS for cb in (64, 8) for split in (False, True))


def box_channels(prob: Problem) -> int:
    return 8 if prob.Cg <= 16 else 64


def boxes(prob: Problem) -> int:
    """A group's dw columns in boxes of `box_channels` of one tap."""
    return prob.R * prob.S * -(-prob.Cg // box_channels(prob))


def tiles(prob: Problem, tile: Tile) -> int:
    return -(-prob.Kg // tile.kt) * -(-boxes(prob) // tile.nb) * prob.G


def choose(prob: Problem, sms: int) -> tuple[Tile, int]:
    """(tile, splits of the pixel range). The tile's boxes: CB = 8 where C/G <= 16 (64 would be
    mostly zeros or the next group's; the H200 measured 8 slower for C/G = 32), else 64; its
    filters 64 where K/G <= 64, else 128; its width the one of least estimated cost, the box
    slots it computes (the last tile's unused ones too) times 1 + 32/NC (a narrower instruction
    does less a cycle; an estimate, not a measurement). Then the most splits that keep the work
    items (tiles x splits) within one wave, one per SM: the H200's sweep of the kernel alone
    (docs/hopper.md, step 6) found about two items per SM up to 30% slower (cv12: 0.073 ms with
    four splits, 0.056 with one)."""
    f, cb, split_n = boxes(prob), box_channels(prob), prob.Kg <= 64
    candidates = [Tile(nc, cb, split_n) for nc in WIDTHS]
    tile = min(candidates, key=lambda t: (-(-f // t.nb) * t.nb * (1 + 32 / t.nc), -t.nc))
    slices = -(-prob.N * prob.P * prob.Q // SLICE)
    splits = max(1, min(MAX_SPLITS, sms // tiles(prob, tile), slices // MIN_SLICES))
    return tile, splits


def specializations() -> set:
    return ({("im2win_wgmma", tile.name(d)) for d in CUDA_TYPES for tile in TILES} |
            {("layout", f"window_columns<{t}>") for t in CUDA_TYPES.values()})


@functools.cache
def _capability(device: int) -> int:
    from im2win.cuda import compute_capability
    return compute_capability(device)


class Runner:
    """The kernel made ready for one problem (and x's strides) on the current device,
    immutable once built: its function with the shared memory it asks for, the tile and
    splits, grid and packed WgradGeo, and a memo of TMA descriptors by (x, dy) pointers;
    so that a call only packs two pointers and launches (`runner` keeps them)."""

    def __init__(self, prob: Problem, x_strides: tuple, splits: int | None = None):
        import cupy

        from im2win.cuda import launch, tma
        device = cupy.cuda.runtime.getDevice()
        sms = launch.sm_count(device)
        self.tile, self.splits = choose(prob, sms)
        if splits is not None:                     # a tool's choice (tools/wgrad_splits.py)
            self.splits = splits
        self.size = prob.K * prob.R * prob.S * prob.Cg
        self.function_ptr = launch.kernel("im2win_wgmma",
                                          self.tile.name(prob.dtype.name)).kernel.ptr
        self.smem = self.tile.smem
        launch.allow_shared_memory(self.function_ptr, self.smem)
        self.grid = min(tiles(prob, self.tile) * self.splits, sms)
        self.geo = np.array((prob.N * prob.P * prob.Q, prob.P * prob.Q, prob.Q, prob.sh,
                             prob.sw, prob.pt, prob.pl, prob.dh, prob.dw, prob.R, prob.S,
                             prob.Cg, prob.Kg, prob.K, prob.G, self.splits), WGRAD_GEO)
        cb = self.tile.cb
        x_args = tma.im2col_args(prob, x_strides, cb, SLICE)
        dy_dims, dy_stride = (prob.K, prob.N * prob.P * prob.Q), prob.K * prob.dtype.itemsize
        self.maps = launch.TmaMaps(lambda x, dy: (
            tma.encode_im2col(x, x_args, cb == 64),
            tma.encode_tiled(dy, dy_dims, dy_stride, (SLICE, SLICE))))
        self.reduce = 0                                  # split_reduce's CUfunction
        if self.splits > 1:
            self.reduce = launch.kernel("im2win_wgmma",
                                        f"split_reduce<{CUDA_TYPES[prob.dtype.name]}>").kernel.ptr
            # its arguments past the pointers: no bias, dw's size, K, the splits
            self.reduce_args = np.array([(0, self.size, prob.K, self.splits)], np.dtype(
                [("bias", np.uint64), ("size", np.int64), ("K", np.int32),
                 ("splits", np.int32)]))
        self.local = threading.local()

    def _buffers(self):
        """This thread's (pointers: partial sums, dw; kernel parameters; descriptors' at)."""
        buffers = getattr(self.local, "buffers", None)
        if buffers is None:
            pointers = np.zeros(2, np.uint64)
            blob = np.zeros(256 + 64, np.uint8)          # two descriptors, 64-byte aligned
            at = blob.ctypes.data + (-blob.ctypes.data) % 64
            params = np.array([pointers.ctypes.data, pointers.ctypes.data + 8,
                               self.geo.ctypes.data, at, at + 128], np.uint64)
            reduce = None
            if self.reduce:      # split_reduce(partial, bias, dw, size, K, splits)
                first = self.reduce_args.ctypes.data
                reduce = np.array([pointers.ctypes.data, first, pointers.ctypes.data + 8,
                                   first + 8, first + 16, first + 20], np.uint64)
            buffers = self.local.buffers = (pointers, blob, at, params, reduce)
        return buffers

    def __call__(self, x, dy, dw) -> None:
        """dw (contiguous, K x R x S x C/G) = the w-gradient from x and dy (CuPy) on the
        current stream."""
        import cupy

        pointers, _, at, params, reduce = self._buffers()
        ctypes.memmove(at, self.maps.bytes_for(x.data.ptr, dy.data.ptr, lambda: (x, dy)), 256)
        partial = None
        if self.reduce:
            partial = cupy.empty(self.splits * self.size, np.float32)
            pointers[0] = partial.data.ptr
        pointers[1] = dw.data.ptr
        stream = cupy.cuda.get_current_stream().ptr
        cupy.cuda.driver.launchKernel(self.function_ptr, self.grid, 1, 1, 384, 1, 1, self.smem,
                                      stream, params.ctypes.data, 0)
        if partial is not None:
            cupy.cuda.driver.launchKernel(self.reduce, min(-(-self.size // 256), 8 * 65535), 1,
                                          1, 256, 1, 1, 0, stream, reduce.ctypes.data, 0)


@functools.lru_cache(maxsize=64)
def _runner(device: int, prob: Problem, x_strides: tuple) -> Runner:
    return Runner(prob, x_strides)


def runner(prob: Problem, x_strides) -> Runner:
    """The problem's Runner on the current device, built on first use."""
    import cupy
    return _runner(cupy.cuda.runtime.getDevice(), prob, tuple(x_strides))


def run(prob: Problem, x, dy, dw, x_strides) -> None:
    """dw (contiguous, K x R x S x C/G) = the w-gradient of `prob` from x and dy (CuPy), on
    the current device and stream."""
    runner(prob, x_strides)(x, dy, dw)


def columns_direct(prob: Problem):
    """For a `columns_pay` NHWC problem whose dy is contiguous: a callable (x, dy, dw) made
    ready once, three launches a call: x's window columns (`window_columns`), the R x 1
    problem's Runner into (K, R, 1, C2), and dw gathered from that (layout.cu's gather5,
    the padded channels dropped); None where the kernel would refuse x2."""
    import cupy
    from im2win.cuda.launch import kernel
    inner = columns_stage(prob, wide=False)
    x2_strides = (prob.H * prob.Q * inner.C, 1, prob.Q * inner.C, inner.C)      # NCHW-lettered
    if refusal(inner, x2_strides, 0, 0, HOPPER) is not None:
        return None
    run_inner = runner(inner, x2_strides)
    K, R, S, C, C2 = prob.K, prob.R, prob.S, prob.C, inner.C
    gather = kernel("layout", f"gather5<{CUDA_TYPES[prob.dtype.name]}>")
    total = K * R * S * C
    args = (np.int64(total), *map(np.int32, (K, R, S, C)),
            *map(np.int64, (0, R * C2, C2, C, 1)))        # dw[k, r, s, c] = dw2[k, r, 0, s*C + c]
    grid = (min(-(-total // 256), 65535), 1, 1)

    def call(x, dy, dw):
        x2, _ = window_columns(prob, x)
        dw2 = cupy.empty((K, R, 1, C2), prob.dtype)
        run_inner(x2, dy, dw2)
        gather(grid, (256, 1, 1), (dw2, dw, *args))
    return call

