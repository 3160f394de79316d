"""The one tuning table: tile shapes, optimisation switches, and the planner's choices.

Pure data and pure functions; nothing here imports CuPy. Every entry is exercised by the GPU
tests, and every kernel specialisation it can produce is compiled by CI for sm_80 and sm_90.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Tile:
    """A block's BM x BN output tile (filters x pixels), its BK reduction slice, and each
    thread's TM x TN register micro-tile; (BM/TM)*(BN/TN) threads."""

    name: str
    BM: int
    BN: int
    BK: int
    TM: int
    TN: int

    @property
    def threads(self) -> int:
        return (self.BM // self.TM) * (self.BN // self.TN)

    def fits(self, acc_bytes: int) -> bool:
        """Whether the double-buffered, padded A and B tiles of `acc_bytes`-wide accumulator
        elements fit the 48 KB of static shared memory a block may declare."""
        return 2 * self.BK * (self.BM + 4 + self.BN + 4) * acc_bytes <= SMEM_LIMIT


SMEM_LIMIT = 48 * 1024

TILES = {tile.name: tile for tile in (
    Tile("128x128", 128, 128, 8, 8, 8),
    Tile("128x64", 128, 64, 8, 8, 4),
    Tile("64x128", 64, 128, 16, 4, 8),
    Tile("32x128", 32, 128, 32, 4, 4),
    Tile("64x64", 64, 64, 8, 4, 4),
    Tile("128x128k16", 128, 128, 16, 8, 8),
    Tile("128x64k16", 128, 64, 16, 8, 4),
    Tile("64x64k16", 64, 64, 16, 4, 4),
    Tile("16x16", 16, 16, 8, 1, 1),      # no register micro-kernel: one output per thread
)}
NO_MICRO_KERNEL = "16x16"

# im2win_ffma.cu's tiles (float32 NHWC fused windows): BM filters x BN pixels, BK-deep slices
# within one tap (C/G a multiple of BK), an 8 x 8 micro-tile per thread.
FFMA_TILES = {tile.name: tile for tile in (
    Tile("f128x128", 128, 128, 16, 8, 8),
    Tile("f128x64", 128, 64, 16, 8, 8),
    Tile("f64x128", 64, 128, 16, 8, 8),
    Tile("f64x64", 64, 64, 16, 8, 8),
    Tile("f128x128k8", 128, 128, 8, 8, 8),
    Tile("f128x64k8", 128, 64, 8, 8, 8),
    Tile("f64x128k8", 64, 128, 8, 8, 8),
    Tile("f64x64k8", 64, 64, 8, 8, 8),
    Tile("f96x128", 96, 128, 16, 8, 8),
    Tile("f96x128k8", 96, 128, 8, 8, 8),
)}


@dataclasses.dataclass(frozen=True)
class MmaTile:
    """The Tensor-Core kernel's BM x BN block tile and each warp's WM x WN share of it
    (BK = 32 halves); (BM/WM)*(BN/WN) warps."""

    name: str
    BM: int
    BN: int
    WM: int
    WN: int

    @property
    def threads(self) -> int:
        return (self.BM // self.WM) * (self.BN // self.WN) * 32


MMA_TILES = {tile.name: tile for tile in (
    MmaTile("mma128x128", 128, 128, 64, 64),
    MmaTile("mma128x64", 128, 64, 64, 32),
    MmaTile("mma96x128", 96, 128, 48, 64),
    MmaTile("mma64x128", 64, 128, 32, 64),
    MmaTile("mma32x128", 32, 128, 16, 64),
)}
MMA_BK = 32


@dataclasses.dataclass(frozen=True)
class WgmmaTile:
    """The Hopper kernel's (im2win_wgmma.cu) BM x BN block tile, pixels x filters, and its ring
    of STAGES shared-memory slices of 64 reduction elements; three warpgroups (a producer and
    two consumers of BM/2 pixel rows each)."""

    name: str
    BM: int
    BN: int
    STAGES: int

    threads = 384

    def smem_bytes(self, stages: int | None = None, three: bool = False,
                   resident: int = 0, table: bool = True) -> int:
        """Dynamic shared memory of a block (im2win_wgmma.cu's smem_bytes; with `three`,
        "3xtf32"'s smem_bytes_three: each stage holds the filter tile twice; with
        `resident` slices of the filter kept in shared memory, stages of the window tile
        only and the filter tile after them; `table`: the cp.async producer's pixel table,
        which TMA copies do without)."""
        stages = self.STAGES if stages is None else stages
        if three:
            return self.fixed_bytes(table) + stages * ((self.BM + 2 * self.BN) * 128 + 16)
        ring = stages * ((self.BM + (0 if resident else self.BN)) * 128 + 16)
        return self.fixed_bytes(table) + ring + resident * self.BN * 128

    def fixed_bytes(self, table: bool = True) -> int:
        """Shared memory of a block but its stages and resident filter: 1 KB of alignment
        slack, 32 bytes of mbarriers outside the ring, and with `table` 16 bytes per pixel
        row."""
        return 1024 + 32 + (16 * self.BM if table else 0)

    def three_stages(self) -> int:
        """The deepest ring of "3xtf32" that fits 227 KB (at most STAGES; counted with the
        pixel table that its TMA copies do without, as im2win_wgmma.cu's static check does)."""
        fit = (HOPPER_SMEM - self.fixed_bytes()) // ((self.BM + 2 * self.BN) * 128 + 16)
        return min(self.STAGES, fit)

    def resident_stages(self, slices: int) -> int:
        """The deepest ring of window tiles (at most STAGES) that fits 227 KB beside the
        filter tile's `slices` slices kept resident (0: not even one; TMA copies, so no pixel
        table: cv8's 128x128 tiles, 9 slices, get 5 stages where the table left 4)."""
        room = HOPPER_SMEM - self.fixed_bytes(False) - slices * self.BN * 128
        return max(0, min(self.STAGES, room // (self.BM * 128 + 16)))


HOPPER_SMEM = 227 * 1024       # dynamic shared memory of one block on compute capability 9.0


WGMMA_TILES = {tile.name: tile for tile in (
    WgmmaTile("wg128x256", 128, 256, 4),
    WgmmaTile("wg256x128", 256, 128, 4),
    WgmmaTile("wg128x128", 128, 128, 6),
    WgmmaTile("wg256x96", 256, 96, 4),
    WgmmaTile("wg256x64", 256, 64, 5),
)}
WGMMA_BK = 64


@dataclasses.dataclass(frozen=True)
class Options:
    """Optimisations of the im2win kernels, each on by default (but `multicast`) and switchable
    alone.

    CUDA-core kernel (float32, float64; float16 with tensor_cores=False):
        smem: shared-memory tiling of both operands (off: straight from global memory);
            for depthwise layers, each block walking a strip of output rows with its filters
            in shared memory (depthwise_rows: 3x3 and 5x5 at stride 2, or on maps of 28 rows
            or more), in NCHW the same walk on vectors of a row's columns shared by warp
            shuffles (depthwise_rows_vec, no shared memory; any map where a vector fits) or,
            for small maps in NHWC, its input window in shared memory (depthwise_tile_nhwc);
            off: each thread's register window read from x.
        micro_kernel: each thread computes a TM x TN register tile (off: the 16x16 tile, one
            output per thread).
        vector_loads: 16-byte (float4) filter loads and shared-memory reads.
    Tensor-Core kernels (float16, bfloat16):
        tensor_cores: use them (off: float16 runs on the CUDA-core kernel; bfloat16 needs
            them). Depthwise 5x5 and 7x7 layers in NHWC at stride 1 run on them too
            (depthwise_mma_nhwc, depthwise_mma_small_nhwc; with smem on; off: the CUDA-core
            depthwise kernels).
        hopper: on compute capability 9.0, the wgmma kernel (im2win_wgmma.cu) where the
            planner finds that it pays (plan.wgmma_pays; a wgmma tile forces it); off: the
            mma.sync kernel (im2win_mma.cu), which is the only one elsewhere.
        async_copy: cp.async 16-byte global-to-shared copies (off: through registers;
            mma.sync kernel).
        ldmatrix: ldmatrix fragment loads (off: 32-bit shared loads; mma.sync kernel).
        persistent: one block per SM takes tiles in turn (off: one block per tile; wgmma
            kernel).
        tma: the wgmma kernel's copies by the Tensor Memory Accelerator, one thread per
            stage: x through its im2col descriptor, w as a tiled matrix (NHWC fused windows,
            16-byte aligned operands, C/G a multiple of 64, or for 16-bit types of 32 in boxes
            of 32 channels; off: the producer warpgroup's cp.async copies).
        resident_filter: where TMA copies and a launch has one filter tile (K/G filters at
            most the tile's, one group), the whole filter tile is loaded into shared memory
            once per block and every work item reads it there, so the ring holds window tiles
            only (off: each stage copies its slice of the filter too; wgmma kernel).
        ping_pong: where TMA copies on the persistent grid and a tile's accumulators fit one
            consumer warpgroup (128x128, 256x64), each consumer takes whole tiles, the two in
            turn, so that one's epilogue overlaps the other's wgmmas (off: both share each
            tile, half its rows each; wgmma kernel).
        multicast: where TMA copies on the persistent grid and a launch has one filter tile
            that is not resident, blocks run in clusters of two that take neighbouring tiles,
            each copying half of every filter slice into both (TMA multicast), so that the L2
            serves each slice once a cluster, where the launch has at least
            plan.MULTICAST_MIN_TILES work items (the pair waits for its slower block, which a
            launch of few waves pays for: on an H100 cv10's 676 tiles -7%, docs/hopper.md step
            34) (off: each block copies every slice itself; cv4 on an H100, one process: float16
            355.1 -> 379.0 TFLOPS, bfloat16 352.0 -> 380.6, step 36; wgmma kernel).
        stem_rows: a dense stem of stride 2 (C <= 4, S of 3, 4, 7 or 8, K <= 64, Q <= 112,
            16-bit, NHWC, Hopper) runs on narrow_rows_wgmma: x's rows kept in a ring of
            shared memory as columns of four channels, each read by the consecutive output
            rows over it, every output row's windows read by one overlapping wgmma
            descriptor (no window fragments loaded) and the filters held in registers
            (plan.narrow_rows_takes), where it pays (K = 64: plan.narrow_rows_pays) (off:
            narrow_dense_wgmma, whose tiles copy all R rows and load each pair of elements;
            on an H200 cv3 205.5 -> 125.3 us, ResNet's stem 226.3 -> 126.0, docs/hopper.md
            steps 35 and 36).
        window_rows: an NHWC layer whose window columns lie 128 bytes apart (sw*C*2 = 128:
            C = 32 at stride 2, C = 64 at stride 1; 16-bit, one group, dw = 1, S <= 7,
            K <= 128, Q <= 112, Hopper, with tma on; never an NCHW problem's twin) runs on
            rows_wgmma.cu where it pays (plan.rows_wgmma_pays: cv4): x's rows kept in a ring
            of shared memory, each read by every output row over it, every output row's
            windows read from them by one wgmma descriptor a k16 step, the filter streamed
            a window row a stage by TMA and shared by the two output rows of a block's tile
            (off: im2win_wgmma.cu's im2col tiles; on an H200 cv4 float16 707.0 -> 527.7 us,
            bfloat16 682.1 -> 487.6, docs/hopper.md step 37).
        window_columns: "auto" runs a stem (one group, C/G not a multiple of 8, S*C at most
            64) as "im2win_columns": x's window columns as channels, then an R x 1 problem on
            the wgmma kernel (float16 and bfloat16, on Hopper) or im2win_ffma.cu (float32)
            (off: the general kernels, which gather C = 3 element by element).
        window_runs: "auto" runs a float32 stem (one group, C/G not a multiple of 8, dw = 1,
            each output pixel's run 16-byte aligned: sw*R*C a multiple of 4, a reduction of
            at least plan.RUNS_REDUCTION) as "im2win_runs": the window tensor materialised,
            then im2win_ffma.cu over each pixel's whole run of S*R*C values, padded once to
            its slice (off: "im2win_columns", which pads each filter row's S*C to 8).
        fused_runs: "im2win_runs" builds each pixel's run in shared memory straight from x
            (im2win_ffma.cu's kTaps: every element of a slice by a 4-byte copy through the
            plan's table of offsets, in the same window order; no window tensor, no extra
            memory but the filter's window order; off: window.cu materialises x_win first).
        nchw_epilogue: an NCHW problem run on an NHWC one ("im2win_nhwc", "im2win_columns")
            that takes the wgmma kernel in one work item a tile, or im2win_ffma.cu
            (im2win_ffma_to_nchw), writes the NCHW y from the kernel's epilogue (off: into a
            channels-last y that layout.cu transposes into y; float32 NCHW stems then do not
            take "im2win_columns").
        split_k: where TMA copies and a problem has fewer tiles than about one per SM, the
            reduction split into 2, 4 or 8 ranges run as separate work items, their FP32
            partial sums added in a fixed order by a second kernel (off: one work item per
            tile; wgmma kernel). Likewise im2win_ffma.cu where plan.ffma_split_count's model
            of its grid's waves says a split pays (one group, the full kernel).
        ffma: float32 NHWC fused windows with C/G a multiple of 8 (x and w 16-byte aligned)
            on im2win_ffma.cu, whose reduction slices lie within one tap (float4 loads, one
            predicate per pixel and slice, offsets by addition; it needs smem, micro_kernel
            and vector_loads, and has no table, so index_tables does not apply to it; off:
            im2win_conv.cu).
        x_in_place: im2win_ffma.cu reads an x whose channels lie apart (a float32 NCHW
            problem run on its NHWC twin, or an NHWC view of NCHW memory) itself, by the
            kernel's strided form (kStridedX: each element copied into the shared tile by a
            4-byte cp.async, lanes along a row's pixels; off: layout.cu copies the twin's x
            channels-last first, and such a view runs on im2win_conv.cu).
        exact_loads: im2win_ffma.cu's kExact form where every load is inside x and w
            (plan.ffma_exact: no pixel's window reaches the padding, K/G a multiple of the
            tile's filters): the loop loads without bounds predicates (off: the checked loop
            everywhere).
        split_fixup: im2win_ffma.cu's split-K sums its ranges in the kernel: the tile's last
            block to finish adds the others' partial sums (in order of the range, the same
            bits) and writes y, NHWC or NCHW, with the bias (im2win_ffma_fixup), where it
            measured faster (plan.ffma_fixup_pays: two ranges on the kExact loop); off:
            split_reduce's second launch everywhere.
    Both:
        index_tables: reduction offsets from the plan's table (off: div/mod per element).
        double_buffer: overlap loads with math: two shared buffers (CUDA cores; in
            im2win_ffma.cu the fragments double-buffered in registers too, across the
            barrier, and the products in 2 x 2 blocks), a three-stage pipeline (mma.sync) or
            the tile's ring of stages (wgmma) (off: one buffer, load then compute).
        conflict_free: shared-memory access free of bank conflicts: padded, interleaved
            columns (CUDA cores), XOR-swizzled 16-byte chunks (mma.sync) or wgmma's 128-byte
            swizzle (off: plain core matrices).
    """

    smem: bool = True
    micro_kernel: bool = True
    index_tables: bool = True
    double_buffer: bool = True
    vector_loads: bool = True
    conflict_free: bool = True
    tensor_cores: bool = True
    async_copy: bool = True
    ldmatrix: bool = True
    hopper: bool = True
    persistent: bool = True
    tma: bool = True
    split_k: bool = True
    ffma: bool = True
    resident_filter: bool = True
    ping_pong: bool = True
    multicast: bool = True
    stem_rows: bool = True
    window_rows: bool = True
    window_columns: bool = True
    window_runs: bool = True
    nchw_epilogue: bool = True
    x_in_place: bool = True
    exact_loads: bool = True
    fused_runs: bool = True
    split_fixup: bool = True

    def __post_init__(self):
        for field in dataclasses.fields(self):
            if not isinstance(getattr(self, field.name), bool):
                raise TypeError(f"Options.{field.name} must be a bool, got "
                                f"{getattr(self, field.name)!r}")

    @classmethod
    def ablations(cls, tensor_cores: bool = False, hopper: bool = False) -> dict[str, "Options"]:
        """The full set, then each optimisation of one kernel switched off alone, by name:
        the CUDA-core kernel's, the mma.sync kernel's (tensor_cores), or the wgmma kernel's
        (hopper)."""
        if hopper:
            names = HOPPER_SWITCHES
        else:
            names = TENSOR_CORE_SWITCHES if tensor_cores else CUDA_CORE_SWITCHES
        full = cls() if hopper or not tensor_cores else cls(hopper=False)
        return {"full": full} | {f"no_{name}": dataclasses.replace(full, **{name: False})
                                 for name in names}


CUDA_CORE_SWITCHES = ("smem", "micro_kernel", "index_tables", "double_buffer", "vector_loads",
                      "conflict_free", "ffma", "x_in_place", "window_runs", "exact_loads",
                      "fused_runs", "split_fixup")
TENSOR_CORE_SWITCHES = ("async_copy", "double_buffer", "ldmatrix", "conflict_free",
                        "index_tables")
HOPPER_SWITCHES = ("double_buffer", "conflict_free", "index_tables", "persistent", "tma",
                   "split_k", "resident_filter", "ping_pong", "multicast", "window_columns",
                   "nchw_epilogue", "stem_rows", "window_rows")


ALGORITHMS = ("auto", "direct", "im2win", "im2win_fused", "im2col_gemm", "depthwise", "narrow",
              "pointwise", "gemm", "im2win_nhwc", "im2win_columns", "im2win_runs")
# The algorithms of one kernel launch whose arguments are their four pointers, a few ints and
# x's strides (depthwise.cu, narrow.cu, pointwise.cu), with a grid of the plan's own.
ONE_LAUNCH = ("depthwise", "narrow", "pointwise")



def choose_tile(Kg: int, pixels: int, reduction: int, layout: str, dtype_name: str) -> str:
    """Pick a tile for K/G filters per group, N*P*Q pixels and a (C/G)*R*S reduction.

    Read off the tile sweep on the H200 (docs/data/gpu-tile-sweep-float32.json, made by
    tools/tile_sweep.py; summarised in docs/performance.md, "Tiles"): the tile height follows
    the filters (32 rows up to 32 filters, 64 for 64, else 128, whose tail waste on 96 filters
    costs less than a third more blocks); 128 pixel columns only above a million pixels;
    16-deep reduction slices for reductions of 256 and more where they measured faster (NHWC,
    64 filters, or reductions of 4096 and more). float64 uses the 64x64 tile (a 128x128 tile
    of doubles needs too many registers).
    """
    if dtype_name == "float64":
        return "64x64"
    if Kg <= 32:
        return "32x128"
    k16 = reduction >= 256 and (layout == "NHWC" or Kg == 64 or reduction >= 4096)
    if Kg <= 64:
        return "64x64k16" if k16 else "64x64"
    if Kg % 64:
        return "128x64k16"
    if pixels >= 1 << 20:
        return "128x128k16" if layout == "NHWC" else "128x128"
    return "128x64k16" if k16 else "128x64"


def choose_ffma_tile(Cg: int, Kg: int) -> str:
    """Pick im2win_ffma.cu's tile for C/G channels (a multiple of 8) and K/G filters a group:
    64 filters x 128 pixels, 16-deep slices where C/G is a multiple of 16; split-K
    (plan.ffma_split_count) fills small grids. 96 filters where tiles of 96 cover K/G with
    fewer rows than tiles of 64 (96, 288, 480, ...: FFMA_96_ROWS).

    Read off tools/ffma_dev.py and tools/ffma_split_dev.py on the H200 (float32, batch 128
    for cv*, 32 for network layers, 2026-12-04, the loop with fragments double-buffered across
    the barrier): 64x128 was the fastest tile on cv4 (45.5 TFLOPS against 20.8 for 128x128,
    whose rows half idle at 64 filters, and 23.0 for 128x64) and within 1% of the fastest on
    cv8 (44.2 against 44.3 for 128x64) and cv6; with each tile's best split count it beat 64x64
    on all nine layers timed (us, NHWC): cv6 736 against 810, cv11 521 against 574, cv12 384
    against 446, resnet50.16 173 against 192, resnet50.22 207 against 230, convnext_tiny.6 106
    against 117, resnet50.10 167 against 185; grouped (resnext50_32x4d.23, NCHW, G = 32, no
    split) 75.9 against 82.8. (With the earlier loop 64x64 won where the grid was small.)
    16-deep slices beat 8-deep ones on every layer (cv8 44.2 against 41.0).
    """
    rows = "96" if FFMA_96_ROWS and -(-Kg // 96) * 96 < -(-Kg // 64) * 64 else "64"
    return f"f{rows}x128" + ("" if Cg % 16 == 0 else "k8")


# Tiles of 96 filters where they waste fewer rows than 64 (choose_ffma_tile): 192 threads, the
# last of a thread's pixel loads in part of them. tools/columns_dev.py on the H100 (2026-12-05,
# float32 NHWC, batch 128, the stems' R x 1 problems of 96 filters, TFLOPS, tiles of 64 -> 96,
# cuDNN): cv1 21.7 -> 26.9 (20.7), cv2 21.9 -> 27.4 (20.9); in NCHW over the same columns cv1
# 19.9 -> 23.9 (25.5), cv2 20.5 -> 24.7 (26.2) (plan.COLUMNS_NCHW_REDUCTION). The other
# filter counts it takes (65-96, 257-288, 449-480, ...; none among the suites' float32
# im2win_ffma layers) follow the same count of idle rows, untimed.
FFMA_96_ROWS = True


def choose_mma_tile(Kg: int, reduction: int, layout: str) -> str:
    """Pick the Tensor-Core tile for K/G filters per group and a (C/G)*R*S reduction.

    Read off the float16 tile sweep on the H200 (docs/data/gpu-tile-sweep-float16.json, made
    by tools/tile_sweep.py; summarised in docs/performance.md, "Tiles"): 128x64 wherever there
    are more than 64 filters (96 included: its wasted rows cost less than the 96-row tile's
    shape), and for 64 filters in NCHW with long reductions; 64x128 for 64 filters otherwise;
    32x128 up to 32 filters.
    """
    if Kg <= 32:
        return "mma32x128"
    if Kg <= 64 and (layout == "NHWC" or reduction < 256):
        return "mma64x128"
    return "mma128x64"


def choose_wgmma_tile(Kg: int, pixels: int) -> str:
    """Pick the Hopper tile for K/G filters per group and N*P*Q pixels: the filter tile
    covers the group's filters where it can (each block then reads its window rows once),
    256 pixel rows where there are 128 filters or fewer, 128 with 256 filters (the two
    consumers' accumulators are 128 registers each either way), for the cp.async producer
    (TMA has choose_wgmma_tma_tile). Chosen by that reasoning; the one sweep since (all five
    tiles, float16 NHWC, batch 128, H200, docs/hopper.md step 4) found it the best of the
    five on the two layers it runs there, cv4 (256x64: 259 TFLOPS) and cv5 (128x256: 284)."""
    if Kg <= 64:
        return "wg256x64"
    if Kg <= 96:
        return "wg256x96"
    if Kg <= 128:
        return "wg256x128" if pixels >= 256 * 132 else "wg128x128"
    return "wg128x256"


# "3xtf32" holds each slice's sum in a second set of accumulators (im2win_wgmma.cu): the tiles
# of at most 64 accumulators per consumer thread, so that both fit its registers.
THREE_TF32_TILES = ("wg128x128", "wg256x64")


def choose_tf32_tile(Kg: int, pixels: int, precision: str) -> str:
    """The float32 Tensor-Core tile (its kernel has no resident filter or ping-pong, so it
    keeps the 16-bit TMA rule of docs/hopper.md step 4: 256x64 up to 64 filters, 256x128 up to
    128 filters over at least four waves of 256-pixel tiles, else 128x128), for "3xtf32" the
    nearest of THREE_TF32_TILES (128x128 in place of 256x128)."""
    if Kg <= 64:
        tile = "wg256x64"
    elif Kg <= 128 and pixels >= 256 * 132 * 4:
        tile = "wg256x128"
    else:
        tile = "wg128x128"
    return tile if precision != "3xtf32" or tile in THREE_TF32_TILES else "wg128x128"


# 256x128 TMA tiles take a problem of more than 128 filters a group where they make at least
# this many tiles (about 1.5 waves on an H200's 132 SMs). It lies between the nearest sweeps
# on either side, cv11's 144 tiles (128x128 faster) and cv6's 200 (256x128 faster): not
# measured closer than that.
WIDE_TMA_TILES = 192


def choose_wgmma_tma_tile(Kg: int, pixels: int, groups: int = 1) -> str:
    """Pick the Hopper tile for 16-bit types where TMA copies the operands (the producer is
    one thread), for K/G filters a group and N*P*Q pixels. Read off TMA tile sweeps of the
    NHWC float16 benchmark layers on the H200 (batch 128; docs/hopper.md steps 4, 8 and 9):
    - 256x64 for 64 filters (cv9: 291 TFLOPS with the filter resident and ping-pong
      consumers, against 203 for 128x128; cv4: 400 against 161);
    - 256x128 for more than 128 filters where its tiles make WIDE_TMA_TILES or more (cv5,
      200 x 2 tiles: 396 against 340; cv6, 50 x 4: 381 against 349);
    - 128x128 otherwise: 128 filters, which one tile holds resident (cv8: 472 against 354 for
      256x128; cv10: 345 against 309), and fewer wide tiles than that (cv11, 72 x 2: 324
      against 275; cv12, 13 x 4: 305 against 267)."""
    if Kg <= 64:
        return "wg256x64"
    wide = -(-pixels // 256) * -(-Kg // 128) * groups
    return "wg256x128" if Kg > 128 and wide >= WIDE_TMA_TILES else "wg128x128"
