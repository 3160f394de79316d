"""Backward filter in float32 on CUDA cores: `wgrad_ffma` (wgrad_ffma.cu).

dw = dy^T times the window operand, the pixels as the reduction, an FP32 GEMM of K/G filters
by (C/G)*R*S columns per group whose operands load row by row straight from dy and x (NHWC):
no copy of either, no transposition. The pixels are split into ranges (`choose`) so that a
layer's few output tiles still fill the GPU; each range's FP32 sums go to a workspace of
splits x dw's size and `wgrad_sum` adds them in a fixed order: the same bits every run.
It takes float32 NHWC problems with K/G a multiple of 4 and dy contiguous and 16-byte aligned
(`refusal` says why not otherwise); x's columns load as float4 where C/G is a multiple of 4 and
x is 16-byte aligned with strides that are multiples of 4 elements, else one float a column.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from im2win.problem import Problem

WORKSPACE = 256 << 20        # bytes the partial sums may take (fewer splits past it)
ITEMS_PER_SM = 8             # blocks (tiles x splits) the splits aim at, per SM
MIN_SLICES = 16              # ... with at least this many slices of the pixels per range
SHORT = 192                  # reductions of at most this many columns take the 64x64 tile
ARGS = np.dtype([(name, np.int64) for name in (
    "npix", "chunk", "sn", "sp", "sq", "sg", "base0", "sr", "ss")] + [(name, np.int32) for name in (
        "K", "Kg", "red", "Q", "P", "sh", "sw", "pt", "pl", "H", "W", "Cg", "S", "dh", "dw",
        "G")], align=True)


@dataclasses.dataclass(frozen=True)
class Tile:
    """BM filters x BN columns, BK pixels a slice; BM*BN/64 threads."""

    BM: int
    BN: int
    BK: int

    @property
    def threads(self) -> int:
        return self.BM * self.BN // 64

    def name(self, vector_x: bool) -> str:
        return f"wgrad_ffma<{self.BM}, {self.BN}, {self.BK}, {str(vector_x).lower()}>"


TILES = (Tile(64, 128, 16), Tile(128, 64, 16), Tile(128, 128, 16), Tile(64, 64, 16))


def refusal(prob: Problem, dy_ptr: int) -> str | None:
    """Why the kernel cannot take this backward filter (None: it can)."""
    if prob.dtype.name != "float32" or prob.layout != "NHWC":
        return "it takes float32 NHWC problems"
    if prob.Kg % 4:
        return "K/groups must be a multiple of 4"
    if dy_ptr % 16:
        return "dy must start 16-byte aligned"
    return None


def vector_x(prob: Problem, x_strides, x_ptr: int) -> bool:
    """Whether x's columns load as float4: C/G a multiple of 4, channels contiguous, the other
    strides multiples of 4 elements, x 16-byte aligned."""
    xn, xc, xh, xw = x_strides
    return prob.Cg % 4 == 0 and xc == 1 and not (xn % 4 or xh % 4 or xw % 4 or x_ptr % 16)


def choose(prob: Problem, sms: int, tile: Tile | None = None) -> tuple[Tile, int]:
    """(tile, splits): 128 filters x 64 columns past 64 filters, else 64 x 128, or 64 x 64
    for reductions of at most SHORT columns; then splits of the pixels that bring tiles x
    splits to about ITEMS_PER_SM blocks per SM, each range at least MIN_SLICES slices, the
    partial sums within WORKSPACE.

    Read off tools/wgrad_ffma_dev.py on the H200 (batch 128, 2026-12-02, TFLOPS): 128x64 was
    the fastest tile on every layer of more than 64 filters (cv8 38.6 against 32.0 for
    64x128 and 33.9 for 128x128; cv12 32.7 against 27.3 and 31.3), 64x128 on 64 filters
    with long reductions (cv4 33.6 against 19.0 for 128x64; cv9 33.1), 64x64 where the
    reduction is short (cv3, 147 columns: 25.8 against 19.7; cv7, 27: 13.9 against 7.4)."""
    if tile is None:
        tile = TILES[1] if prob.Kg > 64 else TILES[3] if prob.reduction <= SHORT else TILES[0]
    tiles = -(-prob.Kg // tile.BM) * -(-prob.reduction // tile.BN) * prob.G
    slices = -(-prob.N * prob.P * prob.Q // tile.BK)
    size = prob.K * prob.reduction * 4
    splits = max(1, min(-(-ITEMS_PER_SM * sms // tiles), slices // MIN_SLICES,
                        65535 // prob.G, WORKSPACE // size))
    return tile, splits


def specializations() -> set:
    return {("wgrad_ffma", t.name(v)) for t in TILES for v in (True, False)} | \
        {("wgrad_ffma", "wgrad_sum")}


def arguments(prob: Problem, x_strides, tile: Tile, splits: int) -> np.ndarray:
    """The kernel's WgradFfmaArgs for `splits` pixel ranges."""
    xn, xc, xh, xw = x_strides
    npix = prob.N * prob.P * prob.Q
    chunk = -(-(-(-npix // splits)) // tile.BK) * tile.BK
    return np.array((npix, chunk, xn, prob.sh * xh, prob.sw * xw, prob.Cg * xc,
                     -(prob.pt * xh + prob.pl * xw), prob.dh * xh, prob.dw * xw,
                     prob.K, prob.Kg, prob.reduction, prob.Q, prob.P, prob.sh, prob.sw,
                     prob.pt, prob.pl, prob.H, prob.W, prob.Cg, prob.S, prob.dh, prob.dw,
                     prob.G), ARGS)


class Runner:
    """The kernel made ready for one problem, x's strides and whether x loads as float4, on
    the current device; immutable once built. A call: one launch, and with splits one
    wgrad_sum over the workspace."""

    def __init__(self, prob: Problem, x_strides: tuple, vector: bool,
                 tile: Tile | None = None, splits: int | None = None):
        import cupy

        from im2win.cuda import launch
        device = cupy.cuda.runtime.getDevice()
        self.tile, self.splits = choose(prob, launch.sm_count(device), tile)
        if splits is not None:                      # a tool's or a test's choice
            self.splits = splits
        self.size = prob.K * prob.reduction
        self.function = launch.kernel("wgrad_ffma", self.tile.name(vector))
        self.sum = launch.kernel("wgrad_ffma", "wgrad_sum") if self.splits > 1 else None
        self.grid = (-(-prob.reduction // self.tile.BN), -(-prob.Kg // self.tile.BM),
                     prob.G * self.splits)
        self.args = arguments(prob, x_strides, self.tile, self.splits)[()]

    def __call__(self, x, dy, dw) -> None:
        """dw (contiguous, K x R x S x C/G) = the w-gradient from x and the contiguous dy
        on the current stream."""
        import cupy
        out = dw if self.sum is None else cupy.empty(self.splits * self.size, np.float32)
        self.function(self.grid, (self.tile.threads, 1, 1), (x, dy, out, self.args))
        if self.sum is not None:
            self.sum((min(-(-self.size // 256), 8 * 65535), 1, 1), (256, 1, 1),
                     (out, dw, np.int64(self.size), np.int32(self.splits)))


@functools.lru_cache(maxsize=64)
def _runner(device: int, prob: Problem, x_strides: tuple, vector: bool) -> Runner:
    return Runner(prob, x_strides, vector)


def runner(prob: Problem, x_strides, vector: bool) -> Runner:
    """The problem's Runner on the current device, built on first use."""
    import cupy
    return _runner(cupy.cuda.runtime.getDevice(), prob, tuple(x_strides), vector)
