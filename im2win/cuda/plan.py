"""Plan a GPU convolution: algorithm, tile, kernel name, launch geometry. Pure: no CuPy here.

`make_plan` turns a checked `Problem` (plus the input's element strides and whether the filter is
16-byte aligned) into a frozen `Plan` that `im2win.cuda.launch` executes without further
decisions. Offsets follow spec/im2win.md: an operand address is a pixel term (64-bit, once per
thread) plus a reduction term (from the plan's table, `Plan.taps`, where offsets fit 32 bits).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import pathlib
from typing import Callable, NamedTuple

import numpy as np

from im2win.cuda.tuning import (ALGORITHMS, FFMA_TILES, MMA_BK, MMA_TILES, NO_MICRO_KERNEL,
                                ONE_LAUNCH, THREE_TF32_TILES, TILES, WGMMA_BK, WGMMA_TILES,
                                MmaTile, Options, Tile, WgmmaTile, choose_ffma_tile,
                                choose_mma_tile, choose_tf32_tile, choose_tile,
                                choose_wgmma_tile, choose_wgmma_tma_tile)
from im2win.problem import DTYPES, Problem

KERNEL_DIR = pathlib.Path(__file__).resolve().parent
GEMM_FILES = ("im2win_conv", "im2win_ffma", "im2win_mma", "im2win_wgmma")
# The target each kernel file is compiled for beyond the device's own (wgmma needs sm_90a).
FILE_ARCH = {"im2win_wgmma": "sm_90a", "narrow_wgmma": "sm_90a", "rows_wgmma": "sm_90a"}
HOPPER_FILES = ("im2win_wgmma", "narrow_wgmma", "rows_wgmma")   # hopper.cuh's primitives first
CUDA_TYPES = {"float16": ("half_t", "float"), "bfloat16": ("bf16_t", "float"),
              "float32": ("float", "float"), "float64": ("double", "double")}
TENSOR_CORE_DTYPES = ("float16", "bfloat16")
HOPPER = 90             # compute capability of the wgmma kernel
TABLE_SLICE = 64        # the reduction table is padded to whole slices of this many entries
INT32_MAX = 2**31 - 1
MAX_GRID_YZ = 65535


class Geometry(NamedTuple):
    """The kernels' `struct Geometry` (gemm.cuh), field for field in its order: 64-bit fields
    first, then 32-bit ones (tests/test_plan.py checks the two against each other)."""

    npix: int    # N*P*Q pixels of one launch
    sn: int      # base(n, g, p, q) = n*sn + g*sg + p*sp + q*sq + base0
    sg: int
    sp: int
    sq: int
    base0: int
    sc: int      # off(t) = c*sc + r*sr + s*ss
    sr: int
    ss: int
    K: int
    Kg: int
    red: int     # (C/G)*R*S
    redp: int    # red padded to the Tensor-Core kernel's slice
    PQ: int
    Q: int
    sh: int
    sw: int
    pt: int
    pl: int
    H: int
    W: int
    Cg: int
    R: int
    S: int
    dh: int
    dw: int
    y_nchw: int = 0   # 1: the wgmma or ffma kernel writes y (n, k, p, q) from NHWC x (`around`)


GEOMETRY_64BIT = 9      # the first 9 fields are 64-bit (i64), the rest 32-bit (int)
# Its NumPy twin (64-bit fields first, no inner padding): a kernel argument's bytes.
GEOMETRY = np.dtype([(name, np.int64 if i < GEOMETRY_64BIT else np.int32)
                     for i, name in enumerate(Geometry._fields)], align=True)


@dataclasses.dataclass(frozen=True)
class Plan:
    """Everything a launch needs, decided once; immutable, and hashable as the key of what the
    launch layer builds from it on a device.

    Attributes:
        algorithm: "direct", "im2win" (materialised windows), "im2win_fused", "im2col_gemm",
            "depthwise" (depthwise.cu: groups = C, one input channel per filter), "narrow"
            (narrow.cu: NHWC stems of C <= 8 and groups of C/G = K/G in NARROW_GROUPS;
            narrow_ffma.cu: float32 stems of C <= 4 in either layout),
            "pointwise" (pointwise.cu: NHWC 1x1 layers of few filters), "gemm"
            (a 1x1 convolution as one cuBLAS GEMM on x and w in place, or at a stride on
            x's pixels it reads gathered first: GemmArgs.gather), "im2win_nhwc" (an
            NCHW problem run on its NHWC twin between layout copies, layout.cu) or
            "im2win_columns" (a stem run as an R x 1 problem over x's window columns).
        tile: the im2win kernels' tile (None for the others).
        options: the optimisation switches in force.
        file: the kernel's .cu file ("im2win_conv" on CUDA cores, "im2win_ffma" for
            float32 NHWC fused windows of C/G a multiple of 8 there, "im2win_mma" on Tensor
            Cores with mma.sync, "im2win_wgmma" on Hopper's), or None.
        kernel: the template instantiation to compile (CuPy name expression), or None.
        chunk: images per launch ("im2win": the window tensor is built for this many at once).
        geometry: the kernel's Geometry for one launch of `chunk` images; the depthwise
            kernels' DepthwiseArgs or DepthwiseTileArgs; the narrow kernels' and
            rows_wgmma.cu's NarrowArgs (`one_launch`); the
            pointwise kernel's PointwiseArgs; the GEMM's GemmArgs; None for the others.
        taps: the reduction table as bytes, int32 pairs (off(t), (r*dh) << 16 | s*dw) for
            every t, zeros past the reduction up to a multiple of TABLE_SLICE entries; empty
            when offsets are computed in the kernel.
        workspace_bytes: extra device memory the plan allocates (the window chunk and the
            filter in window order).
        tma: the wgmma kernel's TMA descriptors' arguments (TmaArgs) when it copies both
            operands by TMA (Options.tma), or rows_wgmma.cu's (the filter's alone), else None.
        inner: "im2win_nhwc": the plan of the problem's NHWC twin, which runs between the
            layout copies ("im2win_fused", or for NCHW groups of a few channels
            "depthwise"); "im2win_columns": the plan of its R x 1 problem (columns_stage);
            None for the others.
        splits: split-K: the reduction ranges per tile, each a work item writing FP32
            partial sums (workspace_bytes) that split_reduce adds into y (or, `fixup`, the
            tile's last block); 1: none.
        precision: float32 problems: "float32" (FP32 fused multiply-adds), "tf32" or
            "3xtf32" (Tensor Cores, the wgmma kernel); "float32" for the other dtypes too.
        resident: TMA plans with the filter tile kept in shared memory (resident_slices):
            its slices; 0: none.
        x_in_place: "im2win_nhwc": the inner plan reads the NCHW x itself (im2win_ffma.cu's
            strided form, its Geometry on x's own strides), so x is not copied channels-last.
        cluster: TMA plans whose filter slices are multicast (multicast_ctas): the CTAs of a
            cluster, each copying its share of every slice into all of them; 1: none.
    """

    algorithm: str
    tile: Tile | MmaTile | WgmmaTile | None
    options: Options
    file: str | None
    kernel: str | None
    chunk: int
    geometry: (Geometry | DepthwiseArgs | DepthwiseTileArgs | NarrowArgs | "PointwiseArgs" |
               GemmArgs | None)
    taps: bytes = dataclasses.field(repr=False)
    workspace_bytes: int
    tma: "TmaArgs | None" = None
    inner: "Plan | None" = None
    splits: int = 1
    precision: str = "float32"
    resident: int = 0
    x_in_place: bool = False
    cluster: int = 1

    @property
    def one_launch(self) -> bool:
        """Whether the plan is one launch of a kernel taking its four pointers, a few ints and
        x's strides (NarrowArgs and the like) on a grid of its own: ONE_LAUNCH's algorithms,
        and "im2win_fused" on rows_wgmma.cu."""
        return self.algorithm in ONE_LAUNCH or self.file == "rows_wgmma"

    @property
    def tables(self) -> bool:
        """Whether the kernel reads its reduction offsets from the table."""
        return bool(self.taps)

    @property
    def fixup(self) -> bool:
        """Whether split-K's ranges are summed by the kernel's last block of each tile
        (im2win_ffma_fixup: no second launch; workspace_bytes holds its counters too)."""
        return self.kernel is not None and self.kernel.startswith("im2win_ffma_fixup<")

    @property
    def block(self) -> int:
        return self.tile.threads if self.tile else 256

    def grid(self, images: int, G: int) -> tuple[int, int, int]:
        """Blocks for `images` images: (pixel tiles, filter tiles, groups); for the wgmma
        kernel (tiles, 1, 1), of which a persistent launch starts at most one per SM."""
        pixels = images * self.geometry.PQ
        if self.file == "im2win_wgmma":
            return (-(-pixels // self.tile.BM) * -(-self.geometry.Kg // self.tile.BN) * G *
                    self.splits, 1, 1)
        return (-(-pixels // self.tile.BN), -(-self.geometry.Kg // self.tile.BM), G * self.splits)

    @property
    def tensor_cores(self) -> bool:
        return self.file in ("im2win_mma", "im2win_wgmma")

    @property
    def persistent(self) -> bool:
        """Whether the launch has at most one block per SM (the kernel loops over tiles)."""
        return self.file == "im2win_wgmma" and self.options.persistent

    @property
    def smem(self) -> int:
        """Dynamic shared memory per block, bytes."""
        if self.one_launch:
            return self.geometry.smem
        if self.file != "im2win_wgmma":
            return 0
        return self.tile.smem_bytes(
            wgmma_stages(self.tile, self.options, self.precision, self.resident),
            three=self.precision == "3xtf32", resident=self.resident, table=self.tma is None)


def check_algorithm(algorithm) -> str:
    if not isinstance(algorithm, str):
        raise TypeError(f"algorithm must be a string, got {algorithm!r}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(map(repr, ALGORITHMS))}, got "
                         f"{algorithm!r}")
    return algorithm


PRECISIONS = ("float32", "tf32", "3xtf32")


def check_precision(precision, dtype) -> str:
    """The precision of a call: None is "float32"; anything else only for float32 inputs."""
    if precision is None:
        return "float32"
    if not isinstance(precision, str):
        raise TypeError(f"precision must be a string or None, got {precision!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(map(repr, PRECISIONS))}, got "
                         f"{precision!r}")
    if np.dtype(dtype) != np.float32 and precision != "float32":
        raise ValueError(f"precision={precision!r} applies to float32 inputs only, got "
                         f"{np.dtype(dtype).name}")
    return precision


def check_workspace_limit(limit) -> int | None:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)):
        raise TypeError(f"workspace_limit must be an int (bytes) or None, got {limit!r}")
    if limit < 0:
        raise ValueError(f"workspace_limit must be non-negative, got {limit}")
    return int(limit)


def check_options(options) -> Options:
    if options is None:
        return Options()
    if not isinstance(options, Options):
        raise TypeError(f"options must be an im2win.cuda.Options, got {type(options).__name__}")
    return options


def accumulator_bytes(prob: Problem) -> int:
    """Bytes of one accumulator element (what the shared-memory tiles hold)."""
    return 8 if prob.dtype == np.float64 else 4


def window_bytes(prob: Problem, images: int) -> int:
    """Bytes of the window tensor of `images` images: images*C*P*Wp*R elements."""
    return images * prob.C * prob.P * prob.Wp * prob.R * prob.dtype.itemsize


def geometry(prob: Problem, fused: bool, images: int, x_strides) -> Geometry:
    """The kernel's Geometry for one launch over `images` images.

    Args:
        fused: read x itself (through `x_strides`, elements, NCHW-lettered (n, c, h, w));
            otherwise the contiguous window tensor of `images` images.
    """
    geo = dict(npix=images * prob.P * prob.Q, K=prob.K, Kg=prob.Kg, red=prob.reduction,
               redp=prob.reduction,
               PQ=prob.P * prob.Q, Q=prob.Q, sh=prob.sh, sw=prob.sw, pt=prob.pt, pl=prob.pl,
               H=prob.H, W=prob.W, Cg=prob.Cg, R=prob.R, S=prob.S, dh=prob.dh, dw=prob.dw)
    if fused:
        xn, xc, xh, xw = x_strides
        geo.update(sn=xn, sc=xc, sp=prob.sh * xh, sq=prob.sw * xw, sr=prob.dh * xh,
                   ss=prob.dw * xw, base0=-(prob.pt * xh + prob.pl * xw))
    else:
        WpR = prob.Wp * prob.R
        if prob.layout == "NCHW":                                 # (N, C, P, Wp*R)
            geo.update(sn=prob.C * prob.P * WpR, sc=prob.P * WpR, sp=WpR, sq=prob.sw * prob.R,
                       sr=1, ss=prob.dw * prob.R, base0=0)
        else:                                                     # (N, P, Wp*R, C)
            geo.update(sn=prob.P * WpR * prob.C, sc=1, sp=WpR * prob.C,
                       sq=prob.sw * prob.R * prob.C, sr=prob.C, ss=prob.dw * prob.R * prob.C,
                       base0=0)
    geo["sg"] = prob.Cg * geo["sc"]
    return Geometry(**geo)


def reduction_taps(prob: Problem, window_order: bool) -> tuple[np.ndarray, ...]:
    """(c, r, s) of every reduction index t (see im2win_conv.cu), in window order
    (filter_to_window's; materialised windows) or in w's own order (fused)."""
    t, Cg, R, S = np.arange(prob.reduction), prob.Cg, prob.R, prob.S
    if prob.layout == "NCHW" and window_order:
        c, s, r = np.unravel_index(t, (Cg, S, R))
    elif prob.layout == "NCHW":
        c, r, s = np.unravel_index(t, (Cg, R, S))
    elif window_order:
        s, r, c = np.unravel_index(t, (S, R, Cg))
    else:
        r, s, c = np.unravel_index(t, (R, S, Cg))
    return c, r, s


def reduction_tables(prob: Problem, geo: Geometry, window_order: bool):
    """The tables (off(t), (r*dh) << 16 | s*dw), or None when they do not fit 32 bits."""
    c, r, s = reduction_taps(prob, window_order)
    off = c * geo.sc + r * geo.sr + s * geo.ss
    dr, ds = r * prob.dh, s * prob.dw
    if np.abs(off).max(initial=0) > INT32_MAX or dr.max(initial=0) > 32767 or \
            ds.max(initial=0) > 65535:
        return None
    return off.astype(np.int32), ((dr << 16) | ds).astype(np.int32)


def kernel_name(prob: Problem, fused: bool, tile: Tile, options: Options, tables: bool,
                vector_filter: bool) -> str:
    """The CuPy name expression of one im2win_conv instantiation. The kernel reads its two
    vector flags only where they apply (kVecA: float filters; kVecS: float accumulators), so
    elsewhere they are written false: one instantiation where two would compile the same
    code (CI compiles every name)."""
    T, Acc = CUDA_TYPES[prob.dtype.name]
    flags = [prob.layout == "NHWC", fused]
    switches = [options.smem, tables, options.double_buffer,
                options.vector_loads and vector_filter and T == "float",
                options.vector_loads and Acc == "float", options.conflict_free]
    text = ", ".join(str(f).lower() for f in flags + [tile.BM, tile.BN, tile.BK, tile.TM,
                                                      tile.TN] + switches)
    return f"im2win_conv<{T}, {Acc}, {text}>"


def mma_kernel_name(prob: Problem, fused: bool, tile: MmaTile, options: Options,
                    tables: bool, vector_a: bool, vector_b: bool) -> str:
    """The CuPy name expression of one im2win_mma instantiation."""
    flags = [prob.layout == "NHWC", fused, tile.BM, tile.BN, tile.WM, tile.WN,
             3 if options.double_buffer else 1, options.async_copy, vector_a, vector_b,
             options.ldmatrix, options.conflict_free, tables]
    T = CUDA_TYPES[prob.dtype.name][0]
    return f"im2win_mma<{T}, {', '.join(str(f).lower() for f in flags)}>"


def wgmma_kernel_name(prob: Problem, fused: bool, tile: WgmmaTile, options: Options,
                      tables: bool, vector_x: bool, vector_w: bool) -> str:
    """The CuPy name expression of one im2win_wgmma instantiation (vector_x: 16-byte copies
    of the window operand, vector_w: of the filter)."""
    flags = [prob.layout == "NHWC", fused, tile.BM, tile.BN,
             tile.STAGES if options.double_buffer else 1, vector_x, vector_w,
             options.conflict_free, tables, options.persistent]
    T = CUDA_TYPES[prob.dtype.name][0]
    return f"im2win_wgmma<{T}, {', '.join(str(f).lower() for f in flags)}>"


def contiguous_runs_of_8(prob: Problem, geo: Geometry) -> bool:
    """Whether every 8 consecutive reduction entries starting at a multiple of 8 are one
    contiguous run at an offset divisible by 8 (16-byte copies, given an aligned base)."""
    return prob.Cg % 8 == 0 and geo.sc == 1 and all(
        getattr(geo, k) % 8 == 0 for k in ("sn", "sg", "sp", "sq", "base0", "sr", "ss"))


def table_bytes(prob: Problem, geo: Geometry, window_order: bool, wanted: bool) -> bytes:
    """The plan's reduction table (`Plan.taps`): interleaved int32 pairs, zero-padded to whole
    slices of TABLE_SLICE entries (kernels read slices whole), or b"" when not wanted or the
    offsets do not fit."""
    tables = reduction_tables(prob, geo, window_order) if wanted and prob.reduction else None
    if tables is None:
        return b""
    taps = np.zeros((-(-prob.reduction // TABLE_SLICE) * TABLE_SLICE, 2), np.int32)
    taps[:prob.reduction] = np.stack(tables, axis=1)
    return taps.tobytes()


def algorithm_dtypes(algorithm: str) -> tuple[str, ...]:
    """The dtypes `algorithm` takes on the GPU (a forced one refuses the others with a
    TypeError): the Tensor-Core kernels' (narrow.cu, pointwise.cu; narrow_ffma.cu's float32
    stems), the NHWC twin's and the
    window columns' (no float64), im2col_gemm's (CuPy's matmul has no bfloat16); all four
    for the rest."""
    return {"narrow": NARROW_DTYPES + ("float32",), "pointwise": POINTWISE_DTYPES,
            "im2win_nhwc": TENSOR_CORE_DTYPES + ("float32",),
            "im2win_columns": TENSOR_CORE_DTYPES + ("float32",), "im2win_runs": ("float32",),
            "im2col_gemm": ("float16", "float32", "float64")}.get(
                algorithm, tuple(d.name for d in DTYPES))


def make_plan(prob: Problem, *, x_strides, w_aligned: bool, algorithm: str = "auto",
              options: Options | None = None, workspace_limit: int | None = None,
              tile: str | None = None, x_aligned: bool = True, arch: int | None = None,
              precision: str = "float32", sms: int | None = None) -> Plan:
    """Decide how to run `prob` on the GPU.

    Args:
        prob: the checked problem.
        x_strides: x's element strides, NCHW-lettered (n, c, h, w).
        w_aligned: whether the (contiguous) filter starts on a 16-byte boundary.
        algorithm: one of ALGORITHMS; "auto" lets the planner choose.
        options: optimisation switches (im2win kernels only).
        workspace_limit: bytes the materialised window may use; None for the whole batch.
        tile: force a tile by name (autotuning and tests); None lets the planner choose.
        x_aligned: whether x starts on a 16-byte boundary (float16 copies of 16 bytes).
        arch: the device's compute capability as major*10 + minor (90: the wgmma kernel is
            there for float16 and bfloat16); None: unknown, the mma.sync kernel.
        precision: "float32" (CUDA cores for float32), "tf32" or "3xtf32" (float32 on the
            wgmma kernel's Tensor Cores: tf32_plan).
        sms: the device's SM count (im2win_ffma.cu's split-K); None: PLAN_SMS.

    Raises:
        TypeError: a forced algorithm that does not take prob's dtype (algorithm_dtypes).
        ValueError: a forced choice that cannot run this problem (the message says why).
    """
    algorithm = check_algorithm(algorithm)
    options = check_options(options)
    precision = check_precision(precision, prob.dtype)
    workspace_limit = check_workspace_limit(workspace_limit)
    takes = algorithm_dtypes(algorithm)
    if prob.dtype.name not in takes:
        raise TypeError(f"algorithm={algorithm!r} takes {', '.join(takes)} on the GPU, not "
                        f"{prob.dtype.name}")
    if prob.P * prob.Q > INT32_MAX or prob.reduction > INT32_MAX:
        raise ValueError(f"P*Q = {prob.P * prob.Q} and (C/G)*R*S = {prob.reduction} must each "
                         f"stay below 2**31")

    per_image = window_bytes(prob, 1)
    if prob.reduction == 0:         # no products to round at any precision: y is the bias
        precision = "float32"
    if precision != "float32":
        if algorithm == "im2win_columns" or (algorithm == "auto" and
                                             tf32_columns(prob, options, workspace_limit)):
            return columns_plan(prob, options, workspace_limit, tile, arch, precision, sms)
        if prob.layout == "NCHW" and algorithm in ("auto", "im2win_nhwc"):
            refusal = nhwc_refusal(prob, x_strides, workspace_limit)
            if refusal:
                raise ValueError(f"precision={precision!r} cannot run this problem: NCHW runs "
                                 f"on its NHWC twin, and {refusal}")
            return nhwc_plan(prob, x_strides, options, workspace_limit, tile, arch, precision, sms)
        return tf32_plan(prob, algorithm, options, tile, x_strides, x_aligned, w_aligned, arch,
                         precision)
    if algorithm == "auto":
        channelwise = (is_depthwise(prob) and prob.G > 1) or (
            prob.Cg in DEPTHWISE_AUTO_GROUPS and
            small_groups(prob, depthwise_vector(prob, x_strides, x_aligned)))
        if channelwise or nchw_groups(prob, x_strides, workspace_limit):
            algorithm = "depthwise"
        elif (narrow_pays(prob, narrow_dense(prob, x_strides, x_aligned)) and
              narrow_refusal(prob, x_strides, x_aligned, arch) is None) or (
                tile is None and narrow_ffma_pays(prob) and
                narrow_ffma_refusal(prob, arch) is None):
            algorithm = "narrow"
        elif pointwise_pays(prob) and \
                pointwise_refusal(prob, x_strides, x_aligned, arch) is None:
            algorithm = "pointwise"
        elif gemm_pays(prob) and gemm_refusal(prob, x_strides) is None and (
                workspace_limit is None or gemm_gather_bytes(prob) <= workspace_limit):
            algorithm = "gemm"
        else:
            twin = None if tile is not None else (
                runs_auto_plan(prob, options, workspace_limit, x_strides) or
                columns_auto_plan(prob, options, workspace_limit, arch, sms) or
                nhwc_auto_plan(prob, x_strides, options, workspace_limit, arch, sms))
            if twin is not None:
                return twin
            algorithm = "im2win_fused"
    if algorithm == "depthwise":
        if prob.layout == "NCHW" and not is_depthwise(prob):
            return nchw_groups_plan(prob, x_strides, options, workspace_limit, arch)
        return depthwise_plan(prob, options, x_strides, x_aligned, arch)
    if algorithm == "narrow":
        return narrow_plan(prob, options, x_strides, x_aligned, arch)
    if algorithm == "pointwise":
        return pointwise_plan(prob, options, x_strides, x_aligned, arch)
    if algorithm == "im2win_nhwc":
        return nhwc_plan(prob, x_strides, options, workspace_limit, tile, arch, sms=sms)
    if algorithm == "im2win_columns":
        return columns_plan(prob, options, workspace_limit, tile, arch, sms=sms)
    if algorithm == "im2win_runs":
        return runs_plan(prob, options, workspace_limit, tile, x_strides)
    if algorithm == "gemm":
        return gemm_plan(prob, options, x_strides, workspace_limit)
    if algorithm in ("direct", "im2col_gemm"):
        return Plan(algorithm, None, options, None, None, max(prob.N, 1), None, b"", 0)

    fused = algorithm == "im2win_fused"
    chunk = max(prob.N, 1)
    filter_bytes = prob.K * prob.reduction * prob.dtype.itemsize
    if not fused and workspace_limit is not None and per_image > 0:
        chunk = min(chunk, (workspace_limit - filter_bytes) // per_image)
        if chunk <= 0:
            raise ValueError(f"workspace_limit={workspace_limit} bytes is smaller than one "
                             f"image's window tensor ({per_image} bytes) plus the filter in "
                             f"window order ({filter_bytes} bytes); raise it or use "
                             f"algorithm='im2win_fused'")
    # Materialised windows also hold the filter in window order (K*(C/G)*R*S elements).
    workspace = 0 if fused else window_bytes(prob, chunk) + prob.K * prob.reduction * \
        prob.dtype.itemsize
    if prob.dtype.name in TENSOR_CORE_DTYPES and (options.tensor_cores or
                                                  prob.dtype.name == "bfloat16"):
        geo = geometry(prob, fused, chunk, x_strides)
        src_aligned = x_aligned or not fused
        if fused and tile is None and rows_wgmma_pays(prob) and \
                rows_wgmma_fits(prob, options, arch, x_strides, x_aligned, w_aligned):
            form = rows_wgmma_form(prob, arch)      # None where its shared memory does not fit
            if form is not None:
                return rows_wgmma_plan(prob, options, x_strides, form)
        tma_tile, tma = None, None      # TMA takes the wgmma kernel with a tile of its own
        if options.hopper and arch == HOPPER and tile is None and fused:
            tma_tile = choose_wgmma_tma_tile(prob.Kg, prob.N * prob.P * prob.Q, prob.G)
            tma = tma_plan(prob, WGMMA_TILES[tma_tile], options, x_strides, src_aligned,
                           w_aligned)
        hopper = options.hopper and arch == HOPPER and (
            tile in WGMMA_TILES or tma is not None or
            (tile is None and wgmma_pays(prob, geo, src_aligned)))
        return tensor_core_plan(WGMMA if hopper else MMA, prob, algorithm, options,
                                tile or (tma_tile if tma else None), chunk, workspace, geo,
                                src_aligned, w_aligned or not fused, x_strides, workspace_limit,
                                tma)
    if tile in FFMA_TILES or (tile is None and fused):
        refusal = ffma_refusal(prob, options, x_strides, x_aligned, w_aligned, fused, tile)
        if refusal is None:
            return ffma_plan(prob, options, x_strides, tile, workspace_limit, sms)
        if tile is not None:
            raise ValueError(f"tile {tile} is im2win_ffma.cu's, which cannot run this problem: "
                             f"{refusal}")
    if not options.micro_kernel:
        tile = NO_MICRO_KERNEL
    if tile is not None and tile not in TILES:
        raise ValueError(f"tile must be one of {', '.join(TILES)} or {', '.join(FFMA_TILES)} "
                         f"on CUDA cores, got {tile!r}")
    chosen = TILES[tile or choose_tile(prob.Kg, prob.N * prob.P * prob.Q, prob.reduction,
                                       prob.layout, prob.dtype.name)]
    if not chosen.fits(accumulator_bytes(prob)):
        raise ValueError(f"tile {chosen.name} needs more than 48 KB of shared memory for "
                         f"{prob.dtype.name}")
    check_grid(prob, chosen)
    geo = geometry(prob, fused, chunk, x_strides)
    taps = table_bytes(prob, geo, not fused, options.index_tables)
    vector_filter = prob.reduction % 4 == 0 and w_aligned
    name = kernel_name(prob, fused, chosen, options, bool(taps), vector_filter)
    return Plan(algorithm, chosen, options, "im2win_conv", name, chunk, geo, taps, workspace)


def ffma_refusal(prob: Problem, options: Options, x_strides, x_aligned: bool, w_aligned: bool,
                 fused: bool, tile: str | None) -> str | None:
    """Why im2win_ffma.cu cannot run `prob` (None: it can): float32, NHWC, fused windows,
    C/G a multiple of 8 (of the tile's BK when one is forced), channels contiguous in x and
    its other element strides multiples of 4, x and w 16-byte aligned, tap offsets within 32
    bits; or x's channels apart and each row's pixels contiguous (an NCHW x read in place by
    the strided form, `ffma_strided`: no condition on x's alignment, double_buffer and
    conflict_free on); Options with ffma, smem, micro_kernel and vector_loads on."""
    xn, xc, xh, xw = x_strides
    slice_depth = FFMA_TILES[tile].BK if tile is not None else 8
    tap_reach = abs((prob.R - 1) * prob.dh * xh) + abs((prob.S - 1) * prob.dw * xw) + \
        prob.Cg * abs(xc)
    if not (options.ffma and options.smem and options.micro_kernel and options.vector_loads):
        return "Options switch off ffma, smem, micro_kernel or vector_loads"
    if prob.dtype.name != "float32" or prob.layout != "NHWC" or not fused:
        return "it takes float32 NHWC problems with fused windows only"
    if prob.Cg % slice_depth:
        return f"C/groups = {prob.Cg} is not a multiple of {slice_depth}"
    if not ffma_strided(x_strides) and (xc != 1 or xn % 4 or xh % 4 or xw % 4 or
                                        not x_aligned):
        return ("x needs contiguous channels, strides that are multiples of 4 elements and "
                "16-byte alignment, or its channels apart with each row's pixels contiguous")
    if ffma_strided(x_strides):
        if not (options.x_in_place and options.double_buffer and options.conflict_free):
            # (the ablation's variants of the kernel read x with contiguous channels only, so
            # `specializations` compiles the strided form fully on alone)
            return ("its form for x's channels apart runs with x_in_place, double_buffer and "
                    "conflict_free on")
        chosen = FFMA_TILES[tile or choose_ffma_tile(prob.Cg, prob.Kg)]
        if not strided_tile(chosen):
            return (f"its form for x's channels apart would store tile {chosen.name}'s x "
                    f"with bank conflicts")
    if not w_aligned:
        return "w needs 16-byte alignment"
    if tap_reach > INT32_MAX:
        return "a tap's offset in x does not fit 32 bits"
    return None


def ffma_strided(x_strides) -> bool:
    """Whether im2win_ffma.cu reads x by its strided form (kStridedX): channels apart, each
    row's pixels contiguous (an NCHW x, or a channels-last view of one)."""
    xn, xc, xh, xw = x_strides
    return xc != 1 and xw == 1


def strided_tile(tile: Tile) -> bool:
    """Whether the strided form's x stores are free of bank conflicts on `tile`: a warp's
    lanes take consecutive pixels of one quad only where the pixels a load pass covers (its
    threads over BK/4) are a multiple of 32; where a warp spans two quads (64 x 64: 16 pixels
    a pass; 96 x 128 x 16: 48) both halves write the same 16 banks."""
    return tile.BM * tile.BN // 64 // (tile.BK // 4) % 32 == 0


def ffma_kernel_name(tile: Tile, options: Options, splits: int = 1, nchw_y: int = 0,
                     strided: bool = False, tail: bool = False, exact: bool = False,
                     taps: bool = False, fixup: bool = False) -> str:
    """The CuPy name expression of one im2win_ffma instantiation (im2win_ffma_split with
    split-K's ranges, or with `fixup` im2win_ffma_fixup, whose last block of a tile writes y
    in any of the y forms). nchw_y: 0, an NHWC y (im2win_ffma); 1,
    im2win_ffma_to_nchw writing an NCHW y (Geometry.y_nchw) with float4 along the pixels; 2,
    its form through shared memory (kStaged). strided: x read by the strided form
    (ffma_strided). tail: kTail, a reduction not a multiple of the tile's BK (runs_plan;
    named only where true, so the other names are the kernels' as before). exact: kExact,
    every load inside x and w (ffma_exact), named likewise only where true. taps: kTaps, x
    read through the plan's table (runs_plan's fused form; one launch, no kTail), named
    likewise only where true."""
    flags = [tile.BM, tile.BN, tile.BK, options.double_buffer, options.conflict_free]
    fixup = splits > 1 and fixup
    if fixup:
        flags += [splits, nchw_y]
    elif splits > 1:
        flags.append(splits)
    elif nchw_y:
        flags.append(nchw_y == 2)
    last = [True] if tail else []
    if exact:                # kTail (which the split form has not) spelled out before kExact
        last = ([tail] if splits == 1 else []) + [True]
    if taps:                 # kTail and kExact spelled out before kTaps
        last = [tail, exact, True]
    text = ", ".join(str(f).lower() for f in flags + [strided] + last)
    kernel = "im2win_ffma_fixup" if fixup else "im2win_ffma_split" if splits > 1 else \
        "im2win_ffma_to_nchw" if nchw_y else "im2win_ffma"
    return f"{kernel}<{text}>"


def ffma_plan(prob: Problem, options: Options, x_strides, tile: str | None,
              workspace_limit: int | None = None, sms: int | None = None) -> Plan:
    """The plan of im2win_ffma.cu for a problem `ffma_refusal` accepts: one launch over the
    whole batch (grid z the groups, or split-K's ranges: ffma_split_count), no table, no
    workspace but split-K's partial sums."""
    chosen = FFMA_TILES[tile or choose_ffma_tile(prob.Cg, prob.Kg)]
    check_grid(prob, chosen)
    chunk = max(prob.N, 1)
    geo = geometry(prob, True, chunk, x_strides)
    splits = ffma_split_count(prob, chosen, options, workspace_limit, sms or PLAN_SMS)
    exact = ffma_exact(geo, chosen, options)
    fixup = splits > 1 and options.split_fixup and ffma_fixup_pays(splits, exact)
    name = ffma_kernel_name(chosen, options, splits, strided=ffma_strided(x_strides),
                            exact=exact, fixup=fixup)
    workspace = split_workspace(prob, splits) if splits > 1 else 0
    if fixup:
        workspace += fixup_counter_bytes(prob, chosen)
    return Plan("im2win_fused", chosen, options, "im2win_ffma", name, chunk, geo, b"", workspace,
                splits=splits)


def ffma_fixup_pays(splits: int, exact: bool) -> bool:
    """Whether split-K's ranges are summed by the tile's last block (im2win_ffma_fixup) rather
    than by split_reduce's second launch: where it measured faster, two ranges on the kExact
    loop. tools/fixup_dev.py (H100, float32, TFLOPS best of 2 rounds alternating, second
    launch -> fixup, outputs equal bit for bit; docs/hopper.md step 30): 2 ranges, kExact:
    cv6 NHWC 40.8 -> 41.3, NCHW 38.8 -> 39.8; cv11 42.3 -> 42.5, 39.6 -> 40.2 (batch 128);
    2 ranges, the checked loop: resnet50.16 (batch 32) 39.8 -> 38.9, 35.7 -> 34.8; 8 ranges:
    cv12 38.9 -> 33.8, 34.7 -> 31.0, resnet50.22 33.5 -> 26.9, 29.7 -> 23.9 (a tile's last
    block reads seven partial sums while the others' blocks have left)."""
    return splits == 2 and exact


def fixup_counter_bytes(prob: Problem, tile: Tile) -> int:
    """Bytes of im2win_ffma_fixup's counters after the partial sums: an int per tile (its
    grid's x by y, one group), zeroed before each launch, rounded up to 16."""
    tiles = -(-prob.N * prob.P * prob.Q // tile.BN) * -(-prob.Kg // tile.BM)
    return -(-4 * tiles // 16) * 16


# im2win_ffma.cu's kExact forms (docs/hopper.md, step 27): where no pixel's window reaches
# x's padding and the filters fill the tiles, every load is inside x and w, and the loop
# drops its bounds predicates and the zeros they select (sm_90 SASS, 64 x 128 x 16 slice:
# 1258 -> 1219 instructions; the NCHW twin's strided form 1275 -> 1241). On the planner's
# tiles (choose_ffma_tile), with the full kernel; Options.exact_loads switches it off.
FFMA_EXACT_TILES = ("f64x128", "f64x128k8", "f96x128", "f96x128k8")


def ffma_exact(geo: Geometry, tile: Tile, options: Options, whole: bool = True) -> bool:
    """Whether im2win_ffma.cu's kExact form runs the launch of Geometry geo on `tile`: no row
    or column of any pixel's window in the padding (pt = pl = 0 and the last pixel's window
    inside x), K/G a multiple of the tile's filters, the reduction whole slices (no kTail;
    `whole` false: kTaps, whose copies past the reduction stay checked),
    FFMA_EXACT_TILES, Options.exact_loads, double_buffer and conflict_free on."""
    P = geo.PQ // geo.Q
    return (tile.name in FFMA_EXACT_TILES and options.exact_loads and
            options.double_buffer and options.conflict_free and geo.pt == 0 and geo.pl == 0 and
            (P - 1) * geo.sh + (geo.R - 1) * geo.dh < geo.H and
            (geo.Q - 1) * geo.sw + (geo.S - 1) * geo.dw < geo.W and geo.Kg % tile.BM == 0 and
            (not whole or (geo.red % tile.BK == 0 and geo.redp == geo.red)))


# im2win_ffma.cu's split-K: the split count whose grid the model below finishes soonest, at
# least FFMA_SPLIT_MIN_SLICES slices a range. Read off tools/ffma_split_dev.py on the H200
# (float32 NHWC, GPU time replayed from CUDA graphs, 2026-12-04; us for 1 / 2 / 4 / 8 ranges):
# resnet50.16 (392 tiles of 64x64, 144 slices) 261 / 197 / 204 / 221; resnet50.22 (200, 288)
# 322 / 260 / 265 / 237; convnext_tiny.6 (300, 96) 176 / 134 / 119 / 131; resnet50.10 (784,
# 72) 192 / 210 / 224 / 253; cv10 (1352 of 64x128, 72) 687 / 726 / 742 / 843; cv12 (400, 288)
# 530 / 523 / 456 / 439. A grid's time is its waves (blocks / (SMs x blocks an SM)) times the
# slices a block runs, where a partial wave costs FFMA_SPLIT_TAIL of a full one plus its
# share of the rest (fitted to those 11 layers: it picks the fastest count on 9, on cv6 one 2%
# slower, on convnext_tiny.6 one 12% slower); of counts within FFMA_SPLIT_MARGIN of the least
# time, the fewest (each range adds partial sums to write and to add). Those times are of the
# loop before step 15 (docs/hopper.md); with its loop and the 64x128 tile everywhere (step 16)
# the same constants pick the fastest count on 7 of 9 layers, cv6 2% and convnext_tiny.6 12%
# off (us, NHWC, 1 / 2 / 4 / 8 ranges: cv6 772 / 751 / 736 / 778, convnext_tiny.6 157 / 119 /
# 106 / 117, resnet50.16 232 / 173 / 178 / 194, cv12 461 / 463 / 402 / 384).
FFMA_SPLIT_MIN_SLICES = 8
FFMA_SPLIT_MIN_FLOPS = 10**9     # not measured below 3.7 GFLOP (the smallest layer above): the
                                 # sum's launch and partial sums are a fixed cost a split must repay
FFMA_SPLIT_TAIL = 0.1
FFMA_SPLIT_MARGIN = 0.02
PLAN_SMS = 132                   # an H200's SMs: plans made without a device assume them


def ffma_blocks_per_sm(tile: Tile) -> int:
    """Blocks of `tile` an SM holds: im2win_ffma.cu's __launch_bounds__ minimum."""
    threads = tile.BM * tile.BN // 64
    return 2 if threads >= 256 else 65536 // threads // 168


def ffma_split_count(prob: Problem, tile: Tile, options: Options,
                     workspace_limit: int | None = None, sms: int = PLAN_SMS) -> int:
    """Split-K's ranges per tile of im2win_ffma.cu (1: none) on a device of `sms` SMs: for one
    group of FFMA_SPLIT_MIN_FLOPS or more, the fewest of 1 and SPLITS whose modelled time
    (above) is within FFMA_SPLIT_MARGIN of the least, each range keeping FFMA_SPLIT_MIN_SLICES
    slices and the partial sums within `workspace_limit`; only with the full kernel
    (Options.split_k, double_buffer and conflict_free on: the instantiated split forms)."""
    if not (options.split_k and options.double_buffer and options.conflict_free) or \
            prob.G != 1 or prob.flops < FFMA_SPLIT_MIN_FLOPS:
        return 1
    tiles = -(-prob.N * prob.P * prob.Q // tile.BN) * -(-prob.Kg // tile.BM)
    slices = prob.reduction // tile.BK
    slots = sms * ffma_blocks_per_sm(tile)

    def time(splits: int) -> float:
        waves = tiles * splits / slots
        part = waves - int(waves)
        tail = FFMA_SPLIT_TAIL + (1 - FFMA_SPLIT_TAIL) * part if part else 0.0
        return (int(waves) + tail) * -(-slices // splits)
    counts = [1] + [n for n in SPLITS if slices >= n * FFMA_SPLIT_MIN_SLICES and
                    (workspace_limit is None or split_workspace(prob, n) <= workspace_limit)]
    least = min(time(n) for n in counts)
    return min(n for n in counts if time(n) <= least * (1 + FFMA_SPLIT_MARGIN))


DEPTHWISE_VECTOR_BYTES = 16           # channels per thread in NHWC, as bytes
# The register windows (S, column stride) -> output columns per thread (QT), read off
# tools/depthwise_dev.py on the H200 (batch 32, network layers, 2026-12-01): against 4 columns,
# 2 made stride-2 layers up to 1.25x faster (mobilenet_v2.4 float16 NHWC 52 -> 42 us) and
# stride-1 3x3 layers up to 1.6x slower; 8 made 7x7 layers 1.16-1.2x faster (convnext_tiny.1
# float16 NHWC 100 -> 84 us, float32 NCHW 169 -> 146 us). 8-byte vectors lost on most layers.
# Measured forms: 3x3 stride 1 and 2, 5x5 stride 2, 7x7 stride 1; (5, 1) and (7, 2) (no such
# layer among those timed) follow their stride's rule untimed.
DEPTHWISE_WINDOWS = {(3, 1): 4, (3, 2): 2, (5, 1): 4, (5, 2): 2, (7, 1): 8, (7, 2): 2}
DEPTHWISE_QT = 4                      # columns per thread of the general form (S = 0)
DEPTHWISE_SMEM_LIMIT = 200 * 1024     # the block's filters in shared memory, at most
DEPTHWISE_WAVES = 8                   # blocks per SM depthwise_nhwc's grid is sized to


# depthwise_tile_nhwc (NHWC, K = C, 16-byte channel vectors, no dilation): the block's input
# window in shared memory. Its forms (R = S, sh = sw) -> output columns per thread (7x7: 4
# against 2 took convnext_tiny.5, 14x14, from 27.9 to 25.4 us but .3, 28x28, from 46.2 to 54.4,
# whose rows then fit the 48 KB three at a time).
DEPTHWISE_TILE_QT = {(3, 1): 4, (5, 1): 4, (7, 1): 2, (3, 2): 2, (5, 2): 2, (7, 2): 2}
# ... for output maps of at most this many pixels. tools/depthwise_dev.py (H200, float16 NHWC,
# batch 32, GPU us replayed from a CUDA graph; register windows -> tile, cuDNN): small maps
# gained, mobilenet_v2.12 (28x28, 3x3) 17.7 -> 16.2 (12.5), .21 (14x14) 19.7 -> 13.6 (10.4),
# .26 (7x7) 7.9 -> 6.7 (6.1), efficientnet_b0.18 (28x28, 5x5) 48.3 -> 34.4 (25.7), .32 (14x14)
# 44.1 -> 27.5 (19.9), .39 (7x7) 26.4 -> 18.4 (11.5), convnext_tiny.3 (28x28, 7x7, 2 columns a
# thread) 59.8 -> 47.9 (43.3); large maps lost, mobilenet_v2.1 (112x112) 30.6 -> 32.7, .4 (56x56
# out, stride 2) 40.1 -> 49.4, .7 (56x56) 39.0 -> 41.8, convnext_tiny.1 (56x56, 7x7) 81.8 ->
# 95.4. A second window buffer (the block's next image copied while one is computed, grids of
# 2 blocks per SM looping over the images) lost on most layers (convnext_tiny.5 28.4 -> 35.8,
# .3 47.9 -> 52.2, mobilenet_v2.12 16.2 -> 18.1) and gained on two (efficientnet_b0.32 27.5 ->
# 25.4, .18 34.4 -> 33.1), so a block computes one image; blocks of 128 threads lost on all.
# float32 NHWC (an earlier build of the same kernel) mostly gained too: efficientnet_b0.32
# 32.9 -> 26.5, .39 20.3 -> 14.5, mobilenet_v2.21 16.6 -> 15.0, but .15 57.3 -> 63.5.
DEPTHWISE_TILE_MAX_PIXELS = 28 * 28
DEPTHWISE_TILE_SMEM = 48 * 1024       # a block's shared memory, at most
DEPTHWISE_TILE_THREADS = 256          # a block's threads
DEPTHWISE_TILE_THREAD_BYTES = 8       # channels a thread computes, as bytes (16 or 8)
DEPTHWISE_TILE_ITEMS = 512            # (row, column group, channels) items a block aims at
# (8 bytes a thread and 512 items, against 16 and 256: efficientnet_b0.18 34.7 -> 30.1 us, .32
# 27.7 -> 23.7, .39 18.0 -> 15.8, mobilenet_v2.12 16.4 -> 15.1, .21 13.9 -> 13.1, over 12
# small-map layers 281 -> 266 us in all; 63 registers a thread for 5x5 instead of 124; slower
# on mobilenet_v2.9 19.7 -> 20.5 and .26 6.7 -> 7.0.)
DEPTHWISE_TILE_COLUMNS = 32           # output columns of a block's tile, at most
DEPTHWISE_TILE_VECTORS = (8, 16)      # channel vectors of a block: about the first, at most
                                      # the second where a small map leaves too few items


# depthwise_rows (K = C, no dilation; in NHWC aligned channel vectors): its forms (R = S, sh =
# sw) -> (output columns a thread QT, channels a thread TV in NHWC, at most a 16-byte vector;
# NCHW takes one).
# 7x7 is not among them: ConvNeXt's 7x7 layers ran slower on it than on the register and
# tile kernels (tools/depthwise_dev.py, H200, float16 NHWC, batch 32: convnext_tiny.1 96 us
# against 82, .3 63 against 46; its filter, 49 taps of TV channels, takes the registers).
DEPTHWISE_ROWS = {(3, 1): (4, 4), (3, 2): (2, 4), (5, 1): (4, 2), (5, 2): (2, 2)}
# It takes stride-2 layers and stride-1 layers of output maps at least this tall: in the same
# runs (GPU us replayed from CUDA graphs, float16 / float32 NHWC, the register or tile kernel
# -> rows) it gained on mobilenet_v2.7 (56x56) 39.0 -> 31.6 / 63.6 -> 41.4, .12 (28x28) 15.2
# -> 14.3 / 17.9 -> 16.2, .23 (stride 2 to 7x7) 11.8 -> 8.3 / 11.4 -> 8.6, efficientnet_b0.15
# (5x5, stride 2) 33.3 -> 34.2 / 69.2 -> 41.3, .36 17.4 -> 13.7 / 23.3 -> 13.3, .18 (5x5,
# 28x28) 30.0 -> 29.2 / 37.5 -> 34.1, and lost on stride-1 maps of 14x14 and 7x7 (.32, 5x5
# 14x14, 24.2 -> 25.3 at best; mobilenet_v2.21 13.1 -> 13.8, .26 7.0 -> 9.6); mobilenet_v2.4
# (stride 2 to 56x56) 40.0 -> 41.2 / 60.1 -> 57.4.
DEPTHWISE_ROWS_MIN_ROWS = 28
DEPTHWISE_ROWS_STRIP = None           # output rows a block's strip (None: depthwise_rows_strip)
DEPTHWISE_ROWS_THREADS = 256          # a block's threads, at most
# Input rows a thread copies ahead (cp.async into shared memory) in NHWC; 0: each row loaded
# where it is added. `tools/depthwise_dev.py --variants tile,rf1,rf2,rf3,rf2+rb2` on the H200
# (2026-12-05, batch 32, GPU us replayed from CUDA graphs, 0 -> 1 / 2 / 3 rows ahead, cuDNN),
# float16 NHWC: mobilenet_v2.1 28.8 -> 35.2 / 23.1 / 22.9 (22.1), .4 40.8 -> 56.8 / 33.5 /
# 35.3 (31.0), .7 31.3 -> 38.5 / 24.5 / 25.0 (29.6), .9 18.5 -> 17.4 / 14.3 / 13.6 (16.5),
# efficientnet_b0.15 34.1 -> 29.8 / 25.3 / 25.7 (24.2); float32 NHWC: mobilenet_v2.1 36.0 ->
# 43.8 / 32.4 / 34.3 (35.7), .4 57.6 -> 75.5 / 62.2 / 63.1 (47.5), .7 41.0 -> 50.6 / 39.7 /
# 39.9 (41.3), .9 25.6 -> 25.4 / 23.1 / 24.7 (20.2), efficientnet_b0.15 41.0 -> 37.3 / 31.4 /
# 31.3 (37.9), .18 33.7 -> 28.8 / 27.2 / 27.4 (45.1). Two rows ahead: the best or within 5%
# of it on all but float32 mobilenet_v2.4 (+8%).
DEPTHWISE_ROWS_PREFETCH = 2


# depthwise_mma_nhwc and depthwise_mma_small_nhwc (float16 and bfloat16 NHWC, K = C, stride 1,
# no dilation, aligned channel vectors, on Tensor Cores): their forms (R = S), those "auto"
# gives them, and the maps (at most DEPTHWISE_MMA_SMALL_ROWS output rows) that take the small
# kernel, in blocks of 2*DEPTHWISE_MMA_SMALL_CB sub-tiles of 8 x 8. tools/depthwise_dev.py
# (H200, float16 NHWC, batch 32, GPU us replayed from CUDA graphs; the CUDA-core kernels -> the
# Tensor-Core kernel "auto" gives, cuDNN; docs/data/logs/depthwise-mma-dev.log):
#   7x7: convnext_tiny.1 (56x56) 81.4 -> 41.9 (70.9), .3 (28x28) 46.3 -> 20.3 (43.2),
#        .5 (14x14) 26.6 -> 15.5 (23.4; 15.6 on depthwise_mma_nhwc), .7 (7x7) 25.1 -> 9.2 (17.8);
#   5x5: efficientnet_b0.18 (28x28) 29.1 -> 22.0 (26.1), .29 (14x14) 18.1 -> 16.7 (14.6),
#        .32 (14x14) 24.0 -> 22.0 (19.7), .39 (7x7) 15.7 -> 10.6 (11.1).
# CB: 2 was within 4% of the best of 1, 2 and 4 on each of those small maps (4 took
# convnext_tiny.5 to 14.9 but .7 to 11.7 and efficientnet_b0.32 to 25.3). 3x3 filters stay on
# CUDA cores: on 56x56 to 14x14 maps both kernels lost (mobilenet_v2.7 31.7 -> 43.4, .21 13.1 ->
# 14.7 and 15.8), on 7x7 maps they tied (efficientnet_b0.43 9.1 -> 8.7, mobilenet_v2.26 7.0 ->
# 7.8): too few products for the window's copy.
DEPTHWISE_MMA_FORMS = (3, 5, 7)
DEPTHWISE_MMA_FILTERS = (5, 7)
DEPTHWISE_MMA_TILE = (16, 16, 32)     # the kernel's channels, output rows and columns a block
DEPTHWISE_MMA_THREADS = 128           # (depthwise.cu's constants of those names)
DEPTHWISE_MMA_SKEW = 32
DEPTHWISE_MMA_SMALL_ROWS = 14
DEPTHWISE_MMA_SMALL_CB = 2
# depthwise_mma_nhwc's A loads: a filter row's five 8-column halves once each (two ldmatrix.x4
# and an x2, 1280 bytes of shared memory; blocks 1 and 3 on two m16n8k8 each) or, False, an
# ldmatrix.x4 per column block (2048 bytes; tools/depthwise_dev.py's "nohalves" knob).
# `--variants tile,nohalves` on the H200 (2026-12-05, float16 NHWC, batch 32, GPU us replayed
# from CUDA graphs, halves / x4s, cuDNN): convnext_tiny.1 36.7 / 41.5 (71.4), .3 18.0 / 20.1
# (43.3), efficientnet_b0.18 20.0 / 21.8 (25.8).
DEPTHWISE_MMA_HALVES = True


DEPTHWISE_GROUPS = (2, 4, 8)          # channels per group the kernel also takes (NHWC, K = C)
# ... and those "auto" gives it: resnext50_32x4d's 3x3 of 4 channels per group (float16 NHWC,
# batch 32, H200) took 71 us on it against 743 on the im2win kernel, but those of 8 took 169
# and 121 us against 108 and 87 (resnext50_32x4d.7 and .11): 8 stays reachable when forced.
DEPTHWISE_AUTO_GROUPS = (2, 4)


def is_depthwise(prob: Problem) -> bool:
    """groups = C: each filter reads one input channel (K = m*C, a channel multiplier m)."""
    return prob.G == prob.C and prob.Cg == 1


def square_depthwise(prob: Problem, vec: int) -> bool:
    """groups = C = K (one filter a channel), an R x R filter at equal strides, no dilation,
    and in NHWC x's channels in aligned 16-byte vectors (`vec`, depthwise_vector): the
    problems the tile, rows and Tensor-Core kernels take (each for its forms)."""
    return (is_depthwise(prob) and prob.K == prob.C and prob.R == prob.S and
            prob.sh == prob.sw and prob.dh == prob.dw == 1 and
            (prob.layout == "NCHW" or vec * prob.dtype.itemsize == 16))


def small_groups(prob: Problem, vec: int) -> bool:
    """Groups of CG = C/G = K/G channels, CG in DEPTHWISE_GROUPS, that lie within one
    thread's vector of `vec` channels (NHWC): depthwise.cu's grouped form."""
    return (prob.layout == "NHWC" and prob.G > 1 and prob.Cg == prob.Kg and
            prob.Cg in DEPTHWISE_GROUPS and vec % prob.Cg == 0)


def depthwise_vector(prob: Problem, x_strides, x_aligned: bool) -> int:
    """Channels per thread in depthwise_nhwc: DEPTHWISE_VECTOR_BYTES where m = 1 and x's
    channels are contiguous with every other stride and the start aligned to whole vectors
    (x_aligned: to 16 bytes), else 1."""
    vec = max(1, DEPTHWISE_VECTOR_BYTES // prob.dtype.itemsize)
    xn, xc, xh, xw = x_strides
    ok = (prob.layout == "NHWC" and prob.K == prob.C and prob.C % vec == 0 and xc == 1 and
          x_aligned and all(stride % vec == 0 for stride in (xn, xh, xw)))
    return vec if ok else 1


def depthwise_window(prob: Problem) -> tuple[int, int, int]:
    """(S, column stride, columns per thread): S and the stride compiled into the kernel for
    its register window where DEPTHWISE_WINDOWS has them (column dilation 1), else (0, 0, QT):
    the general form, which reads each tap where it is used."""
    key = (prob.S, prob.sw)
    if key in DEPTHWISE_WINDOWS and prob.dw == 1:
        return prob.S, prob.sw, DEPTHWISE_WINDOWS[key]
    return 0, 0, DEPTHWISE_QT


def depthwise_kernel_name(dtype: str, layout: str, vec: int,
                          window: tuple[int, int, int], group: int = 1) -> str:
    T, Acc = CUDA_TYPES[dtype]
    S, sw, qt = window
    if layout == "NHWC":
        return f"depthwise_nhwc<{T}, {Acc}, {vec}, {group}, {qt}, {S}, {sw}>"
    return f"depthwise_nchw<{T}, {Acc}, {qt}, {S}, {sw}>"


def even(work: int, at_most: int) -> int:
    """How many blocks share `work` units evenly, at most `at_most` (at least 1)."""
    work = max(work, 1)
    return -(-work // -(-work // max(1, min(work, at_most))))


class DepthwiseArgs(NamedTuple):
    """What a depthwise.cu launch reads besides its four pointers and the grid: the problem's
    extents (N, C, H, W, K, m, R, S, P, Q, sh, sw, dh, dw, pt, pl), x's element strides (N, C,
    H, W), the block, its shared memory (NHWC: the filters of its `channels` channels), and
    the output columns each thread computes."""

    ints: tuple[int, ...]
    x_strides: tuple[int, int, int, int]
    block: tuple[int, int, int]
    smem: int
    channels: int
    columns: int

    y_nchw = 0        # (not a field) y is written in x's layout, as Geometry.y_nchw = 0 says

    def grid(self, prob: Problem, sms: int) -> tuple[int, int, int]:
        """The grid for about DEPTHWISE_WAVES blocks per SM of the device's `sms` (the
        kernels loop over the rest): NCHW (item blocks of an image, images, 1); NHWC (channel
        tiles, item blocks of an image, images)."""
        blocks_wanted = DEPTHWISE_WAVES * sms
        column_groups = -(-prob.Q // self.columns)
        if prob.layout == "NCHW":
            blocks = even(-(-prob.K * prob.P * column_groups // self.block[0]), blocks_wanted)
            return blocks, even(prob.N, min(-(-blocks_wanted // blocks), MAX_GRID_YZ)), 1
        tiles, rows = -(-prob.K // self.channels), self.block[1]
        item_blocks = even(-(-prob.P * column_groups // rows), MAX_GRID_YZ)
        images = even(prob.N, min(-(-blocks_wanted // (tiles * item_blocks)), MAX_GRID_YZ))
        return tiles, item_blocks, images


class DepthwiseTile(NamedTuple):
    """depthwise_tile_nhwc's block tile: PT output rows x QB columns x CV channel vectors,
    QT columns per thread."""

    PT: int
    QB: int
    CV: int
    QT: int

    def smem(self, prob: Problem, vec: int) -> int:
        """Bytes: the filters (R*S rows of CV*vec + 8 elements) and the input window
        ((PT-1)*sh + R rows by (QB-1)*sw + S columns of CV 16-byte vectors)."""
        rows, cols = (self.PT - 1) * prob.sh + prob.R, (self.QB - 1) * prob.sw + prob.S
        return (prob.R * prob.S * (self.CV * vec + 8) * prob.dtype.itemsize +
                rows * cols * self.CV * 16)


def depthwise_tile(prob: Problem, vec: int) -> DepthwiseTile | None:
    """The block tile of depthwise_tile_nhwc for `prob` (None where the form is not compiled,
    the output map is larger than DEPTHWISE_TILE_MAX_PIXELS or no tile fits
    DEPTHWISE_TILE_SMEM): as many columns as Q has up to
    DEPTHWISE_TILE_COLUMNS; channel vectors split evenly into tiles of about
    DEPTHWISE_TILE_VECTORS[0] (more, up to the second, where the whole map leaves fewer than
    DEPTHWISE_TILE_ITEMS items); then the fewest rows that make DEPTHWISE_TILE_ITEMS items
    (more blocks, each with its halo), fewer where shared memory asks."""
    qt = DEPTHWISE_TILE_QT.get((prob.S, prob.sw))
    if (qt is None or prob.P * prob.Q > DEPTHWISE_TILE_MAX_PIXELS or prob.layout != "NHWC" or
            not square_depthwise(prob, vec)):
        return None
    QB = min(-(-prob.Q // qt) * qt, DEPTHWISE_TILE_COLUMNS // qt * qt)
    groups, vectors = QB // qt, prob.C // vec
    split = 16 // DEPTHWISE_TILE_THREAD_BYTES               # a vector's items
    most, cap = DEPTHWISE_TILE_VECTORS
    tiles = -(-vectors // most)
    if groups * prob.P * most * split < DEPTHWISE_TILE_ITEMS:   # a small map: wider tiles
        tiles = -(-vectors // cap)
    CV = -(-vectors // tiles)
    PT = min(prob.P, -(-DEPTHWISE_TILE_ITEMS // (groups * CV * split)))
    while PT > 1 and DepthwiseTile(PT, QB, CV, qt).smem(prob, vec) > DEPTHWISE_TILE_SMEM:
        PT -= 1
    tile = DepthwiseTile(PT, QB, CV, qt)
    return tile if tile.smem(prob, vec) <= DEPTHWISE_TILE_SMEM else None


class DepthwiseTileArgs(NamedTuple):
    """What a depthwise_tile_nhwc, depthwise_rows, depthwise_rows_vec, depthwise_mma_nhwc or
    depthwise_mma_small_nhwc launch reads besides its four pointers and the grid: its ints (N,
    C, H, W, P, Q, pt, pl, then tile: PT, QB, CV, column tiles; rows and rows_vec: PS; mma:
    column tiles; mma_small: row and column tiles of 8), x's element strides (N, C, H, W), the
    block (rows: NHWC channel threads by column groups, NCHW column groups by channels;
    rows_vec: a warp's 32 lanes by warps), its shared memory
    and the tiles (channel tiles, then row x column tiles or row strips; mma_small: blocks of
    sub-tiles, at most MAX_GRID_YZ, the kernel looping past them)."""

    ints: tuple[int, ...]
    x_strides: tuple[int, int, int, int]
    block: tuple[int, int, int]
    smem: int
    tiles: tuple[int, int]

    per_image: bool = True
    y_nchw = 0        # (not a field) y is written in x's layout, as Geometry.y_nchw = 0 says

    def grid(self, prob: Problem, sms: int) -> tuple[int, int, int]:
        """(channel tiles, row x column tiles or strips, images): a block per tile of an
        image (the kernels loop past 65535 images); without per_image (depthwise_mma_small_nhwc,
        whose tiles hold several images' sub-tiles) one z."""
        return (*self.tiles, max(1, min(prob.N, MAX_GRID_YZ)) if self.per_image else 1)


def depthwise_tile_kernel_name(T: str, Acc: str, S: int, sw: int, qt: int,
                               thread_bytes: int) -> str:
    return f"depthwise_tile_nhwc<{T}, {Acc}, {S}, {S}, {sw}, {sw}, {qt}, {thread_bytes}>"


def depthwise_tile_plan(prob: Problem, options: Options, tile: DepthwiseTile, vec: int,
                        x_strides) -> Plan:
    T, Acc = CUDA_TYPES[prob.dtype.name]
    name = depthwise_tile_kernel_name(T, Acc, prob.S, prob.sw, tile.QT,
                                      DEPTHWISE_TILE_THREAD_BYTES)
    col_tiles = -(-prob.Q // tile.QB)
    tiles = (-(-prob.C // (tile.CV * vec)), -(-prob.P // tile.PT) * col_tiles)
    if tiles[1] > MAX_GRID_YZ:
        raise ValueError(f"algorithm='depthwise' tiles P x Q = {prob.P} x {prob.Q} into more "
                         f"than {MAX_GRID_YZ} blocks")
    args = DepthwiseTileArgs((prob.N, prob.C, prob.H, prob.W, prob.P, prob.Q, prob.pt, prob.pl,
                              tile.PT, tile.QB, tile.CV, col_tiles), tuple(x_strides),
                             (DEPTHWISE_TILE_THREADS, 1, 1), tile.smem(prob, vec), tiles)
    return Plan("depthwise", None, options, "depthwise", name, max(prob.N, 1), args, b"", 0)


def depthwise_mma(prob: Problem, options: Options, vec: int) -> str | None:
    """Which Tensor-Core depthwise kernel takes `prob` (DEPTHWISE_MMA_FILTERS): "small"
    (depthwise_mma_small_nhwc, maps of at most DEPTHWISE_MMA_SMALL_ROWS rows) or "tile"
    (depthwise_mma_nhwc); None where neither does."""
    if not (options.tensor_cores and prob.dtype.name in TENSOR_CORE_DTYPES and
            prob.layout == "NHWC" and square_depthwise(prob, vec) and prob.sh == 1 and
            prob.R in DEPTHWISE_MMA_FILTERS and prob.R in DEPTHWISE_MMA_FORMS):
        return None
    return "small" if prob.P <= DEPTHWISE_MMA_SMALL_ROWS else "tile"


def depthwise_mma_kernel_name(T: str, R: int) -> str:
    return f"depthwise_mma_nhwc<{T}, {R}, {str(DEPTHWISE_MMA_HALVES).lower()}>"


def depthwise_mma_small_kernel_name(T: str, R: int, CB: int) -> str:
    return f"depthwise_mma_small_nhwc<{T}, {R}, {CB}>"


def depthwise_mma_small_plan(prob: Problem, options: Options, x_strides) -> Plan:
    """A block per 16 channels x 2*CB sub-tiles of 8 x 8 outputs (sub-tiles of every image in
    turn); its shared memory: each sub-tile's window, 8 + R - 1 rows of 16 elements, as one
    plane a channel (the second 8 channels' DEPTHWISE_MMA_SKEW elements on), the filters."""
    channels = DEPTHWISE_MMA_TILE[0]
    tiles_p, tiles_q = -(-prob.P // 8), -(-prob.Q // 8)
    subs = prob.N * tiles_p * tiles_q
    channel_tiles = -(-prob.C // channels)
    cb = DEPTHWISE_MMA_SMALL_CB
    window = channels * 2 * cb * (8 + prob.R - 1) * 16 + DEPTHWISE_MMA_SKEW
    smem = (window + channels * prob.R * prob.S) * 2
    blocks = max(1, min(-(-subs // (2 * cb)), MAX_GRID_YZ))       # the kernel loops past them
    args = DepthwiseTileArgs((prob.N, prob.C, prob.H, prob.W, prob.P, prob.Q, prob.pt, prob.pl,
                              tiles_p, tiles_q), tuple(x_strides), (DEPTHWISE_MMA_THREADS, 1, 1),
                             smem, (channel_tiles, blocks), per_image=False)
    name = depthwise_mma_small_kernel_name(CUDA_TYPES[prob.dtype.name][0], prob.R, cb)
    return Plan("depthwise", None, options, "depthwise", name, max(prob.N, 1), args, b"", 0)


def depthwise_mma_plan(prob: Problem, options: Options, x_strides) -> Plan:
    """A block per tile of 16 channels x 16 output rows x 32 columns of an image; its shared
    memory: the input window as one plane a channel (rows of 32 + 8 elements; the second 8
    channels' planes DEPTHWISE_MMA_SKEW elements on; the output tile is written over them),
    the filters."""
    channels, rows, cols = DEPTHWISE_MMA_TILE
    col_tiles = -(-prob.Q // cols)
    tiles = (-(-prob.C // channels), -(-prob.P // rows) * col_tiles)
    if tiles[1] > MAX_GRID_YZ:
        raise ValueError(f"algorithm='depthwise' tiles P x Q = {prob.P} x {prob.Q} into more "
                         f"than {MAX_GRID_YZ} blocks")
    window = channels * (rows + prob.R - 1) * (cols + 8) + DEPTHWISE_MMA_SKEW
    smem = (window + channels * prob.R * prob.S) * 2
    args = DepthwiseTileArgs((prob.N, prob.C, prob.H, prob.W, prob.P, prob.Q, prob.pt, prob.pl,
                              col_tiles), tuple(x_strides), (DEPTHWISE_MMA_THREADS, 1, 1),
                             smem, tiles)
    name = depthwise_mma_kernel_name(CUDA_TYPES[prob.dtype.name][0], prob.R)
    return Plan("depthwise", None, options, "depthwise", name, max(prob.N, 1), args, b"", 0)


def depthwise_rows(prob: Problem, vec: int) -> tuple[int, int, int] | None:
    """depthwise_rows's (QT, TV, PS) for `prob` (DEPTHWISE_ROWS, depthwise_rows_strip), or
    None where the form is not compiled, the problem is not one it takes (in NHWC: x's
    channels not in aligned 16-byte vectors), or it is a stride-1 layer of fewer than
    DEPTHWISE_ROWS_MIN_ROWS output rows."""
    form = DEPTHWISE_ROWS.get((prob.S, prob.sw))
    if (form is None or not square_depthwise(prob, vec) or
            (prob.sh == 1 and prob.P < DEPTHWISE_ROWS_MIN_ROWS)):
        return None
    qt, tv = form
    return (qt, min(tv, vec) if prob.layout == "NHWC" else 1,
            DEPTHWISE_ROWS_STRIP or depthwise_rows_strip(prob))


def depthwise_rows_strip(prob: Problem) -> int:
    """Output rows a block of depthwise_rows walks: a longer strip reads fewer halo rows
    ((R-1)*sh a strip), a shorter one makes more blocks. Read off tools/depthwise_dev.py
    (strips of 2, 4, 8 and 16 on the 3x3 and 5x5 layers of mobilenet_v2 and efficientnet_b0,
    H200, batch 32; the fastest in both dtypes where they agree). NCHW, whose block walks a
    tile of channels of all columns: 16 rows at stride 1 and 8 at stride 2 (float32:
    mobilenet_v2.12 16 rows 23.2 us, 8 30.5; .23, stride 2 to 7x7, 8 rows 13.6, 2 15.1)."""
    if prob.layout == "NCHW":
        return 16 if prob.sh == 1 else 8
    if prob.sh == 1:
        return 16 if prob.P >= 56 or prob.R >= 5 else 8       # mobilenet_v2.7 and .12
    if prob.R >= 5:
        return 4 if prob.P <= 14 else 16                       # efficientnet_b0.36 and .15
    return 2 if prob.P <= 7 else 4 if prob.P <= 14 else 8      # mobilenet_v2.23, .14, .9


def depthwise_rows_kernel_name(T: str, Acc: str, tv: int, S: int, sw: int, qt: int,
                               nchw: bool, prefetch: int = 0) -> str:
    return (f"depthwise_rows<{T}, {Acc}, {tv}, {S}, {S}, {sw}, {sw}, {qt}, "
            f"{str(nchw).lower()}{f', {prefetch}' if prefetch else ''}>")


def depthwise_rows_prefetch(prob: Problem, tv: int, rows: int | None = None) -> int:
    """Rows depthwise_rows copies ahead for `prob` (`rows`, else DEPTHWISE_ROWS_PREFETCH): NHWC
    only, whose vectors of tv channels are 4, 8 or 16 bytes."""
    rows = DEPTHWISE_ROWS_PREFETCH if rows is None else rows
    return rows if prob.layout == "NHWC" and tv * prob.dtype.itemsize in (4, 8, 16) else 0


# depthwise_rows_vec (NCHW: depthwise_rows on vectors of a row's columns, the halo by warp
# shuffles): whether "auto" and "depthwise" take it where it has a form (False: never,
# depthwise_dev's "novec" knob), the rows each thread loads ahead into registers, a block's
# warps at most, and the stride-1 maps it takes (output rows at least). `tools/depthwise_dev.py
# --configs float32:NCHW,float16:NCHW` on the H200 (2026-12-05, batch 32, GPU us replayed from
# CUDA graphs; the kernel before -> this one, cuDNN; docs/data/logs/depthwise-rows-vec-dev2.log):
#   float32: mobilenet_v2.1 47.8 -> 36.2 (126.1), .4 76.8 -> 61.1 (103.1), .7 54.5 -> 42.5
#   (139.1), efficientnet_b0.15 49.9 -> 33.3 (68.0), .18 46.7 -> 30.0 (99.9); float16:
#   mobilenet_v2.1 44.6 -> 27.9 (35.0), .4 64.1 -> 37.0 (101.4), .7 52.1 -> 30.4 (47.1),
#   efficientnet_b0.15 47.9 -> 23.9 (67.5);
#   14x14 maps, on the register windows before: float32 mobilenet_v2.21 24.8 -> 14.6 (35.1),
#   efficientnet_b0.29 36.0 -> 20.8 (51.7), .32 51.7 -> 23.9 (70.8); float16 .21 25.9 -> 15.0
#   (16.1), .29 37.5 -> 19.6 (33.9), .32 53.4 -> 23.2 (39.7).
# A row ahead against two (in the same run, blocks of 8 warps): float32 mobilenet_v2.1 36.3 /
# 43.5, .4 67.6 / 71.8, float16 .4 37.8 / 44.2, .9 15.8 / 21.5 (four, the run before: 49.4 and
# 48.2 on float32 .1 and float16 .4). Blocks of 4 warps against 8: float32 mobilenet_v2.4 61.1
# / 67.6, .9 26.5 / 29.8, .21 14.6 / 18.3, float16 .7 30.4 / 32.0, efficientnet_b0.15 23.9 /
# 25.4; one layer 3.9% slower (float16 efficientnet_b0.25, 13.4 / 12.9), the rest within 2%.
# Stride-1 maps of any size: also the 7x7 maps where a vector fits (float32 3x3 on vectors of
# one column): mobilenet_v2.26 12.1 -> 10.0, efficientnet_b0.43 13.5 -> 11.3 against the
# register windows (the suite's back-to-back times of those calls: 17.8 -> 21.7 and 23.2 ->
# 13.5).
DEPTHWISE_ROWS_VEC = True
DEPTHWISE_ROWS_VEC_FORMS = ((3, 1), (3, 2), (5, 1), (5, 2), (7, 1))    # (S = R, stride)
DEPTHWISE_ROWS_VEC_BYTES = (16, 8, 4)       # a vector's bytes, the first W allows
# The window's columns from the vectors of up to DEPTHWISE_ROWS_VEC_HALO lanes a side: 3 takes
# 7x7 on vectors of 2 and 1 columns (convnext_tiny.5 and .7 in float32: 14x14 and 7x7 maps;
# .5 in float16 and bfloat16) and 5x5 on vectors of 1 (efficientnet_b0.39 in float32), 1
# only the next lane's (depthwise_dev's "vhN"; float64 keeps one lane and no 7x7, untimed:
# depthwise_rows_vec_form). `tools/depthwise_dev.py --variants tile,no7+vh1,vv8` (batch 32,
# GPU us replayed from CUDA graphs, on an H100: the H200 was not lent; no7+vh1 is the choice
# before, the register windows), this form against it (cuDNN): float32 NCHW convnext_tiny.1
# 61.8 / 142.7 (316.6), .3 35.9 / 72.6 (166.1), .5 22.8 / 40.5 (84.4), .7 17.8 / 20.4
# (45.9), efficientnet_b0.39 14.8 / 23.5 (31.9); float16 NCHW .1 50.0 / 120.0 (338.3), .3
# 34.9 / 71.3, .5 22.5 / 41.2, .7 and efficientnet_b0.39 the same (20.2, 24.4-24.6);
# bfloat16 alike (.1 54.2 / 121.9). 16-byte vectors for the 16-bit types ("vv8") lost on .1
# (58.7 in float16).
DEPTHWISE_ROWS_VEC_HALO = 3
DEPTHWISE_ROWS_VEC_AHEAD = 1
DEPTHWISE_ROWS_VEC_WARPS = 4
DEPTHWISE_ROWS_VEC_MIN_ROWS = 0


def depthwise_rows_vector(prob: Problem, x_strides, x_aligned: bool) -> int:
    """Columns V of a vector of depthwise_rows_vec for an NCHW problem of one filter a channel
    in one of its forms (DEPTHWISE_ROWS_VEC_FORMS; stride-1 maps of at least
    DEPTHWISE_ROWS_VEC_MIN_ROWS output rows), V of the first of DEPTHWISE_ROWS_VEC_BYTES that
    fits, or 0 where it does not take it: x's rows contiguous, its start (x_aligned) and
    strides whole vectors, W a multiple of V, the left padding (S-1)/2, V a multiple of the
    stride and the window's halo within DEPTHWISE_ROWS_VEC_HALO lanes a side
    (`depthwise_rows_vec_form`), and a row's lanes (at least W/V and Q/(V/sw)) within a
    warp."""
    if not (DEPTHWISE_ROWS_VEC and prob.layout == "NCHW" and x_aligned and x_strides[3] == 1 and
            (prob.S, prob.sw) in DEPTHWISE_ROWS_VEC_FORMS and square_depthwise(prob, 1) and
            prob.pl == (prob.S - 1) // 2 and
            (prob.sh > 1 or prob.P >= DEPTHWISE_ROWS_VEC_MIN_ROWS)):
        return 0
    for size in DEPTHWISE_ROWS_VEC_BYTES:
        V = size // prob.dtype.itemsize
        if (depthwise_rows_vec_form(prob.S, prob.sw, V, prob.dtype.itemsize) and
                prob.W % V == 0 and all(t % V == 0 for t in x_strides[:3]) and
                depthwise_rows_vec_lanes(prob, V) <= 32):
            return V
    return 0


def depthwise_rows_vec_lanes(prob: Problem, V: int) -> int:
    """Lanes of a row in depthwise_rows_vec (its NV): one a vector of x's row and one a
    V // sw output columns, whichever needs more."""
    return max(-(-prob.W // V), -(-prob.Q // (V // prob.sw)))


def depthwise_rows_vec_form(S: int, sw: int, V: int, itemsize: int) -> bool:
    """Whether depthwise_rows_vec has a form for S x S filters at stride sw on vectors of V
    columns of `itemsize`-byte elements: V a multiple of sw, and a window's (S-1)/2 columns
    on the left and those past the vector on the right within the vectors of
    DEPTHWISE_ROWS_VEC_HALO lanes a side. float64 keeps one lane a side and no 7x7 until
    those are timed (its 7x7 takes 192 registers a thread on vectors of 2 columns; on 1,
    nvcc leaves the walk over a period's 7 rows rolled, the accumulators in local memory)."""
    if V < 1 or V % sw or (itemsize == 8 and S == 7):
        return False
    halo = (1 if itemsize == 8 else DEPTHWISE_ROWS_VEC_HALO) * V
    left = (S - 1) // 2
    right = (V // sw - 1) * sw + S - left - V
    return left <= halo and 0 <= right <= halo


def depthwise_rows_vec_kernel_name(T: str, Acc: str, V: int, S: int, sw: int, ahead: int) -> str:
    return f"depthwise_rows_vec<{T}, {Acc}, {V}, {S}, {S}, {sw}, {sw}, {ahead}>"


def depthwise_rows_vec_plan(prob: Problem, options: Options, V: int, x_strides) -> Plan:
    """A block of warps per strip (depthwise_rows_strip) and tile of channels: each warp the
    rows of 32 // NV channels side by side, NV lanes a row (depthwise.cu)."""
    T, Acc = CUDA_TYPES[prob.dtype.name]
    rows = 32 // depthwise_rows_vec_lanes(prob, V)          # channels a warp
    warps = min(DEPTHWISE_ROWS_VEC_WARPS, 8, -(-prob.C // rows))   # __launch_bounds__(256)
    ps = DEPTHWISE_ROWS_STRIP or depthwise_rows_strip(prob)
    strips = -(-prob.P // ps)
    if strips > MAX_GRID_YZ:
        raise ValueError(f"algorithm='depthwise' splits P = {prob.P} into more than "
                         f"{MAX_GRID_YZ} strips")
    args = DepthwiseTileArgs((prob.N, prob.C, prob.H, prob.W, prob.P, prob.Q, prob.pt, prob.pl,
                              ps), tuple(x_strides), (32, warps, 1), 0,
                             (-(-prob.C // (warps * rows)), strips))
    name = depthwise_rows_vec_kernel_name(T, Acc, V, prob.S, prob.sw, DEPTHWISE_ROWS_VEC_AHEAD)
    return Plan("depthwise", None, options, "depthwise", name, max(prob.N, 1), args, b"", 0)


def depthwise_rows_plan(prob: Problem, options: Options, form: tuple[int, int, int],
                        x_strides) -> Plan:
    """A block per strip of PS output rows and tile of channels. NHWC: the column groups down
    (all of a row where DEPTHWISE_ROWS_THREADS allow, else evenly split passes), the channel
    threads across (the image's split evenly into tiles that fill the rest of the block).
    NCHW: the column groups across (up to a warp's 32, evenly split passes), the channels
    down, split the same way."""
    qt, tv, ps = form
    T, Acc = CUDA_TYPES[prob.dtype.name]
    lanes, groups = prob.C // tv, -(-prob.Q // qt)    # channel threads, column groups
    nchw = prob.layout == "NCHW"
    columns = min(groups, 32 if nchw else DEPTHWISE_ROWS_THREADS // min(lanes, 16))
    columns = -(-groups // -(-groups // columns))           # even passes over the groups
    channel_tiles = -(-lanes // (DEPTHWISE_ROWS_THREADS // columns))
    channels = -(-lanes // channel_tiles)                   # channel threads a block
    strips = -(-prob.P // ps)
    if strips > MAX_GRID_YZ:
        raise ValueError(f"algorithm='depthwise' splits P = {prob.P} into more than "
                         f"{MAX_GRID_YZ} strips")
    acc_bytes = 8 if Acc == "double" else 4
    smem = prob.R * prob.S * channels * tv * acc_bytes     # the filters
    prefetch = depthwise_rows_prefetch(prob, tv)            # rows in each thread's ring
    span = (qt - 1) * prob.sw + prob.S                      # pixels a row a thread
    ring = prefetch * span * columns * channels * tv * prob.dtype.itemsize
    with_ring = -(-smem // 16) * 16 + ring                  # the ring 16-byte aligned after
    if prefetch and with_ring <= smem_limits(None)[0]:
        smem = with_ring
    else:                                                   # (else no ring)
        prefetch = 0
    args = DepthwiseTileArgs((prob.N, prob.C, prob.H, prob.W, prob.P, prob.Q, prob.pt, prob.pl,
                              ps), tuple(x_strides),
                             (columns, channels, 1) if nchw else (channels, columns, 1),
                             smem, (channel_tiles, strips))
    name = depthwise_rows_kernel_name(T, Acc, tv, prob.S, prob.sw, qt, nchw, prefetch)
    return Plan("depthwise", None, options, "depthwise", name, max(prob.N, 1), args, b"", 0)


def depthwise_plan(prob: Problem, options: Options, x_strides, x_aligned: bool,
                   arch: int | None = None) -> Plan:
    """The depthwise kernels' plan (any stride, padding, dilation; m = K/C filters per
    channel): with Options.smem on, depthwise_mma_small_nhwc or depthwise_mma_nhwc where
    `depthwise_mma` gives one, else depthwise_rows_vec where `depthwise_rows_vector` gives a
    vector (NCHW), else depthwise_rows where `depthwise_rows` gives a form, else
    depthwise_tile_nhwc where `depthwise_tile` does (DepthwiseTileArgs: a block per tile or
    strip); else depthwise_nhwc or depthwise_nchw (DepthwiseArgs: the launch layer sizes the
    grid to the device); the kernel, block, shared memory and scalar arguments."""
    vec = depthwise_vector(prob, x_strides, x_aligned)
    if not (is_depthwise(prob) or small_groups(prob, vec)):
        raise ValueError(f"algorithm='depthwise' needs groups == C (one input channel per "
                         f"filter) or K == C with C/groups in {DEPTHWISE_GROUPS} within one "
                         f"vector (in NHWC, x's channels contiguous and aligned); got "
                         f"C={prob.C}, K={prob.K}, groups={prob.G}")
    mma = depthwise_mma(prob, options, vec) if options.smem else None
    if mma == "small":
        return depthwise_mma_small_plan(prob, options, x_strides)
    if mma == "tile":
        return depthwise_mma_plan(prob, options, x_strides)
    V = depthwise_rows_vector(prob, x_strides, x_aligned) if options.smem else 0
    if V:
        return depthwise_rows_vec_plan(prob, options, V, x_strides)
    rows = depthwise_rows(prob, vec) if options.smem else None
    if rows is not None:
        return depthwise_rows_plan(prob, options, rows, x_strides)
    tile = depthwise_tile(prob, vec) if options.smem else None
    if tile is not None:
        return depthwise_tile_plan(prob, options, tile, vec, x_strides)
    group = prob.Cg
    if prob.layout == "NHWC" and prob.R * prob.S * 32 * vec * group * prob.dtype.itemsize > \
            min(DEPTHWISE_SMEM_LIMIT, smem_limits(arch)[0]):
        raise ValueError(f"algorithm='depthwise' keeps a block's filters in shared memory; "
                         f"R*S = {prob.R * prob.S} is too large for that")
    window = depthwise_window(prob)
    if prob.layout == "NCHW" and prob.K * prob.P * -(-prob.Q // window[2]) >= 2 ** 31:
        raise ValueError(f"algorithm='depthwise' counts an image's outputs in 32 bits; "
                         f"K*P*Q = {prob.K * prob.P * prob.Q} is too many")
    name = depthwise_kernel_name(prob.dtype.name, prob.layout, vec, window, group)
    if prob.layout == "NCHW":
        block, channels = (256, 1, 1), 0
    else:       # channel vectors across a row's lanes, (output row, column group) items down
        lanes = min(-(-prob.K // vec), 32)
        block, channels = (lanes, 256 // lanes, 1), lanes * vec
    args = DepthwiseArgs((prob.N, prob.C, prob.H, prob.W, prob.K, prob.K // prob.C, prob.R,
                          prob.S, prob.P, prob.Q, prob.sh, prob.sw, prob.dh, prob.dw, prob.pt,
                          prob.pl), tuple(x_strides), block,
                         prob.R * prob.S * channels * group * prob.dtype.itemsize, channels,
                         window[2])
    return Plan("depthwise", None, options, "depthwise", name, max(prob.N, 1), args, b"", 0)


# Shared memory a block may opt in to and an SM holds, by compute capability (the CUDA
# programming guide's table); another or an unknown device: the smallest of these.
SMEM_BY_ARCH = {80: (163, 164), 87: (163, 164), 86: (99, 100), 89: (99, 100), 90: (227, 228),
                100: (227, 228), 120: (99, 100)}


def smem_limits(arch: int | None) -> tuple[int, int]:
    """(bytes a block may take, bytes an SM holds) on a device of compute capability `arch`."""
    block, sm = SMEM_BY_ARCH.get(arch, (99, 100))
    return block * 1024, sm * 1024


NARROW_GROUPS = (8, 16, 32)        # channels per group narrow.cu takes (K == C), besides stems
NARROW_STEM_CHANNELS = 8           # stems: C at most this, padded to it in shared memory
NARROW_THREADS = 256               # a block: 8 warps
NARROW_SMEM_LIMIT = 110 * 1024     # a block's shared memory, at most: two blocks per SM
NARROW_DTYPES = ("float16", "bfloat16")
# What "auto" gives it, read off tools/narrow_dev.py (float16 NHWC, batch 32, H200, GPU us back
# to back, before -> narrow, cuDNN): stems of at most 27 products per output and 2**26 outputs
# (mobilenet_v2.0, 3x3 stride 2: 82.0 -> 38.4, cuDNN 31.4; efficientnet_b0.0 66.4 -> 37.6,
# 31.0; not convnext_tiny.0, 4x4 stride 4: 58.3 -> 61.8; resnet50.0, 7x7: 83.2 -> 123.6; cv7 at
# batch 128: 616 -> 685), and groups of 8 and 16 (resnext50_32x4d.7 103.6 -> 41.4, cuDNN 32.1;
# .11 100.0 -> 32.4, 29.8; .13 38.6 -> 29.0, 19.2; .17 35.1 -> 19.2, 17.5), not 32 (.19 16.4
# -> 25.5; .23 15.6 -> 23.5).
NARROW_AUTO_STEM_REDUCTION = 27
NARROW_AUTO_STEM_OUTPUTS = 1 << 26
NARROW_AUTO_GROUPS = (8, 16)
# Dense stems (narrow_dense: each filter row's S*C values packed, not C padded to 8), from
# tools/narrow_dev.py (float16 NHWC, H200, GPU us back to back; batch 32, the cv layers 128;
# the default before -> C padded to 8 -> dense, cuDNN): every stem of at most 147 products
# (7x7 of 3 channels) per output: cv3 319 -> 766 -> 253, 290; cv7 605 -> 684 -> 463, 783;
# resnet50.0 81 -> 120 -> 70, 89; mobilenet_v2.0 (3x3, C padded to 8 before) 38 -> 30, 31;
# convnext_tiny.0 (4x4 stride 4) 61 -> 60 -> 45, 38; not cv1 (11x11: 363 products, K = 96 in
# blocks of 32 or fewer) 256 -> 1761 -> 637 (forced), 664.
NARROW_AUTO_DENSE_REDUCTION = 147
# Dense stems on Hopper (narrow_wgmma.cu: K of 32 or 64 filters, one block an SM of 384
# threads, a ring of NARROW_WGMMA_STAGES stages), from docs/hopper.md step 14
# (tools/narrow_dev.py, float16 NHWC, H200, GPU us back to back; narrow_dense -> narrow_wgmma,
# cuDNN): cv3 256 -> 205, 294; cv7 470 -> 427, 788; resnet50.0 (7x7 stride 2, padding 3; batch
# 32) 70.5 -> 67.4, 90.4 (batch 128: 246 -> 228, 295); not mobilenet_v2.0 (the same layer as
# efficientnet_b0.0: 3x3 stride 2, padding 1, K = 32; batch 32: 30 -> 37, 32; 128: 102 -> 118,
# 110).
NARROW_WGMMA_THREADS = 384
NARROW_WGMMA_STAGES = 4
NARROW_WGMMA_FILTERS = (32, 64)
NARROW_WGMMA_TILE = 128            # output pixels of one output row, at most


def narrow_form(prob: Problem) -> tuple[int, bool] | None:
    """(CP, stem) where narrow.cu takes the problem: channels per group as stored (a stem's C
    padded to 8) and whether it is a stem; None where it does not."""
    if prob.layout != "NHWC" or prob.dtype.name not in NARROW_DTYPES:
        return None
    if prob.G == 1 and 0 < prob.C <= NARROW_STEM_CHANNELS:
        return NARROW_STEM_CHANNELS, True
    if prob.G > 1 and prob.Cg == prob.Kg and prob.Cg in NARROW_GROUPS:
        return prob.Cg, False
    return None


def narrow_pays(prob: Problem, dense: bool) -> bool:
    """Whether "auto" takes narrow.cu (NARROW_AUTO_*); dense: whether its stem would run
    densely packed (narrow_dense)."""
    form = narrow_form(prob)
    if form is None:
        return False
    if dense:
        return prob.reduction <= NARROW_AUTO_DENSE_REDUCTION
    if form[1]:
        return (prob.reduction <= NARROW_AUTO_STEM_REDUCTION and
                prob.N * prob.K * prob.P * prob.Q <= NARROW_AUTO_STEM_OUTPUTS)
    return prob.Cg in NARROW_AUTO_GROUPS


class NarrowArgs(NamedTuple):
    """What a narrow.cu launch reads besides its four pointers: the problem's extents (N, C,
    H, W, K, G, R, S, P, Q, sh, sw, dh, dw, pt, pl) and the block's output tile (TP, TQ), x's
    element strides (N, C, H, W), the block, its shared memory, the output tiles and channel
    blocks, and how many blocks fit an SM."""

    ints: tuple[int, ...]
    x_strides: tuple[int, int, int, int]
    block: tuple[int, int, int]
    smem: int
    tiles: int
    channel_blocks: int
    per_sm: int

    def grid(self, prob: Problem, sms: int) -> tuple[int, int, int]:
        """(blocks over the tiles, channel blocks, 1): as many blocks as fit the device at
        once, each looping over an even share of the tiles."""
        return even(self.tiles, self.per_sm * sms // self.channel_blocks), \
            self.channel_blocks, 1


class NarrowTile(NamedTuple):
    """A narrow.cu block: KB channels, NW n8 tiles per warp, MT m16 tiles per warp, and the
    TP x TQ outputs its warps cover; smem its shared memory in bytes; tiles: how many output
    tiles the problem has."""

    kb: int
    nw: int
    mt: int
    tp: int
    tq: int
    smem: int
    tiles: int


def narrow_pitch(elements: int) -> int:
    """narrow.cu's pitch: an odd number of 16-byte rows."""
    return elements if (elements // 8) % 2 else elements + 8


def narrow_blocks(cp: int, stem: bool, dense: bool = False
                  ) -> list[tuple[int, int, tuple[int, ...]]]:
    """(KB, NW, MT choices) narrow.cu is compiled for: a stem's warps share one n-range of KB
    channels (KB = 8*NW) and split 512, 256 or 128 pixels (a dense stem's, KB up to 64, 256 or
    128: its registers); a group's warps hold its CP/8 n8 tiles, KB = 64 or 32 channels, over
    128 or 64 pixels."""
    if stem:
        return [(kb, kb // 8, (2, 1) if dense else (4, 2, 1))
                for kb in ((64, 32, 16, 8) if dense else (32, 16, 8))]
    out = []
    for kb in (64, 32):
        if kb % cp == 0:
            warps_m = 8 // (kb // cp)
            out.append((kb, cp // 8, tuple(px // (16 * warps_m) for px in (128, 64)
                                           if px >= 16 * warps_m)))
    return out


def narrow_dense(prob: Problem, x_strides, x_aligned: bool) -> bool:
    """Whether narrow.cu's stem runs densely packed (narrow_dense: each filter row's S*C values
    in a row, not C padded to 8): stems of C < 8 whose taps are adjacent columns (dw == 1),
    their raw rows by cp.async (narrow_vector)."""
    form = narrow_form(prob)
    return (form is not None and form[1] and prob.C < NARROW_STEM_CHANNELS and prob.dw == 1 and
            narrow_vector(prob, x_strides, x_aligned))


def narrow_smem(prob: Problem, cp: int, stem: bool, vx: bool, dense: bool, kb: int, mt: int,
                tp: int, tq: int) -> int:
    """A narrow.cu block's shared memory in bytes (the kernels' layouts)."""
    rows = (tp - 1) * prob.sh + (prob.R - 1) * prob.dh + 1
    cols = (tq - 1) * prob.sw + (prob.S - 1) * prob.dw + 1
    # two buffers of raw rows: from the 4-byte word (dense: the 16 bytes) the first is in
    raw = 2 * 2 * rows * -(-(cols * prob.C + (16 if dense else 2)) // 8) * 8
    if dense:
        er = -(-prob.S * prob.C // 2) * 2
        steps = -(-prob.R * er // 16)
        win = rows * -(-(cols * prob.C + 2) // 8) * 8         # stored rows: L + 2, to 8
        stage = 8 * 16 * mt * (kb + 8) * 2                    # each warp's outputs
        return (2 * kb * narrow_pitch(16 * steps) + 2 * 64 * steps + 4 * kb + 4 * 8 * 16 * mt +
                2 * 2 * win + raw + stage)
    steps = -(-prob.R * prob.S * cp // 16)
    window = 2 * rows * -(-cols // prob.sw) * prob.sw * narrow_pitch(cp if stem else kb)
    smem = (2 * kb * narrow_pitch(16 * steps) + 4 * -(-2 * steps // 4) * 4 + 16 +
            window * (2 if vx and not stem else 1))
    return smem + (raw if vx and stem else 0)


def narrow_tile(prob: Problem, cp: int, stem: bool, vx: bool,
                limit: int = NARROW_SMEM_LIMIT, dense: bool = False) -> NarrowTile | None:
    """The block for the problem: the first KB that divides K; among its MT choices whose
    shared memory (narrow_smem) fits `limit` bytes (narrow_limit), the fewest pixel slots over
    the grid (tiles times pixels per block: small maps take small blocks), the larger block on
    a tie (a dense stem's: within 2%; cv3 256 pixels a block, 2 x 111, rather than 128, 1 x
    111: 253 against 310 us)."""
    best = None
    for kb, nw, mts in narrow_blocks(cp, stem, dense):
        if prob.K % kb or prob.K // kb > MAX_GRID_YZ:
            continue
        warps_m = 8 // (kb // (8 * nw))
        for mt in mts:
            capacity = warps_m * mt * 16
            tq = min(prob.Q, capacity)
            tq = -(-prob.Q // -(-prob.Q // tq))
            tp = min(prob.P, capacity // tq)
            tp = -(-prob.P // -(-prob.P // tp))
            tiles = max(prob.N, 1) * -(-prob.P // tp) * -(-prob.Q // tq)
            smem = narrow_smem(prob, cp, stem, vx, dense, kb, mt, tp, tq)
            if smem > limit or tiles >= 2 ** 31:
                continue
            if best is None or tiles * capacity < best[0] * (0.98 if dense else 1):
                best = (tiles * capacity, NarrowTile(kb, nw, mt, tp, tq, smem, tiles))
        if best is not None:
            return best[1]
    return None


def narrow_limit(arch: int | None) -> int:
    """A narrow.cu block's shared memory, at most, on a device of compute capability arch."""
    return min(NARROW_SMEM_LIMIT, smem_limits(arch)[0])


def narrow_refusal(prob: Problem, x_strides, x_aligned: bool,
                   arch: int | None = None) -> str | None:
    """Why narrow.cu cannot run the problem, or None (see narrow_plan)."""
    form = narrow_form(prob)
    if form is None:
        return (f"algorithm='narrow' takes NHWC {' and '.join(NARROW_DTYPES)} stems of C <= "
                f"{NARROW_STEM_CHANNELS} and groups of C/groups == K/groups in {NARROW_GROUPS}; "
                f"got {prob.layout} {prob.dtype.name}, C={prob.C}, K={prob.K}, "
                f"groups={prob.G}")
    limit = narrow_limit(arch)
    if narrow_tile(prob, *form, narrow_vector(prob, x_strides, x_aligned), limit,
                   narrow_dense(prob, x_strides, x_aligned)) is None:
        return (f"algorithm='narrow' needs K a multiple of 8 (of 32 for groups) and a tile "
                f"whose window and filters fit {limit} bytes of shared memory; "
                f"got K={prob.K}, R x S = {prob.R} x {prob.S}, stride {prob.sh} x {prob.sw}")
    return None


def narrow_kernel_name(dtype: str, cp: int, kb: int, nw: int, mt: int, stem: bool,
                       vx: bool, dense: bool = False) -> str:
    if dense:
        return f"narrow_dense<{CUDA_TYPES[dtype][0]}, {kb}, {mt}>"
    return (f"narrow_nhwc<{CUDA_TYPES[dtype][0]}, {cp}, {kb}, {nw}, {mt}, {str(stem).lower()}, "
            f"{str(vx).lower()}>")


def narrow_vector(prob: Problem, x_strides, x_aligned: bool) -> bool:
    """Whether narrow.cu copies x by cp.async (the next tile's window while one is computed):
    groups by 16-byte vectors (x's channels contiguous, every other stride and the start
    aligned to 8 elements), stems by 4-byte words of raw rows (x's pixels of C contiguous
    channels, x aligned)."""
    xn, xc, xh, xw = x_strides
    if prob.G == 1:
        return xc == 1 and xw == prob.C and x_aligned
    return xc == 1 and x_aligned and all(s % 8 == 0 for s in (xn, xh, xw))


def narrow_plan(prob: Problem, options: Options, x_strides, x_aligned: bool,
                arch: int | None = None) -> Plan:
    """narrow.cu's plan: NHWC stems of C <= 8 channels and groups of C/G = K/G channels in
    NARROW_GROUPS (any stride, padding, dilation), float16 or bfloat16; float32 stems of C
    <= 4 channels in either layout on narrow_ffma.cu (narrow_ffma_plan)."""
    if prob.dtype.name == "float32":
        return narrow_ffma_plan(prob, options, x_strides, arch)
    refusal = narrow_refusal(prob, x_strides, x_aligned, arch)
    if refusal:
        raise ValueError(refusal)
    cp, stem = narrow_form(prob)
    vx = narrow_vector(prob, x_strides, x_aligned)
    dense = narrow_dense(prob, x_strides, x_aligned)
    if dense and narrow_rows_takes(prob, options, arch) and narrow_rows_pays(prob):
        return narrow_rows_plan(prob, options, x_strides)
    if dense and narrow_wgmma_takes(prob, options, arch) and narrow_wgmma_pays(prob):
        return narrow_wgmma_plan(prob, options, x_strides, arch)
    tile = narrow_tile(prob, cp, stem, vx, narrow_limit(arch), dense)
    # Blocks per SM: shared memory (an SM's, 1 KB of it reserved per block) and registers
    # (ptxas, sm_90: up to 128 a thread for stems, 80 for groups).
    per_sm = max(1, min(smem_limits(arch)[1] // (tile.smem + 1024), 2 if stem else 3))
    args = NarrowArgs((prob.N, prob.C, prob.H, prob.W, prob.K, prob.G, prob.R, prob.S, prob.P,
                       prob.Q, prob.sh, prob.sw, prob.dh, prob.dw, prob.pt, prob.pl, tile.tp,
                       tile.tq), tuple(x_strides), (NARROW_THREADS, 1, 1), tile.smem, tile.tiles,
                      prob.K // tile.kb, per_sm)
    return Plan("narrow", None, options, "narrow",
                narrow_kernel_name(prob.dtype.name, cp, tile.kb, tile.nw, tile.mt, stem, vx,
                                   dense),
                max(prob.N, 1), args, b"", 0)


def narrow_wgmma_tiles(prob: Problem) -> tuple[int, int]:
    """narrow_wgmma.cu's tile, TQ output pixels of one row (Q split evenly into tiles of at
    most NARROW_WGMMA_TILE), and how many tiles the problem has."""
    tq = -(-prob.Q // -(-prob.Q // NARROW_WGMMA_TILE))
    return tq, max(prob.N, 1) * prob.P * -(-prob.Q // tq)


def narrow_wgmma_smem(prob: Problem, tq: int) -> int:
    """narrow_wgmma.cu's shared memory in bytes (its NarrowLayout, plus 1 KB to align it)."""
    er = -(-prob.S * prob.C // 2) * 2
    steps = -(-prob.R * er // 16)
    rows = (prob.R - 1) * prob.dh + 1
    wr = -(-(((tq - 1) * prob.sw + prob.S) * prob.C + 9) // 8) * 8   # a row, 8 shifts past L
    ring = NARROW_WGMMA_STAGES * rows * wr * 2 + -(-NARROW_WGMMA_STAGES * rows * 4 // 16) * 16
    return (1024 + -(-16 * steps // 64) * prob.K * 128 + ring + 2 * 128 * (prob.K + 8) * 2 +
            steps * 4 * 24 + prob.K * 4 + 16 * NARROW_WGMMA_STAGES)


def narrow_wgmma_takes(prob: Problem, options: Options, arch: int | None) -> bool:
    """Whether narrow_wgmma.cu can run a dense stem (narrow_dense's): on compute capability
    9.0 with Options(hopper=True), K of 32 or 64, its shared memory within the device's and
    its tiles fewer than 2**30 (ints in the kernel, which steps past the last by the grid)."""
    tq, tiles = narrow_wgmma_tiles(prob)
    return (options.hopper and arch == HOPPER and prob.K in NARROW_WGMMA_FILTERS and
            narrow_wgmma_smem(prob, tq) <= smem_limits(arch)[0] and tiles < 2 ** 30)


def narrow_wgmma_pays(prob: Problem) -> bool:
    """Whether a dense stem narrow_wgmma.cu takes runs on it rather than on narrow_dense: K =
    64 (NARROW_WGMMA_* above: the stems of 32 filters ran slower on it)."""
    return prob.K == 64


def narrow_wgmma_plan(prob: Problem, options: Options, x_strides, arch: int | None) -> Plan:
    """narrow_wgmma.cu's plan: a persistent grid of at most one block an SM over the N*P*
    ceil(Q/TQ) tiles; the kernel takes narrow_dense's arguments (TP = 1)."""
    tq, tiles = narrow_wgmma_tiles(prob)
    args = NarrowArgs((prob.N, prob.C, prob.H, prob.W, prob.K, prob.G, prob.R, prob.S, prob.P,
                       prob.Q, prob.sh, prob.sw, prob.dh, prob.dw, prob.pt, prob.pl, 1, tq),
                      tuple(x_strides), (NARROW_WGMMA_THREADS, 1, 1),
                      narrow_wgmma_smem(prob, tq), tiles, 1, 1)
    return Plan("narrow", None, options, "narrow_wgmma",
                narrow_wgmma_kernel_name(prob.dtype.name, prob.K), max(prob.N, 1), args, b"", 0)


def narrow_wgmma_kernel_name(dtype: str, K: int) -> str:
    return f"narrow_dense_wgmma<{CUDA_TYPES[dtype][0]}, {K}, {NARROW_WGMMA_STAGES}>"


# Dense stems of stride 2 on Hopper without A fragments (narrow_wgmma.cu's narrow_rows_wgmma):
# x's rows kept in a ring as columns of 4 channels, each output row's pixels read from them by
# one overlapping wgmma descriptor (16 bytes a pixel: two columns of four channels), the
# filters as A (64 rows), a tile's 112 pixels as B. Its forms: sw == 2, dw == 1, C <= 4, S
# whose two-column chunks come in pairs (3, 4, 7, 8), K <= 64, Q <= 112.
NARROW_ROWS_STAGES = 4
NARROW_ROWS_AHEAD = 4              # tiles whose raw rows the producer copies ahead (ROWS_AHEAD)
NARROW_ROWS_PIXELS = 112
NARROW_ROWS_TAPS = (3, 4, 7, 8)


def narrow_rows_smem(prob: Problem) -> int:
    """narrow_rows_wgmma's shared memory in bytes (its RowsLayout, plus 1 KB to align it)."""
    pairs, span = -(-prob.S // 2), (prob.R - 1) * prob.dh + 1
    cols = max(prob.pl + prob.W, 2 * (NARROW_ROWS_PIXELS - 1) + 2 * pairs)
    copy = -(-cols // 2) * 2 * 8
    slot = copy * (2 if prob.S % 2 else 1)
    nr = 2 * span + (NARROW_ROWS_STAGES - 1) * prob.sh
    raw_row = -(-(prob.W * prob.C * 2 + 14) // 16) * 16   # x's row from its 16-byte chunk
    raw = raw_row * (2 * span + (NARROW_ROWS_AHEAD + 2) * prob.sh)
    atoms = -(-prob.R * pairs * 8 // 64)
    return (1024 + atoms * 64 * 128 + (nr + 1) * slot + raw + 2 * NARROW_ROWS_PIXELS * 72 * 2 +
            64 * 4 + 8 * 16 + 16 * NARROW_ROWS_STAGES)


def narrow_rows_takes(prob: Problem, options: Options, arch: int | None) -> bool:
    """Whether narrow_rows_wgmma can run a dense stem (narrow_dense's): on compute capability
    9.0 with Options(hopper=True, stem_rows=True), its forms above, at least as many output
    rows as stages (the stages in flight then span two images at most), N*H and N*P within
    int (the ring's row numbers, the tiles), rows of at most 2*112 + 8 columns (a producer
    thread copies one 16-byte chunk of a row and converts two columns; Q <= 112 implies it),
    at most 16 k16 steps of the filters (R * ceil(S/2)/2: a consumer holds them in registers)
    and its shared memory within the device's."""
    return (options.hopper and options.stem_rows and arch == HOPPER and prob.G == 1 and
            prob.sw == 2 and prob.dw == 1 and prob.C <= 4 and prob.S in NARROW_ROWS_TAPS and
            prob.K <= 64 and prob.Q <= NARROW_ROWS_PIXELS and prob.P >= NARROW_ROWS_STAGES and
            prob.W <= 2 * NARROW_ROWS_PIXELS + 8 and prob.R * (2 if prob.S > 4 else 1) <= 16 and
            prob.N * max(prob.H, prob.P) < 2 ** 31 and
            narrow_rows_smem(prob) <= smem_limits(arch)[0])


def narrow_rows_pays(prob: Problem) -> bool:
    """Whether a stem narrow_rows_wgmma takes runs on it: K = 64 (tools/narrow_dev.py, batch
    128, an H100: cv3 204 -> 132 us against narrow_dense_wgmma, ResNet's stem 225 -> 131;
    MobileNetV2's, 3 x 3 of 32 filters, only ties narrow_dense's 103 us: 100)."""
    return prob.K == 64


def narrow_rows_plan(prob: Problem, options: Options, x_strides) -> Plan:
    """narrow_rows_wgmma's plan: at most one block an SM of 384 threads, each over a
    contiguous run of the N*P output rows; narrow_dense's arguments (TP = 1, TQ = Q)."""
    tiles = max(prob.N, 1) * prob.P
    args = NarrowArgs((prob.N, prob.C, prob.H, prob.W, prob.K, prob.G, prob.R, prob.S, prob.P,
                       prob.Q, prob.sh, prob.sw, prob.dh, prob.dw, prob.pt, prob.pl, 1, prob.Q),
                      tuple(x_strides), (NARROW_WGMMA_THREADS, 1, 1), narrow_rows_smem(prob),
                      tiles, 1, 1)
    return Plan("narrow", None, options, "narrow_wgmma",
                narrow_rows_kernel_name(prob.dtype.name, prob.C), max(prob.N, 1), args, b"", 0)


def narrow_rows_kernel_name(dtype: str, C: int) -> str:
    return f"narrow_rows_wgmma<{CUDA_TYPES[dtype][0]}, {C}, {NARROW_ROWS_STAGES}>"


# NHWC layers whose window columns lie 128 bytes apart in x's row (rows_wgmma.cu: sw*C*2 ==
# 128, C = 32 at stride 2 or 64 at stride 1): x's rows in a ring of shared memory as the
# 128-byte swizzle lays them, each output row's 112 pixels read from a row by one wgmma
# descriptor a k16 step (B), the filters streamed a window row a stage (A, 64*KB rows), a
# block's two consumers on the two output rows of a tile.
ROWS_WGMMA_PIXELS = 112            # an output row's pixels, at most (RW_NP)
ROWS_WGMMA_THREADS = 384
ROWS_WGMMA_STAGES = (3, 2)         # the deepest ring of filter stages that fits is taken
ROWS_WGMMA_BLOCKS = (1, 2)         # KB: blocks of 64 filters a consumer holds
ROWS_WGMMA_TAPS = 7                # S at most (3, 5 and 7 in the networks)
ROWS_WGMMA_PLAYED = 8              # tiles of each run rows_wgmma_ring plays
ROWS_WGMMA_STEPS = tuple(sorted({S * C // 16 for S in range(1, ROWS_WGMMA_TAPS + 1)
                                 for C in (32, 64)}))      # S*C/16: k16 steps a window row


def rows_wgmma_ring(prob: Problem, stages: int) -> int:
    """The x rows rows_wgmma's ring must hold (NR): its producer's copies and its stages'
    reads played in their order, a row's slot free once every stage that reads it has been
    released, which the producer knows for stage i - STAGES when it copies stage i's rows:
    every row copied at or after the first row that a later stage reads must still be in
    the ring. Played over runs of ROWS_WGMMA_PLAYED tiles (the stages in flight span two
    tiles; after the first the pattern repeats a tile) from the first tiles of an image and
    from a few tiles before its last (across the edge into the next image's first)."""
    pairs = -(-prob.P // 2)
    H, R, sh, dh, pt = prob.H, prob.R, prob.sh, prob.dh, prob.pt
    need = 1
    for start in sorted({0, min(1, pairs - 1), min(2, pairs - 1), max(pairs - 3, 0)}):
        index, copied, reads = {}, [], []
        count, next_h, cur_n = 0, 0, -1
        for t in range(start, min(start + ROWS_WGMMA_PLAYED, 2 * pairs)):
            n, p0 = t // pairs, 2 * (t % pairs)
            last = p0 + 1 if p0 + 1 < prob.P else p0
            lo = max(p0 * sh - pt, 0)
            if n != cur_n or next_h < lo:
                cur_n, next_h = n, lo
            for r in range(R):
                while next_h <= min(last * sh - pt + r * dh, H - 1):
                    index[n, next_h] = count
                    count, next_h = count + 1, next_h + 1
                copied.append(count - 1)
                rows = [index[n, h] for h in (p0 * sh - pt + r * dh, last * sh - pt + r * dh)
                        if 0 <= h < H]
                reads.append(min(rows, default=count))
        lowest = list(itertools.accumulate(reversed(reads), min))[::-1]   # suffix minima
        for i, last_copied in enumerate(copied):
            need = max(need, last_copied - lowest[max(i - stages + 1, 0)] + 1)
    return need


def rows_wgmma_zeros(prob: Problem) -> int:
    """1 where some output row's window reaches a padding row (the zero slot), else 0."""
    return int(prob.pt > 0 or (prob.P - 1) * prob.sh - prob.pt + (prob.R - 1) * prob.dh >= prob.H)


def rows_wgmma_smem(prob: Problem, kb: int, stages: int, nr: int) -> int:
    """rows_wgmma's shared memory in bytes (its RwLayout, plus 1 KB to align it)."""
    atoms = -(-prob.S * prob.C // 64)
    lines = max(-(-(prob.pl + prob.W) * prob.C * 2 // 128), ROWS_WGMMA_PIXELS + atoms - 1)
    return (1024 + stages * atoms * kb * 64 * 128 + (nr + rows_wgmma_zeros(prob)) * 128 * lines +
            2 * ROWS_WGMMA_PIXELS * max(72, 64 * kb) * 2 + 64 * kb * 4 + 8 * stages +
            16 * stages)


def rows_wgmma_form(prob: Problem, arch: int | None) -> tuple[int, int, int] | None:
    """(KB, STAGES, NR) of rows_wgmma for the problem: the deepest ring whose shared memory
    fits the device's (STAGES at most R: the stages in flight then span two tiles at most,
    which rows_wgmma_ring's runs of a few tiles assume), or None."""
    kb = -(-prob.K // 64)
    for stages in ROWS_WGMMA_STAGES:
        if stages <= prob.R:
            nr = rows_wgmma_ring(prob, stages)
            if rows_wgmma_smem(prob, kb, stages, nr) <= smem_limits(arch)[0]:
                return kb, stages, nr
    return None


def rows_wgmma_fits(prob: Problem, options: Options, arch: int | None, x_strides,
                    x_aligned: bool, w_aligned: bool) -> bool:
    """rows_wgmma_takes but for its shared memory (rows_wgmma_form)."""
    xn, xc, xh, xw = x_strides
    return (options.hopper and options.window_rows and options.tma and arch == HOPPER and
            prob.G == 1 and prob.layout == "NHWC" and prob.dtype.name in TENSOR_CORE_DTYPES and
            prob.sw * prob.C * 2 == 128 and prob.dw == 1 and prob.S <= ROWS_WGMMA_TAPS and
            0 < prob.K <= 64 * max(ROWS_WGMMA_BLOCKS) and 0 < prob.Q <= ROWS_WGMMA_PIXELS and
            prob.N > 0 and xc == 1 and xw == prob.C and xn % 8 == 0 and xh % 8 == 0 and
            x_aligned and w_aligned and prob.N * -(-prob.P // 2) < 2 ** 31)


def rows_wgmma_takes(prob: Problem, options: Options, arch: int | None, x_strides,
                     x_aligned: bool, w_aligned: bool) -> bool:
    """Whether rows_wgmma.cu can run the problem: on compute capability 9.0 with
    Options(hopper=True, window_rows=True, tma=True: its filter stages are TMA copies), NHWC
    float16 or bfloat16, one group, window columns 128 bytes apart (sw*C*2 == 128), dw == 1,
    S <= 7, K <= 128, Q <= 112, x's pixels of C contiguous channels with its start and its
    image and row strides 16-byte aligned, w 16-byte aligned, N*P/2 tiles within int
    (rows_wgmma_fits), and a form whose shared memory fits (rows_wgmma_form)."""
    return rows_wgmma_fits(prob, options, arch, x_strides, x_aligned, w_aligned) and \
        rows_wgmma_form(prob, arch) is not None


ROWS_WGMMA_PAYS_PIXELS = 96        # output columns a row must have for rows_wgmma to pay


def rows_wgmma_pays(prob: Problem) -> bool:
    """Whether a layer rows_wgmma.cu takes runs on it: one block of at most 64 filters and
    output rows of more than ROWS_WGMMA_PAYS_PIXELS of the 112 pixels a wgmma computes
    (tools/rows_dev.py, batch 128, an H200, against im2win_wgmma.cu's tiles with the
    multicast filter: cv4 float16 707.0 -> 527.7 us, bfloat16 682.1 -> 487.6; not cv8's two
    blocks of filters, 423.7 -> 480.2; cv9's 54 columns, on an H100 in the kernel's first
    form, 76.5 -> 193.0; docs/hopper.md step 37)."""
    return prob.K <= 64 and prob.Q > ROWS_WGMMA_PAYS_PIXELS


def rows_wgmma_plan(prob: Problem, options: Options, x_strides,
                    form: tuple[int, int, int]) -> Plan:
    """rows_wgmma.cu's plan in its form (rows_wgmma_form: KB, STAGES, NR): at most one block
    an SM of 384 threads, each over a contiguous run of the N*ceil(P/2) tiles (pairs of
    output rows)."""
    kb, stages, nr = form
    zeros = rows_wgmma_zeros(prob)
    args = NarrowArgs((prob.N, prob.C, prob.H, prob.W, prob.K, prob.R, prob.S, prob.P, prob.Q,
                       prob.sh, prob.dh, prob.pt, prob.pl, nr, zeros), tuple(x_strides),
                      (ROWS_WGMMA_THREADS, 1, 1), rows_wgmma_smem(prob, kb, stages, nr),
                      prob.N * -(-prob.P // 2), 1, 1)
    reduction = prob.R * prob.S * prob.C      # the filter's stages: boxes of 64 x 64 by TMA
    tma = TmaArgs(None, (reduction, prob.K), reduction * prob.dtype.itemsize, (64, 64))
    return Plan("im2win_fused", None, options, "rows_wgmma",
                rows_wgmma_kernel_name(prob.dtype.name, kb, stages, prob.S * prob.C // 16),
                max(prob.N, 1), args, b"", 0, tma)


def rows_wgmma_kernel_name(dtype: str, kb: int, stages: int, steps: int) -> str:
    return f"rows_wgmma<{CUDA_TYPES[dtype][0]}, {kb}, {stages}, {steps}>"


# float32 stems on CUDA cores (narrow_ffma.cu): one group of at most NARROW_FFMA_CHANNELS
# channels; a block of KB filters (a multiple of 32) and KB*WP threads covers WP*TN*8 pixels,
# TN pixels a thread (NARROW_FFMA_PIXELS: 7 makes tiles of multiples of 56 pixels, which
# cover 55 x 55, 56 x 56 and 222-wide maps where those of 64 leave up to an eighth of their
# slots idle). tools/stems_dev.py (H200, float32, TFLOPS, 8 pixels a thread -> the planner's
# choice of 7 or 8, cuDNN): cv7 NCHW 20.1 -> 21.6-22.5 (16.5), convnext_tiny.0 NCHW 12.9 ->
# 14.0 (13.5), NHWC 8.3 -> 8.6-8.9 (10.5), mobilenet_v2.0 NCHW 9.9 -> 10.2-10.4 (8.5), but
# NHWC 10.8 -> 10.2 (9.0; 28 x 16 tiles against 9 x 56, before the window's copy was counted
# by its lanes: narrow_ffma_fill, which gives it 8 x 56).
NARROW_FFMA_CHANNELS = 4
NARROW_FFMA_FORMS = {32: 8, 64: 4, 96: 2, 128: 2}    # KB: WP
NARROW_FFMA_PIXELS = (8, 7)
NARROW_FFMA_PER_SM = 2             # blocks an SM, at most (__launch_bounds__(KB*WP, 2))
NARROW_FFMA_SMEM_LIMIT = 110 * 1024   # a block's shared memory, at most: two blocks an SM
# The block's filters resident in shared memory (copied once, each next tile's window copied
# while one is computed) where they take at most this many bytes; else a filter row at a time
# (two buffers, a barrier a row). From tools/stems_dev.py (float32, H100, TFLOPS, resident /
# a row at a time): cv7 NHWC 20.9 / 20.3 (6.9 KB), convnext_tiny.0 NHWC 8.1 / 7.4 (18 KB),
# mobilenet_v2.0 NHWC 9.5 / 9.4 (3.5 KB); cv3 NHWC 28.4 / 30.1, resnet50.0 NCHW 25.6 / 27.9
# (37.6 KB).
NARROW_FFMA_RESIDENT_BYTES = 32 * 1024
# The window packed ([row][column][CP]: a tap's C channels one shared load, narrow_ffma.cu's
# kPacked) for stems of C > 1 and at least this many products an output, their filters then
# resident up to NARROW_FFMA_PACKED_RESIDENT times NARROW_FFMA_RESIDENT_BYTES (docs/hopper.md,
# step 24; tools/stems_dev.py, H100, TFLOPS, planned before -> packed with filters resident,
# cuDNN): cv3 NCHW 29.3 -> 32.7 (20.2), NHWC 32.2 -> 32.0 (19.3); resnet50.0 NCHW 29.2 ->
# 30.8 (18.7), NHWC 29.8 -> 30.4 (17.6). Shorter stems lose (cv7, 27 products: NCHW 22.3 ->
# 20.7, NHWC 24.8 -> 22.1) or move within the runs' spread (convnext_tiny.0, 48: NCHW 12.9 ->
# 13.8, NHWC 14.1 -> 13.2), so they keep a plane a channel.
NARROW_FFMA_PACKED_REDUCTION = 64
NARROW_FFMA_PACKED_RESIDENT = 1.25
# What "auto" gives it (tools/stems_dev.py, H100, float32, TFLOPS, before -> narrow_ffma, cuDNN;
# cv* at batch 128, network stems at 32): stems of at most 147 products an output, in NHWC
# (cv3 26.5 -> 30.1, 19.7; cv7 13.2 -> 20.9, 11.1; resnet50.0 23.7 -> 28.1, 18.3; mobilenet_v2.0
# 2.6 -> 9.5, 7.2; convnext_tiny.0 7.2 -> 8.1, 10.2) and NCHW with its y staged
# (NARROW_FFMA_STAGE_NCHW: cv7 12.3 -> 20.4, 16.1; resnet50.0 22.2 -> 28.9, 19.0; mobilenet_v2.0
# 5.5 -> 10.8, 9.4; convnext_tiny.0 8.4 -> 11.8, 11.1; cv3 24.0 -> 27.5, 20.3); not the 11x11
# stems of 363 products (cv1 NHWC 26.3 -> 21.3, NCHW 22.8 -> 22.8 on whole rows; cv2 alike),
# which stay on their window columns.
NARROW_FFMA_AUTO_REDUCTION = 147
# NCHW tiles of whole output rows (a filter's rows of the tile one run of y) for stems of at
# most this many products an output: convnext_tiny.0 7.4 -> 10.5 TFLOPS, mobilenet_v2.0 8.6 ->
# 8.4; with more products they lose slots to the rows' tails (resnet50.0 25.6 -> 22.6, cv3
# 24.7 -> 22.2).
NARROW_FFMA_NCHW_ROWS = 48
# NCHW y through each warp's shared memory, 32 consecutive pixels of one filter a store
# (tools/stems_dev.py, H100, NCHW, TFLOPS, 8 lanes' 32 bytes a store -> staged): cv7 7.5 ->
# 20.4 (its window columns 12.3, cuDNN 16.1), mobilenet_v2.0 9.5 -> 10.8, convnext_tiny.0 11.1
# -> 11.8, resnet50.0 27.6 -> 28.9.
NARROW_FFMA_STAGE_NCHW = True


class NarrowFfmaTile(NamedTuple):
    """A narrow_ffma.cu block: KB filters and WP pixel warps of TN pixels a thread over TP x TQ
    outputs, whether its filters are resident, its NCHW y staged and its window packed; smem
    its shared memory in bytes; tiles: how many output tiles the problem has."""

    kb: int
    wp: int
    tn: int
    tp: int
    tq: int
    resident: bool
    stage: bool
    smem: int
    tiles: int
    packed: bool = False


def narrow_ffma_smem(prob: Problem, kb: int, tp: int, tq: int, resident: bool,
                     stage: bool, packed: bool = False) -> int:
    """narrow_ffma.cu's shared memory in bytes: the filters (resident: all R rows, else two rows),
    the NCHW y's stage (`stage`: 4 x 72 words a warp) and the tile's window ([row][channel][column],
    or `packed` [row][column][CP], CP = C rounded up to 1, 2 or 4; a row's columns stored by
    phase; resident: two of them)."""
    rows = (tp - 1) * prob.sh + (prob.R - 1) * prob.dh + 1
    cols = (tq - 1) * prob.sw + (prob.S - 1) * prob.dw + 1
    window = rows * -(-cols // prob.sw) * prob.sw * (4 if packed and prob.C == 3 else prob.C)
    stage = kb * NARROW_FFMA_FORMS[kb] // 32 * 4 * 72 if stage else 0
    return 4 * ((prob.R if resident else 2) * prob.S * prob.C * kb +
                (2 if resident else 1) * window + stage)


def narrow_ffma_tile(prob: Problem, limit: int) -> NarrowFfmaTile | None:
    """The block for a float32 stem: the KB of NARROW_FFMA_FORMS that pads K least (the larger on a
    tie: fewer blocks copy each window), its window packed for C > 1 and
    NARROW_FFMA_PACKED_REDUCTION products or more, its filters resident where they take at most
    NARROW_FFMA_RESIDENT_BYTES (packed: NARROW_FFMA_PACKED_RESIDENT times it) and a tile fits
    so, then the TN of NARROW_FFMA_PIXELS and TP x TQ
    output tile of its WP*TN*8 pixels whose work over the grid is least (every pixel slot's
    products and loads, about ten instructions a lane copying the window (narrow_ffma_fill) and
    six a filter element copied), with its shared memory within `limit` bytes; None if none
    fits."""
    kb = min(NARROW_FFMA_FORMS, key=lambda kb: (-(-prob.K // kb) * kb, -kb))
    if -(-prob.K // kb) > MAX_GRID_YZ:
        return None
    taps = prob.R * prob.S * prob.C
    stage = prob.layout == "NCHW" and NARROW_FFMA_STAGE_NCHW
    packed = prob.C > 1 and prob.reduction >= NARROW_FFMA_PACKED_REDUCTION
    if 4 * taps * kb <= NARROW_FFMA_RESIDENT_BYTES * (NARROW_FFMA_PACKED_RESIDENT if packed
                                                      else 1):
        tile = narrow_ffma_tile_of(prob, kb, True, stage, limit, packed)
        if tile is not None:
            return tile
    return narrow_ffma_tile_of(prob, kb, False, stage, limit, packed)


def narrow_ffma_tile_of(prob: Problem, kb: int, resident: bool, stage: bool,
                        limit: int, packed: bool = False) -> NarrowFfmaTile | None:
    """narrow_ffma_tile's choice of pixels a thread and output tile for one form of the block."""
    wp = NARROW_FFMA_FORMS[kb]
    taps = prob.R * prob.S * prob.C
    best = None
    # TQ a multiple of 8 (Q below 8: Q), so that the 8 pixels of a load lie in one row
    # (consecutive words; across rows they fall on one bank: convnext_tiny.0 on 2 x 56 tiles
    # ran 2.5x slower than its window columns); NCHW_ROWS: whole output rows
    whole_rows = prob.layout == "NCHW" and prob.reduction <= NARROW_FFMA_NCHW_ROWS
    for tn in NARROW_FFMA_PIXELS:
        capacity = 8 * tn * wp
        # a slot's share of its thread's instructions a tap (tn pixel loads, 2 filter float4,
        # 8*tn products), counted in products of the TN = 8 form (64 of its 74)
        slot = kb * taps * (9 * tn + 2) * 8 / (74 * tn)
        choices = [prob.Q] if prob.Q < 8 or (whole_rows and prob.Q <= capacity) else \
            range(8, min(-(-prob.Q // 8) * 8, capacity) + 1, 8)
        for tq in choices:
            tp = min(prob.P, capacity // tq)
            tp = -(-prob.P // -(-prob.P // tp))
            tiles = max(prob.N, 1) * -(-prob.P // tp) * -(-prob.Q // tq)
            smem = narrow_ffma_smem(prob, kb, tp, tq, resident, stage, packed)
            if smem > limit or tiles >= 2 ** 31:
                continue
            rows = (tp - 1) * prob.sh + (prob.R - 1) * prob.dh + 1
            cols = (tq - 1) * prob.sw + (prob.S - 1) * prob.dw + 1
            work = tiles * (capacity * slot + 10 * narrow_ffma_fill(prob, rows, cols) +
                            (0 if resident else 6 * taps * kb))
            if best is None or work < best[0]:
                best = (work, NarrowFfmaTile(kb, wp, tn, tp, tq, resident, stage, smem, tiles,
                                             packed))
    return None if best is None else best[1]


def narrow_ffma_fill(prob: Problem, rows: int, cols: int) -> int:
    """The lanes that copy a window of rows x cols into narrow_ffma.cu's shared memory: a warp a
    stored row and phase of the stride, a lane a column of it, each for the C channels (cv1's
    tiles 8 outputs wide read 39 columns at stride 4: 10 of a warp's 32 lanes busy a stored row
    and phase). Counted by lanes rather than by the window's elements (tools/stems_dev.py,
    H100, float32 NHWC, TFLOPS, elements -> lanes): cv7 21.3 -> 23.7 (16 x 16 tiles -> 4 x 56),
    mobilenet_v2.0 8.4 -> 9.7 (28 x 16 -> 8 x 56), convnext_tiny.0 8.4 -> 11.4 (14 x 8 -> 2 x
    56; cuDNN 11.4); NCHW and cv3 kept their tiles."""
    stored = -(-cols // prob.sw)                  # a phase's columns
    return rows * prob.sw * -(-stored // 32) * 32 * prob.C


def narrow_ffma_limit(arch: int | None) -> int:
    """A narrow_ffma.cu block's shared memory, at most, on a device of compute capability arch."""
    return min(NARROW_FFMA_SMEM_LIMIT, smem_limits(arch)[0])


def narrow_ffma_pays(prob: Problem) -> bool:
    """Whether "auto" takes narrow_ffma.cu for a float32 problem (NARROW_FFMA_AUTO_*)."""
    return (prob.dtype.name == "float32" and prob.G == 1 and
            0 < prob.C <= NARROW_FFMA_CHANNELS and
            prob.reduction <= NARROW_FFMA_AUTO_REDUCTION)


def narrow_ffma_refusal(prob: Problem, arch: int | None = None) -> str | None:
    """Why narrow_ffma.cu cannot run the float32 problem, or None."""
    if prob.G != 1 or not 0 < prob.C <= NARROW_FFMA_CHANNELS:
        return (f"algorithm='narrow' takes float32 stems of one group of C <= "
                f"{NARROW_FFMA_CHANNELS} channels; got C={prob.C}, groups={prob.G}")
    limit = narrow_ffma_limit(arch)
    if narrow_ffma_tile(prob, limit) is None:
        return (f"algorithm='narrow' needs an output tile whose window and filters fit {limit} "
                f"bytes of shared memory; got R x S = {prob.R} x {prob.S}, stride {prob.sh} x "
                f"{prob.sw}, dilation {prob.dh} x {prob.dw}")
    return None


def narrow_ffma_kernel_name(C: int, kb: int, wp: int, tn: int, nchw: bool, resident: bool,
                            stage: bool, packed: bool = False) -> str:
    flags = ", ".join(str(f).lower() for f in (nchw, resident, nchw and stage, packed))
    return f"narrow_ffma<{C}, {kb}, {wp}, {tn}, {flags}>"


def narrow_ffma_plan(prob: Problem, options: Options, x_strides, arch: int | None) -> Plan:
    """narrow_ffma.cu's plan: float32 stems of C <= 4 channels, NCHW or NHWC, any view of x."""
    refusal = narrow_ffma_refusal(prob, arch)
    if refusal:
        raise ValueError(refusal)
    tile = narrow_ffma_tile(prob, narrow_ffma_limit(arch))
    per_sm = max(1, min(smem_limits(arch)[1] // (tile.smem + 1024), NARROW_FFMA_PER_SM))
    args = NarrowArgs((prob.N, prob.C, prob.H, prob.W, prob.K, prob.G, prob.R, prob.S, prob.P,
                       prob.Q, prob.sh, prob.sw, prob.dh, prob.dw, prob.pt, prob.pl, tile.tp,
                       tile.tq), tuple(x_strides), (tile.kb * tile.wp, 1, 1), tile.smem,
                      tile.tiles, -(-prob.K // tile.kb), per_sm)
    return Plan("narrow", None, options, "narrow_ffma",
                narrow_ffma_kernel_name(prob.C, tile.kb, tile.wp, tile.tn, prob.layout == "NCHW",
                                        tile.resident, tile.stage, tile.packed),
                max(prob.N, 1), args, b"", 0)


POINTWISE_DTYPES = ("float16", "bfloat16")
POINTWISE_THREADS = 128            # a block: 4 warps
POINTWISE_BM = 64                  # pixels per tile
POINTWISE_MAX_K = 96               # K = 8*NT filters, NT at most 12 (the compiled forms)
POINTWISE_BLOCKS = {8: 8, 16: 8, 24: 6}   # blocks an SM by K, as __launch_bounds__ allows; 4 else
# What "auto" gives it, read off tools/pointwise_dev.py (float16 NHWC, batch 32, H200, GPU us
# from CUDA graphs; the default before it -> pointwise, cuDNN): every stride-1 1x1 layer of the
# five networks with C at most 240 and K at most 96 ran faster than before (mobilenet_v2.2 and
# efficientnet_b0.4, 32 -> 16 over 401408 pixels: 14.5 (cuBLAS) -> 11.6, cuDNN 14.1;
# mobilenet_v2.5, 96 -> 24: 13.0 -> 8.0, 7.0; .8, 144 -> 24: 16.2 -> 10.3, 11.4;
# efficientnet_b0.21, 240 -> 40: 10.0 -> 8.0, 5.4; .23, 240 -> 80 over 6272: 8.5 -> 6.4, 3.6;
# .5, 16 -> 96: 32.6 -> 27.4, 32.2), and in its first form (C a template argument, the same
# loop) none with more: resnet50.4, 256 -> 64: 26.6 against 19.8; mobilenet_v2.18, 384 -> 64:
# 8.3 against 7.0 (the filter's share of shared memory leaves too few tiles in flight).
POINTWISE_AUTO_MAX_C = 240


def pointwise_smem(C: int, K: int) -> int:
    """pointwise.cu's shared memory: the filter (K rows), two stages of BM pixel rows, each of
    C padded to 16 plus 8 elements, and the BM x (K + 8) outputs staged for 16-byte stores."""
    row = -(-C // 16) * 16 + 8
    return 2 * ((K + 2 * POINTWISE_BM) * row + POINTWISE_BM * (K + 8))


class PointwiseArgs(NamedTuple):
    """What a pointwise.cu launch reads besides its four pointers: (N, H, W, C, step), x's
    pixel stride `step` in elements, and x's element strides (N, C, H, W); the block, its
    shared memory, the pixel tiles and how many blocks fit an SM."""

    ints: tuple[int, ...]
    x_strides: tuple[int, int, int, int]
    block: tuple[int, int, int]
    smem: int
    tiles: int
    per_sm: int

    def grid(self, prob: Problem, sms: int) -> tuple[int, int, int]:
        """As many blocks as fit the device at once, each looping over an even share of the
        tiles."""
        return even(self.tiles, self.per_sm * sms), 1, 1


def pointwise_refusal(prob: Problem, x_strides, x_aligned: bool,
                      arch: int | None = None) -> str | None:
    """Why pointwise.cu cannot run the problem on a device of compute capability `arch`, or
    None (see pointwise_plan)."""
    limit = smem_limits(arch)[0]
    if prob.layout != "NHWC" or prob.dtype.name not in POINTWISE_DTYPES or \
            (prob.R, prob.S, prob.G, prob.sh, prob.sw) != (1, 1, 1, 1, 1) or \
            any((prob.pt, prob.pb, prob.pl, prob.pr)) or prob.C % 8 or prob.K % 8 or \
            not 0 < prob.C or not 0 < prob.K <= POINTWISE_MAX_K or \
            pointwise_smem(prob.C, prob.K) > limit:
        return (f"algorithm='pointwise' takes NHWC {' and '.join(POINTWISE_DTYPES)} 1x1 "
                f"convolutions at stride 1 with no padding and one group, C and K multiples "
                f"of 8, K at most {POINTWISE_MAX_K} and the filter within the device's "
                f"{limit} bytes of shared memory a block; got {prob.layout} "
                f"{prob.dtype.name}, {prob.R}x{prob.S}, stride ({prob.sh}, {prob.sw}), "
                f"groups={prob.G}, C={prob.C}, K={prob.K}")
    xn, xc, xh, xw = x_strides
    step = pixel_step(prob, x_strides)
    if not (xc == 1 and x_aligned and step % 8 == 0 and step >= prob.C and step < 2 ** 31 and
            evenly_strided((prob.N, prob.H, prob.W), (xn, xh, xw), step)):
        return ("algorithm='pointwise' reads each pixel's channels by 16-byte copies: x's "
                "channels contiguous, its pixels evenly strided by a multiple of 8 elements "
                "(an array of the layout, or a channel slice of one), x 16-byte aligned")
    return None


def pointwise_pays(prob: Problem) -> bool:
    """Whether "auto" takes pointwise.cu where it can run (POINTWISE_AUTO_MAX_C)."""
    return prob.layout == "NHWC" and prob.dtype.name in POINTWISE_DTYPES and \
        prob.C <= POINTWISE_AUTO_MAX_C


def pointwise_kernel_name(dtype: str, K: int) -> str:
    return f"pointwise_nhwc<{CUDA_TYPES[dtype][0]}, {K // 8}>"


def pointwise_plan(prob: Problem, options: Options, x_strides, x_aligned: bool,
                   arch: int | None = None) -> Plan:
    """pointwise.cu's plan: NHWC 1x1 convolutions at stride 1 of few filters (K at most
    POINTWISE_MAX_K), float16 or bfloat16, the filter resident in shared memory."""
    refusal = pointwise_refusal(prob, x_strides, x_aligned, arch)
    if refusal:
        raise ValueError(refusal)
    smem = pointwise_smem(prob.C, prob.K)
    # Blocks per SM: shared memory (an SM's, 1 KB of it reserved per block) and registers
    # (pointwise.cu's __launch_bounds__: 8 blocks for K <= 16, 6 for K = 24, else 4 of at
    # most 128 registers a thread).
    per_sm = max(1, min(smem_limits(arch)[1] // (smem + 1024), POINTWISE_BLOCKS.get(prob.K, 4)))
    tiles = -(-prob.N * prob.H * prob.W // POINTWISE_BM)
    args = PointwiseArgs((prob.N, prob.H, prob.W, prob.C, pixel_step(prob, x_strides)),
                         tuple(x_strides), (POINTWISE_THREADS, 1, 1), smem, tiles, per_sm)
    return Plan("pointwise", None, options, "pointwise",
                pointwise_kernel_name(prob.dtype.name, prob.K), max(prob.N, 1), args, b"", 0)


class GemmArgs(NamedTuple):
    """A 1x1 convolution as one cuBLAS call (cublasGemmStridedBatchedEx, column-major): in
    NHWC y (K x N*H*W) = w^T (K x C) x (C x N*H*W) over every pixel at once; in NCHW, per
    image, y (H*W x K) = x (H*W x C) w (C x K), batched over the images. `a_is_x` says which
    operand is A; the rest are cuBLAS's arguments."""

    a_is_x: bool
    transa: int
    transb: int
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    stride_a: int
    stride_b: int
    stride_c: int
    batch: int
    gather: bool = False      # x's strided pixels copied first (a stride over 1)


def evenly_strided(extents, strides, step: int) -> bool:
    """Whether the index space of `extents` (outermost first) with these element strides is
    one run of elements `step` apart (axes of extent 1 may have any stride)."""
    expected = step
    for extent, stride in zip(reversed(extents), reversed(strides)):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def pixel_step(prob: Problem, x_strides) -> int:
    """NHWC: the element stride between consecutive pixels of x (its innermost pixel axis
    longer than 1; C for a single pixel)."""
    xn, xc, xh, xw = x_strides
    steps = [s for e, s in zip((prob.N, prob.H, prob.W), (xn, xh, xw)) if e != 1]
    return steps[-1] if steps else prob.C


GEMM_MIN_CHANNELS = 16     # "auto" takes cuBLAS for float32 and float64 1x1 layers from here
# ... and for float16 and bfloat16 1x1 layers of at most this many channels over at least
# this many pixels (N*H*W), where the Tensor-Core kernels do one short slice a tile:
GEMM_HALF_MAX_CHANNELS = 32
GEMM_HALF_MIN_PIXELS = 1 << 16


def gemm_pays(prob: Problem) -> bool:
    """Whether "auto" runs a 1x1 convolution as the cuBLAS GEMM (where it can): float32 and
    float64 problems of at least GEMM_MIN_CHANNELS input channels; float16 and bfloat16 ones
    of at most GEMM_HALF_MAX_CHANNELS over at least GEMM_HALF_MIN_PIXELS pixels. Read off the
    H200 at batch 32 (docs/design.md has the numbers, `tools/suite_profile.py`): over the 77
    stride-1 1x1 layers of the five networks in float32 NCHW, cuBLAS against the im2win
    kernels took the geometric mean against cuDNN from 0.88x to 0.98x, up to 5.7x faster a
    layer (efficientnet_b0.40, 1152 channels on a 1x1 map: 24 us against 135), and lost by
    more than 5% only where the reduction is tiny (4 to 10 channels: efficientnet_b0.13, 6
    channels, 38.5 us against 28.7) or within the run-to-run noise. In float16 NHWC the wgmma
    kernel beat cuBLAS one call at a time on most layers (cuBLAS's own host time is 14-18 us
    a call), but not on the six of 16 to 32 channels over 100352 pixels or more
    (mobilenet_v2.2, .3, .6, efficientnet_b0.4, .5, .10: 8-27% slower in two runs, e.g.
    efficientnet_b0.4 54.8 us against cuBLAS's 40.2); with 96 channels, or 32 over 25088
    pixels, it was as fast or faster."""
    if prob.dtype.itemsize >= 4:
        return prob.C >= GEMM_MIN_CHANNELS
    return prob.C <= GEMM_HALF_MAX_CHANNELS and \
        prob.N * prob.H * prob.W >= GEMM_HALF_MIN_PIXELS


def gemm_refusal(prob: Problem, x_strides) -> str | None:
    """Why `prob` is not one GEMM (None: it is): a 1x1 filter, no padding, one group, every
    extent within cuBLAS's 32-bit arguments; at stride 1 on x as it lies, so x's pixels
    evenly strided (NHWC: channels contiguous; NCHW: each channel's pixels contiguous); at a
    larger stride on the pixels it reads, gathered first (`gemm_gather_bytes`)."""
    if (prob.R, prob.S, prob.G) != (1, 1, 1) or any((prob.pt, prob.pb, prob.pl, prob.pr)):
        return "it takes 1x1 convolutions with no padding and groups=1"
    if prob.C == 0:                 # cuBLAS takes no leading dimension of 0 (y is the bias)
        return "it needs at least one input channel"
    if (prob.sh, prob.sw) != (1, 1):          # the gathered copy: contiguous, P x Q pixels
        x_strides = gathered_strides(prob)
    xn, xc, xh, xw = x_strides
    P, Q = prob.P, prob.Q
    if prob.layout == "NHWC":
        step = pixel_step(gather_problem(prob), x_strides)
        ok = (xc == 1 or prob.C == 1) and step >= prob.C and \
            evenly_strided((prob.N, P, Q), (xn, xh, xw), step)
        sizes = (prob.N * P * Q, step)
    else:
        ok = evenly_strided((P, Q), (xh, xw), 1) and (xc >= P * Q or prob.C == 1)
        sizes = (P * Q, xc, prob.N, prob.K * P * Q)
    if not ok:
        return ("at stride 1 it reads x in place, so x's pixels must be evenly strided (an "
                "array of the layout, or a channel slice of one)")
    if max(sizes + (prob.C, prob.K)) >= 2 ** 31:
        return "cuBLAS's extents and leading dimensions are 32-bit"
    return None


def graph_plan(prob: Problem, plan: Plan, x_strides, options: Options) -> Plan | None:
    """The plan that "auto" runs in place of `plan` inside a CUDA graph capture, where a
    call's host time is paid once, at capture, and only its GPU time is replayed; None where
    it is `plan` there too.

    cuBLAS's GEMM for float16 and bfloat16 NHWC 1x1 convolutions at stride 1 (one group, no
    padding) that `plan` gives pointwise.cu or the Tensor-Core kernels: one call at a time
    those win on host time (cuBLAS's own is 14-18 us a call, a call of theirs 15-25 in all),
    but replayed from a graph cuBLAS's kernels are faster. `tools/suite_profile.py float16
    NHWC all --network resnet50` (H200, batch 32, 2026-12-04, us of GPU time a call replayed
    from a graph, ours / cuBLAS / cuDNN): resnet50.13 16.1 / 9.4 / 9.6, .11 21.6 / 13.8 /
    13.9, .21 15.0 / 8.2 / 8.4, .3 31.4 / 22.3 / 22.7, .7 18.7 / 13.4 / 13.7, .1 (pointwise)
    9.3 / 8.0 / 8.5, .5 24.5 / 24.5 / 26.4: cuBLAS as fast or faster on all twelve such
    layers (design.md: over the 67 of the five networks, cuBLAS 1.08x cuDNN and the wgmma
    kernel 0.66x). In ResNet-50's forward from a graph these layers were most of the gap
    to cuDNN's (tools/forward_ab.py --profile: each convolution's GPU span)."""
    if prob.dtype.itemsize != 2 or prob.layout != "NHWC" or \
            plan.algorithm not in ("pointwise", "im2win_fused") or \
            (prob.sh, prob.sw) != (1, 1) or gemm_refusal(prob, x_strides) is not None:
        return None
    return gemm_plan(prob, options, x_strides)


def gather_problem(prob: Problem) -> Problem:
    """The stride-1 problem on the pixels a strided 1x1 convolution reads (x[:, ::sh, ::sw]
    cut to P x Q): the same y."""
    return dataclasses.replace(prob, H=prob.P, W=prob.Q, sh=1, sw=1)


def gathered_strides(prob: Problem) -> tuple[int, int, int, int]:
    """NCHW-lettered element strides of the contiguous gathered x of `gather_problem`."""
    P, Q, C = prob.P, prob.Q, prob.C
    if prob.layout == "NHWC":
        return (P * Q * C, 1, Q * C, C)
    return (C * P * Q, P * Q, Q, 1)


def gemm_gather_bytes(prob: Problem) -> int:
    """The workspace of "gemm" at a stride: the pixels it reads, gathered (0 at stride 1)."""
    if (prob.sh, prob.sw) == (1, 1):
        return 0
    return prob.N * prob.C * prob.P * prob.Q * prob.dtype.itemsize


def gemm_plan(prob: Problem, options: Options, x_strides,
              workspace_limit: int | None = None) -> Plan:
    """A 1x1 convolution as a GEMM on x and w by cuBLAS with FP32 accumulation (FP64 for
    float64; float32 pedantic: never TF32): at stride 1 where they lie (no copy); at a larger
    stride on x's pixels that it reads gathered into workspace first (GemmArgs.gather)."""
    refusal = gemm_refusal(prob, x_strides)
    if refusal:
        raise ValueError(f"algorithm='gemm' cannot run this problem: {refusal}")
    gather = gemm_gather_bytes(prob)
    if workspace_limit is not None and gather > workspace_limit:
        raise ValueError(f"algorithm='gemm' at stride ({prob.sh}, {prob.sw}) gathers the "
                         f"pixels it reads into {gather} bytes of workspace, more than "
                         f"workspace_limit={workspace_limit}")
    strided = (prob.sh, prob.sw) != (1, 1)
    if strided:
        prob, x_strides = gather_problem(prob), gathered_strides(prob)
    xn, xc, xh, xw = x_strides
    N, C, K, HW = prob.N, prob.C, prob.K, prob.H * prob.W
    if prob.layout == "NHWC":        # w (K, C) row-major is A^T; x rows of ld xw are B
        args = GemmArgs(False, 1, 0, K, N * HW, C, C, pixel_step(prob, x_strides), K, 0, 0, 0,
                        1)
    else:                            # x[n] (C, HW) row-major is A (HW x C, ld xc); w is B
        args = GemmArgs(True, 0, 0, HW, K, C, max(xc, HW), C, HW, xn, 0, K * HW, N)
    return Plan("gemm", None, options, None, None, max(N, 1), args._replace(gather=strided),
                b"", gather)


TRANSPOSE_TILE = 64           # layout.cu's tile: 64 x 64 elements a block of 32 x 8 threads
TRANSPOSE_ROWS = (64, 32)     # transpose_batched's tile rows TR (its columns: 64 * 64 / TR)
TRANSPOSE_TAPS_BYTES = 16384  # layout.cu's: a transpose_taps pass's shared memory
# transpose_taps from this many elements: on the H100 (tools/twin_dev.py, float32, us, taps /
# transpose_narrow) the filters of 0.59-2.4 M elements went 14.4 -> 13.2 (cv5), 17.4 -> 14.3
# (cv6), 14.8 -> 13.0 (cv11), 25.7 -> 20.8 (cv12), those of 0.07-0.15 M 10.0 -> 11.7 (cv9),
# 11.0 -> 11.5 (cv4), 11.0 -> 11.3 (cv8), 11.9 both (cv10): few blocks, one an item (and a
# microsecond is the spread: cv9 on transpose_narrow twice measured 11.9 and 11.0).
TRANSPOSE_TAPS_MIN_ELEMENTS = 1 << 18


def transpose_launch(itemsize: int, batch: int, rows: int, cols: int, sb: int, sr: int,
                     sc: int, aligned: bool) -> tuple[str, tuple, tuple]:
    """(kernel, grid, block) of layout.cu's transpose of `batch` (rows x cols) matrices of
    `itemsize`-byte elements at b*sb + r*sr + c*sc into a contiguous (batch, cols, rows);
    `aligned`: both sides start on a 16-byte boundary. Where cols is under half a tile (a
    filter's taps): transpose_taps, passes of an item's rows through shared memory, where its
    rows are contiguous and it moves TRANSPOSE_TAPS_MIN_ELEMENTS or more, else
    transpose_narrow, one element a thread; transpose_words, 16-byte words, for 2-byte
    elements where both sides' rows are whole words; else transpose_batched, on the tiles of
    TRANSPOSE_ROWS (64 x 64, "transpose_batched"; 32 x 128, "transpose_batched32") that leave
    fewer elements idle (the 64-row tile on a tie). Executable._transpose launches what this
    says, tools/emulate_layout.py emulates it."""
    if cols < TRANSPOSE_TILE // 2 and sc == 1 and sr == cols and \
            batch * rows * cols >= TRANSPOSE_TAPS_MIN_ELEMENTS:
        chunk = TRANSPOSE_TAPS_BYTES // itemsize // (cols | 1)           # rows a pass
        units = batch * -(-rows // chunk)                                # passes, all items
        return "transpose_taps", (min(units, 8 * 65535), 1, 1), (256, 1, 1)
    if cols < TRANSPOSE_TILE // 2:
        return "transpose_narrow", (min(-(-batch * rows * cols // 256), 8 * 65535), 1, 1), \
            (256, 1, 1)
    tiles = -(-rows // TRANSPOSE_TILE) * -(-cols // TRANSPOSE_TILE)
    if itemsize == 2 and sc == 1 and rows % 8 == 0 and cols % 8 == 0 and sr % 8 == 0 and \
            sb % 8 == 0 and aligned:
        return "transpose_words", (tiles, min(batch, 65535), 1), (256, 1, 1)
    # NCHW x of 32 channels (cv4) on 64-row tiles: half of each block idle; tools/twin_dev.py
    # (H100, float32, batch 128, x's copy in ms, 64 x 64 -> 32 x 128 tiles): cv4 0.719 -> 0.567
    # (2.29 -> 2.90 TB/s); cv5 (96 channels of 24 x 24) 0.032 -> 0.035, within that run's
    # spread (the same kernel timed twice on cv6, cv11, cv12 differed by 10-20%). Every tile
    # holds 64 * 64 elements, so the fewest tiles leave the fewest idle.
    def tiles_of(tr: int) -> int:
        return -(-rows // tr) * -(-cols // (TRANSPOSE_TILE ** 2 // tr))

    tr = min(TRANSPOSE_ROWS, key=lambda tr: (tiles_of(tr), -tr))
    return "transpose_batched" + ("" if tr == TRANSPOSE_TILE else str(tr)), \
        (tiles_of(tr), min(batch, 65535), 1), (32, 8, 1)


def nhwc_twin(prob: Problem) -> tuple[Problem, tuple[int, int, int, int]]:
    """The NHWC problem of the same convolution, and the element strides (NCHW-lettered) of
    its contiguous x."""
    return (dataclasses.replace(prob, layout="NHWC"),
            (prob.H * prob.W * prob.C, 1, prob.W * prob.C, prob.C))


def nchw_groups(prob: Problem, x_strides, workspace_limit: int | None) -> bool:
    """An NCHW problem whose NHWC twin "auto" gives depthwise.cu's grouped form: groups of
    DEPTHWISE_AUTO_GROUPS channels with K = C, in a dtype the twin takes, its copies within
    `workspace_limit`. resnext50_32x4d.2 (G = 32 of 4 channels, 56x56; H200, batch 32, float32
    NCHW, GPU time replayed from CUDA graphs, `tools/suite_profile.py float32 NCHW grouped`):
    609 us on im2win_conv.cu before, 146 through the twin, cuDNN 321."""
    if prob.layout != "NCHW" or prob.G == 1 or prob.Cg not in DEPTHWISE_AUTO_GROUPS:
        return False
    twin, strides = nhwc_twin(prob)
    return (small_groups(twin, depthwise_vector(twin, strides, True)) and
            nhwc_refusal(prob, x_strides, workspace_limit) is None)


def nchw_groups_plan(prob: Problem, x_strides, options: Options, workspace_limit: int | None,
                     arch: int | None) -> Plan:
    """algorithm="depthwise" on NCHW groups of a few channels (K = C, C/G in DEPTHWISE_GROUPS
    within a vector): the "im2win_nhwc" plan around the NHWC twin's depthwise plan (layout.cu
    copies x and w channels-last into workspace, depthwise.cu's grouped form writes a
    channels-last y, layout.cu copies it into y)."""
    refusal = nhwc_refusal(prob, x_strides, workspace_limit)
    if refusal:
        raise ValueError(f"algorithm='depthwise' runs NCHW groups on their NHWC twin, and "
                         f"{refusal}")
    twin, strides = nhwc_twin(prob)
    inner = depthwise_plan(twin, options, strides, True, arch)
    return around(prob, "im2win_nhwc", inner, options, nhwc_workspace)


# float32 NCHW takes its NHWC twin on im2win_ffma.cu up to this many bytes of channels-last
# copies (x, w and y: nhwc_workspace) a FLOP:
# an estimate (the copies at about 3 TB/s against the FP32 rate going from about 25 TFLOPS,
# im2win_conv.cu's in NCHW, to about 38, im2win_ffma.cu's), which every benchmark layer of 8
# or more channels passes (cv4: 0.004) and a 1x1 layer of 64 to 256 channels does not (0.04).
# x's copy stays counted where the twin reads x in place: the grouped 3x3 layers it keeps off
# the twin lost on it in place too (tools/suite_profile.py float32 NCHW grouped --network
# resnext50_32x4d, H100, batch 32, us "auto" / twin one call at a time: resnext50_32x4d.7 241
# / 248, .11 228 / 242, .13 112 / 129, .17 103 / 125, .19 91 / 106; the twin's host time 22
# us against 11; docs/data/logs/suite-profile-resnext50-grouped-float32-NCHW-h100.log).
TWIN_BYTES_PER_FLOP = 0.02


def nhwc_workspace(prob: Problem, y: bool = True, x: bool = True) -> int:
    """Bytes of the channels-last copies of (`x`) x, w and (`y`) y that "im2win_nhwc"
    allocates."""
    elements = (prob.N * prob.H * prob.W * prob.C if x else 0) + prob.K * prob.reduction + \
        (prob.N * prob.P * prob.Q * prob.K if y else 0)
    return elements * prob.dtype.itemsize


def nhwc_refusal(prob: Problem, x_strides, workspace_limit: int | None,
                 in_place: bool = False) -> str | None:
    """Why "im2win_nhwc" cannot run `prob` (None: it can): an NCHW problem in float16 or
    bfloat16 (the twin runs on Tensor Cores) or float32 (on im2win_ffma.cu where it takes the
    twin), each of x's channels one evenly strided run of pixels (layout.cu reads H*W as one
    axis), the copies within `workspace_limit` (where the twin can read x `in_place`: any
    strides, and the copies of w and y alone)."""
    if prob.layout != "NCHW" or prob.dtype.name not in TENSOR_CORE_DTYPES + ("float32",):
        return "it runs float16, bfloat16 and float32 NCHW problems on their NHWC twin"
    xn, xc, xh, xw = x_strides
    if not in_place and prob.H > 1 and prob.W > 1 and xh != prob.W * xw:
        return ("it reads each channel of x as one run of pixels, so x's rows must be evenly "
                "strided (an NCHW array, or a slice of one along N or C)")
    copies = nhwc_workspace(prob, x=not in_place)
    if workspace_limit is not None and copies > workspace_limit:
        return (f"its channels-last copies of {'' if in_place else 'x, '}w and y take "
                f"{copies} bytes, more than workspace_limit={workspace_limit}")
    return None


def nhwc_auto_plan(prob: Problem, x_strides, options: Options, workspace_limit: int | None,
                   arch: int | None, sms: int | None = None) -> Plan | None:
    """The "im2win_nhwc" plan where "auto" takes it, else None: on Hopper, where the twin runs
    the wgmma kernel (the NCHW problem cannot: its window operand is gathered element by
    element) and the copies fit the workspace limit. Measured on the H200 (float16 NCHW,
    batch 128, docs/hopper.md step 5): the twelve layers' geometric mean went from 0.47x to
    0.84x cuDNN's (cv8 95 -> 202 TFLOPS); the C = 3 layers stay NCHW (their twin gathers
    too). float32, on any device: where the twin runs im2win_ffma.cu and the copies are at
    most TWIN_BYTES_PER_FLOP bytes a FLOP (x's counted, read in place or not)."""
    in_place = reads_in_place(nhwc_twin(prob)[0], x_strides, options, None, "float32")
    if nhwc_refusal(prob, x_strides, workspace_limit, in_place) is not None:
        return None
    if prob.dtype.name == "float32":
        if not options.ffma or nhwc_workspace(prob) > TWIN_BYTES_PER_FLOP * prob.flops:
            return None
        plan = nhwc_plan(prob, x_strides, options, workspace_limit, None, arch, sms=sms)
        return plan if plan.inner.file == "im2win_ffma" else None
    if arch != HOPPER or not options.hopper:
        return None
    plan = nhwc_plan(prob, x_strides, options, workspace_limit, None, arch)
    return plan if plan.inner.file == "im2win_wgmma" else None


def nhwc_plan(prob: Problem, x_strides, options: Options, workspace_limit: int | None,
              tile: str | None, arch: int | None, precision: str = "float32",
              sms: int | None = None) -> Plan:
    """The plan that runs the NCHW `prob` on its NHWC twin: layout.cu copies x and w
    channels-last into workspace, the twin's fused plan (`inner`, any kernel it picks; at
    `precision`: "tf32" and "3xtf32" run NCHW this way only) writes a channels-last y, and
    layout.cu copies that into y. Where the twin runs the wgmma kernel in one work item a tile,
    or splits its reduction (Options.nchw_epilogue: `around`), the epilogue or split-K's sum
    writes the NCHW y itself (Geometry.y_nchw): no y copy, no transpose. float32's
    im2win_ffma.cu reads x in place wherever its strided form can (reads_in_place): no x
    copy."""
    twin, strides = nhwc_twin(prob)
    can = reads_in_place(twin, x_strides, options, tile, precision)
    refusal = nhwc_refusal(prob, x_strides, workspace_limit, can)
    if refusal:
        raise ValueError(f"algorithm='im2win_nhwc' cannot run this problem: {refusal}")
    if can:
        inner = ffma_plan(twin, options, x_strides, tile, None if workspace_limit is None else
                          workspace_limit - nhwc_workspace(prob, x=False), sms)
        return around(prob, "im2win_nhwc", inner, options,
                      functools.partial(nhwc_workspace, x=False), x_in_place=True)
    inner = make_plan(twin, x_strides=strides, w_aligned=True, algorithm="im2win_fused",
                      options=inner_options(options), tile=tile, arch=arch,
                      precision=precision, sms=sms,
                      workspace_limit=None if workspace_limit is None else
                      workspace_limit - nhwc_workspace(prob))
    return around(prob, "im2win_nhwc", inner, options, nhwc_workspace)


def inner_options(options: Options) -> Options:
    """The options of an inner plan (an NCHW problem's NHWC twin, a stem's R x 1 problem):
    without rows_wgmma.cu, whose channels-last y the outer plan would have to transpose (its
    epilogue writes no NCHW y) and which was timed on NHWC layers only."""
    return dataclasses.replace(options, window_rows=False)


def reads_in_place(twin: Problem, x_strides, options: Options, tile: str | None,
                   precision: str) -> bool:
    """Whether the NHWC twin `twin` can read the NCHW problem's x in place: float32 at FP32
    precision on im2win_ffma.cu's strided form (ffma_strided), which x's strides and the tile
    allow (ffma_refusal: with the kernel's own switches on), Options.x_in_place on. Where it
    can, it does: since its elements go to shared memory by cp.async, the strided form beat x's
    channels-last copy on every benchmark layer whose twin runs im2win_ffma.cu, down to cv5's
    0.0005 bytes of x a FLOP (`tools/nchw_dev.py --variants auto,xcopy,xplace,xplace-base
    --rounds 2`, H100, batch 128, TFLOPS in place / copied / in place by the loads before:
    cv8 44.1 / 42.6 / 41.6, cv9 41.0 / 37.1 / 38.4, cv10 40.1 / 37.8 / 37.6, cv5 42.0 / 41.5 /
    39.4, cv11 39.0 / 37.9 / 38.3, cv12 34.6 / 33.8 / 34.0, cv6 38.5 / 37.9 / 37.8; docs/hopper.md,
    step 22)."""
    return (options.x_in_place and precision == "float32" and ffma_strided(x_strides) and
            (tile is None or tile in FFMA_TILES) and
            ffma_refusal(twin, options, x_strides, False, True, True, tile) is None)


# im2win_ffma.cu's NCHW y where P*Q is not a multiple of 4 (no float4 along the pixels):
# through shared memory (im2win_ffma_to_nchw's kStaged form), not scalar stores 16 bytes
# apart. tools/nchw_dev.py on the H200 (float32 NCHW, batch 128, 2026-12-04,
# TFLOPS staged / scalar): cv3 on its window columns 24.1 / 21.4, cv4 40.9 / 40.5, cv12 31.6 /
# 33.4 (in tools/ab_bench.py's run minutes later cv12 staged 32.8 against 32.1 for scalar at
# d880e2d: within the runs' spread).
FFMA_STAGED_NCHW = True


def around(prob: Problem, algorithm: str, inner: Plan, options: Options,
           copies: Callable[..., int], x_in_place: bool = False) -> Plan:
    """The plan of `algorithm` (copies around an NHWC problem's plan `inner`): for an NCHW
    `prob`, `inner` writing the NCHW y (Geometry.y_nchw) where it can (Options.nchw_epilogue):
    the wgmma kernel's epilogue in one work item a tile, im2win_ffma.cu's (im2win_ffma_to_nchw),
    and split-K's sum of the partial sums (split_reduce_nchw, either kernel); workspace:
    `copies(prob, y=...)` bytes, with the channels-last y or without, and the inner plan's.
    The workspace limit is still checked against the copies with y (nhwc_refusal,
    columns_refusal), a bound. x_in_place: `inner` reads x itself (Plan.x_in_place)."""
    direct = prob.layout == "NCHW" and options.nchw_epilogue and (
        inner.file in (WGMMA.file, "im2win_ffma") or inner.splits > 1)
    if direct:
        inner = dataclasses.replace(inner, geometry=inner.geometry._replace(y_nchw=1))
        staged = FFMA_STAGED_NCHW and inner.geometry.PQ % 4 != 0
        if inner.fixup:                             # its last blocks write the NCHW y
            inner = dataclasses.replace(inner, kernel=ffma_kernel_name(
                inner.tile, inner.options, inner.splits, nchw_y=2 if staged else 1,
                strided=x_in_place, exact=ffma_exact(inner.geometry, inner.tile,
                                                     inner.options), fixup=True))
        if inner.file == "im2win_ffma" and inner.splits == 1:
            taps = bool(inner.taps)                 # runs_plan's fused form (kTaps)
            inner = dataclasses.replace(inner, kernel=ffma_kernel_name(
                inner.tile, inner.options, nchw_y=2 if staged else 1,
                strided=x_in_place and not taps,
                tail=inner.geometry.redp != inner.geometry.red and not taps,
                exact=ffma_exact(inner.geometry, inner.tile, inner.options, whole=not taps),
                taps=taps))
    return Plan(algorithm, inner.tile, options, None, None, max(prob.N, 1), None, b"",
                copies(prob, y=not direct) + inner.workspace_bytes, inner=inner,
                x_in_place=x_in_place)


def columns_stage(prob: Problem, wide: bool = True, precision: str = "float32") -> Problem:
    """The problem over x's window columns (layout.cu's window_columns): an R x 1 filter, S*C
    channels padded to C2, Q columns at stride 1, no padding across. Its reduction runs
    (r, s, c) in window order, with zeros past S*C in each filter row. C2 is a multiple of 8
    or, for 16-bit types where `wide` (the forward's plans; backward filter's Runner keeps
    multiples of 8), of 32 where that adds at most a third: the R x 1 problem then takes TMA
    boxes of 32 channels. H200, float16 NHWC, batch 128, GPU ms (multiples of 8 / of 32 / of
    64, one process each, docs/hopper.md step 11): cv3 (S*C = 21) 0.382 / 0.319 / 0.395,
    cv1 (33) 0.257 / 0.261 / 0.259, cv7 (9) 0.608 / 0.717 / 0.864. float32 at `precision`
    "tf32" or "3xtf32": a multiple of 32 (the Tensor-Core kernel's TMA boxes of 32 floats)."""
    C2, C32 = (-(-prob.S * prob.C // m) * m for m in (8, 32))
    if (wide and prob.dtype.itemsize == 2 and 3 * C32 <= 4 * C2) or precision != "float32":
        C2 = C32
    return dataclasses.replace(prob, layout="NHWC", C=C2, W=prob.Q, S=1, sw=1, dw=1, pl=0,
                               pr=0)


def columns_workspace(prob: Problem, y: bool = True, precision: str = "float32") -> int:
    """Bytes that "im2win_columns" allocates at `precision`: x's and w's window columns
    (N*H*Q*C2 and K*R*C2 elements) and, for NCHW unless the kernel writes it (`y`), the
    channels-last y it transposes into y."""
    C2 = columns_stage(prob, precision=precision).C
    elements = prob.N * prob.H * prob.Q * C2 + prob.K * prob.R * C2 + \
        (prob.N * prob.P * prob.Q * prob.K if prob.layout == "NCHW" and y else 0)
    return elements * prob.dtype.itemsize


def columns_refusal(prob: Problem, workspace_limit: int | None,
                    precision: str = "float32") -> str | None:
    """Why "im2win_columns" cannot run `prob` (None: it can) at `precision`: float16, bfloat16
    or float32, one group, more than one filter column, a filter row's S*C values within one
    64-channel box and x's row within a block of layout.cu's window_columns (W*C at most
    WINDOW_ROW), the copies within `workspace_limit`."""
    from im2win.cuda.wgrad import WINDOW_ROW
    if prob.dtype.name not in TENSOR_CORE_DTYPES + ("float32",):
        return f"it takes float16, bfloat16 and float32, not {prob.dtype.name}"
    if prob.G != 1 or prob.S == 1:
        return f"it takes one group and more than one filter column (got G={prob.G}, " \
               f"S={prob.S})"
    if prob.S * prob.C > 64 or prob.W * prob.C > WINDOW_ROW:
        return (f"a filter row's S*C values must fit 64 channels and x's row W*C must fit "
                f"{WINDOW_ROW} (got S*C={prob.S * prob.C}, W*C={prob.W * prob.C})")
    copies = columns_workspace(prob, precision=precision)
    if workspace_limit is not None and copies > workspace_limit:
        return (f"its window columns take {copies} bytes, more than "
                f"workspace_limit={workspace_limit}")
    return None


def columns_plan(prob: Problem, options: Options, workspace_limit: int | None,
                 tile: str | None, arch: int | None, precision: str = "float32",
                 sms: int | None = None) -> Plan:
    """The plan that runs the stem `prob` over x's window columns: layout.cu's window_columns
    copies x[n, h, q*sw + s*dw - pl, c] to x2[n, h, q, s*C + c] and w[k, r, s, c] to
    w2[k, r, 0, s*C + c] (zeros past S*C and outside x), the R x 1 problem's fused plan
    (`inner`, any kernel it picks) convolves them into y (NCHW: into a channels-last y that
    layout.cu transposes into y, or where `around` lets the epilogue, into y itself). The
    window along each filter row becomes one run of channels, as im2win lays a window's
    columns out: cv3's reduction of 7 x 7 taps of 3 channels is 7 rows of 32 channels (224
    in place of 392 padded to 8 channels a tap; columns_stage says why 32, not 24). float32 at
    precision "tf32" or "3xtf32": the R x 1 problem on the Tensor-Core kernel."""
    refusal = columns_refusal(prob, workspace_limit, precision)
    if refusal:
        raise ValueError(f"algorithm='im2win_columns' cannot run this problem: {refusal}")
    inner_prob = columns_stage(prob, precision=precision)
    copies = columns_workspace(prob, precision=precision)
    H, W, C = inner_prob.H, inner_prob.W, inner_prob.C           # x2: contiguous NHWC
    inner = make_plan(inner_prob, x_strides=(H * W * C, 1, W * C, C), w_aligned=True,
                      algorithm="im2win_fused", options=inner_options(options), tile=tile,
                      arch=arch,
                      workspace_limit=None if workspace_limit is None else
                      workspace_limit - copies, precision=precision, sms=sms)
    return around(prob, "im2win_columns", inner, options,
                  functools.partial(columns_workspace, precision=precision))


# float32 NCHW stems over window columns (im2win_ffma_to_nchw writing the NCHW y): where the
# reduction R*S*C is at most this. tools/nchw_dev.py on the H200 (batch 128, TFLOPS, the
# planned im2win_conv.cu against the columns, same process): cv7 (27) 10.5 -> 13.1, cv3 (147)
# 23.4 -> 24.7 (P*Q = 12321: the epilogue's pass through shared memory; 22.2 with scalar
# stores), cv1 (363) 20.2 -> 19.8, cv2 (363) 20.4 -> 20.3: im2win_conv.cu is weak on short
# reductions. resnet50.0 (7x7x3 at stride 2, as cv3) follows cv3, not timed in NCHW itself.
# Longer reductions too where the R x 1 problem takes tiles of 96 filters (tuning.FFMA_96_ROWS):
# tools/columns_dev.py on the H100 (2026-12-05, batch 128, TFLOPS, im2win_conv.cu / columns
# on tiles of 64 / of 96, cuDNN): cv1 20.1 / 19.9 / 23.9 (25.5), cv2 20.4 / 20.5 / 24.7 (26.2).
COLUMNS_NCHW_REDUCTION = 160
# float32 NHWC stems take the columns up to this many bytes of them a FLOP (NCHW: up to
# TWIN_BYTES_PER_FLOP): convnext_tiny.0 (4x4 at stride 4, 96 filters, 0.028) went from 6.4
# (im2win_conv.cu) to 9.7 TFLOPS on them, where in NCHW they lost, 10.0 -> 7.0 (same run).
COLUMNS_NHWC_BYTES_PER_FLOP = 0.03


def columns_auto_plan(prob: Problem, options: Options, workspace_limit: int | None,
                      arch: int | None, sms: int | None = None) -> Plan | None:
    """The "im2win_columns" plan where "auto" takes it (Options.window_columns), else None:
    for C/G not a multiple of 8 (the general kernels gather such windows element by element:
    mma.sync's C = 3 path ran cv3 at 45 TFLOPS on the H200, im2win_conv.cu's float32 at 18-20
    on cv1 to cv3), where the copies fit the workspace limit and the R x 1 problem runs the
    wgmma kernel (16-bit types, on Hopper) or im2win_ffma.cu (float32, any GPU, where the
    copies are at most TWIN_BYTES_PER_FLOP bytes a FLOP in NCHW, the NHWC twin's estimate,
    COLUMNS_NHWC_BYTES_PER_FLOP in NHWC). float32 NHWC gained on all four stems (H200, batch
    128, GPU ms: cv1 1.42 -> 1.24, cv3 1.50 -> 1.07, cv7 2.45 -> 1.56); float32 NCHW only
    where its kernel writes the NCHW y (Options.nchw_epilogue; through a channels-last y
    transposed after it, cv1 went from 1.32 to 1.46 ms) and the reduction is short
    (COLUMNS_NCHW_REDUCTION) or the R x 1 problem runs on tiles of 96 filters."""
    if not options.window_columns or prob.C % 8 == 0 or \
            columns_refusal(prob, workspace_limit) is not None:
        return None
    if prob.dtype.name == "float32":
        nchw = prob.layout == "NCHW"
        bound = TWIN_BYTES_PER_FLOP if nchw else COLUMNS_NHWC_BYTES_PER_FLOP
        if not options.ffma or (nchw and not options.nchw_epilogue) or \
                columns_workspace(prob, y=False) > bound * prob.flops:
            return None
        plan = columns_plan(prob, options, workspace_limit, None, arch, sms=sms)
        nchw_pays = prob.reduction <= COLUMNS_NCHW_REDUCTION or plan.inner.tile.BM == 96
        return plan if plan.inner.file == "im2win_ffma" and \
            (not nchw or (plan.inner.geometry.y_nchw and nchw_pays)) else None
    if arch != HOPPER or not options.hopper:
        return None
    plan = columns_plan(prob, options, workspace_limit, None, arch)
    return plan if plan.inner.file == "im2win_wgmma" else None


# float32 stems as the im2win papers run them ("im2win_runs"): the window tensor materialised
# (window.cu's window_runs: NHWC, each row padded to 16 bytes), then im2win_ffma.cu over each
# output pixel's whole run of S*R*C values as one 1 x 1 problem (runs_stage), the reduction
# padded once to the tile's slice (kTail; cv1: 363 -> 368 products, where the window columns
# pad each filter row, 11 x 33 -> 11 x 40 = 440). On the H100 (2026-12-06, batch 128,
# TFLOPS, docs/hopper.md step 25): the GEMM over the runs alone (a strided view of
# image_to_window's tensor through the library) 39.4 on cv1 and cv2 in NHWC, the window
# columns' whole call 26.8 and 27.1; tools/runs_dev.py, runs against columns: cv1 NCHW 31.0 /
# 26.3, NHWC 31.7 / 27.5, cv2 NCHW 31.8 / 27.2, NHWC 31.7 / 27.8 (cuDNN 25.8, 21.0, 26.3,
# 21.1). "auto" takes it for reductions of at least RUNS_REDUCTION that it pads less than
# the columns do.
RUNS_REDUCTION = 160
RUNS_SLICE = 16               # the runs' slice depth: im2win_ffma.cu's 16-deep tiles
WINDOW_RUN_ROW = 8192         # window.cu's window_runs: the most elements of x_win's row


def runs_pitch(prob: Problem) -> int:
    """x_win's row length in elements for "im2win_runs": Wp*R*C rounded up to 16 bytes
    (zeros past Wp*R*C, as more padding columns would be)."""
    return -(-prob.Wp * prob.R * prob.C // 4) * 4


def runs_stage(prob: Problem) -> Problem:
    """The 1 x 1 problem over the window tensor's runs: NHWC, a "pixel" (n, p, q) a run of
    S*R*C "channels" (window order: s, then r, then c), P x Q of them an image."""
    return dataclasses.replace(prob, layout="NHWC", C=prob.S * prob.R * prob.C, H=prob.P,
                               W=prob.Q, R=1, S=1, sh=1, sw=1, dh=1, dw=1, pt=0, pb=0, pl=0,
                               pr=0)


def runs_strides(prob: Problem) -> tuple[int, int, int, int]:
    """runs_stage's x strides over x_win (elements, NCHW-lettered (n, c, h, w)): images
    P*pitch apart, rows pitch, pixels sw*R*C (the runs overlap), channels 1."""
    pitch = runs_pitch(prob)
    return prob.P * pitch, 1, pitch, prob.sw * prob.R * prob.C


def runs_reduction(prob: Problem) -> int:
    """The runs' padded reduction (Geometry.redp, w_win's row): S*R*C rounded up to a slice."""
    return -(-prob.S * prob.R * prob.C // RUNS_SLICE) * RUNS_SLICE


def runs_tile(prob: Problem, tile: str | None) -> Tile:
    """im2win_ffma.cu's tile for the runs: RUNS_SLICE-deep slices (choose_ffma_tile's rows)."""
    deep = [name for name, t in FFMA_TILES.items() if t.BK == RUNS_SLICE]
    name = tile or choose_ffma_tile(RUNS_SLICE, prob.K)
    if name not in deep:
        raise ValueError(f"algorithm='im2win_runs' takes im2win_ffma.cu's tiles of 16-deep "
                         f"slices ({', '.join(deep)}), not {tile!r}")
    return FFMA_TILES[name]


def runs_workspace(prob: Problem, y: bool = True, fused: bool = False) -> int:
    """Bytes that "im2win_runs" allocates: x_win (N*P*pitch elements, and the padded
    reduction's length of slack: the last run's padding, at most 15 elements, is read past
    the last row; none where the runs are `fused`: kTaps), the filter in window order
    (K rows of the padded reduction) and, for NCHW unless the kernel writes it (`y`), the
    channels-last y."""
    red = runs_reduction(prob)
    window = 0 if fused else prob.N * prob.P * runs_pitch(prob) + red
    elements = window + prob.K * red + \
        (prob.N * prob.P * prob.Q * prob.K if prob.layout == "NCHW" and y else 0)
    return elements * prob.dtype.itemsize


def runs_taps(prob: Problem, x_strides) -> bytes:
    """The fused runs' table (im2win_ffma.cu's kTaps; table_bytes' form) over x's own strides,
    in NHWC window order whatever x's layout (s, then r, then c: w_win's and x_win's order),
    or b"" where the offsets do not fit (the runs are then materialised)."""
    geo = geometry(prob, True, max(prob.N, 1), x_strides)
    return table_bytes(dataclasses.replace(prob, layout="NHWC"), geo, True, True)


def runs_refusal(prob: Problem, options: Options, workspace_limit: int | None,
                 fused: bool = False) -> str | None:
    """Why "im2win_runs" cannot run `prob` (None: it can): float32, one group, dw = 1 (a
    pixel's window one run), its runs 16-byte aligned (sw*R*C a multiple of 4), x_win's row
    within WINDOW_RUN_ROW elements (window_runs' shared copy), im2win_ffma.cu's options on
    (ffma, smem, micro_kernel, vector_loads, double_buffer, conflict_free), the copies
    (without x_win where the runs are `fused`) within `workspace_limit`."""
    if prob.dtype.name != "float32":
        return f"it takes float32, not {prob.dtype.name}"
    if prob.G != 1 or prob.dw != 1:
        return f"it takes one group and dw = 1 (got G={prob.G}, dw={prob.dw})"
    if (prob.sw * prob.R * prob.C) % 4:
        return (f"each output pixel's run must start on 16 bytes: sw*R*C = "
                f"{prob.sw * prob.R * prob.C} is not a multiple of 4")
    row = max(runs_pitch(prob), runs_reduction(prob))        # x_win's row, w_win's
    if row > WINDOW_RUN_ROW:
        return f"a window row of {row} elements exceeds window_runs' {WINDOW_RUN_ROW}"
    if not (options.ffma and options.smem and options.micro_kernel and options.vector_loads
            and options.double_buffer and options.conflict_free):
        return "it runs im2win_ffma.cu's full kernel (Options ffma, smem, micro_kernel, " \
               "vector_loads, double_buffer and conflict_free on)"
    copies = runs_workspace(prob, fused=fused)
    if workspace_limit is not None and copies > workspace_limit:
        return f"its window takes {copies} bytes, more than workspace_limit={workspace_limit}"
    return None


def runs_plan(prob: Problem, options: Options, workspace_limit: int | None,
              tile: str | None, x_strides) -> Plan:
    """The plan that runs the stem `prob` over its window's runs: window.cu's window_runs
    writes w_win[k, (s*R + r)*C + c] = w[k, r, s, c] (zeros past S*R*C) and, unless the runs
    are fused, x_win (runs_pitch), then im2win_ffma.cu (kTail where S*R*C is not a multiple
    of 16) convolves the 1 x 1 problem runs_stage over them into y (NHWC, or for NCHW the
    NCHW y from its epilogue where `around` lets it). Fused (Options.fused_runs, runs_taps:
    Plan.x_in_place), its kTaps form reads each run from x itself through the table, on the
    problem's own Geometry with the runs' reduction (red = S*R*C, redp)."""
    taps = runs_taps(prob, x_strides) if options.fused_runs else b""
    refusal = runs_refusal(prob, options, workspace_limit, fused=bool(taps))
    if refusal:
        raise ValueError(f"algorithm='im2win_runs' cannot run this problem: {refusal}")
    inner_prob = runs_stage(prob)
    chosen = runs_tile(prob, tile)
    check_grid(inner_prob, chosen)
    if taps:
        geo = geometry(prob, True, max(prob.N, 1), x_strides)._replace(
            red=prob.reduction, redp=runs_reduction(prob))
        name = ffma_kernel_name(chosen, options, taps=True,
                                exact=ffma_exact(geo, chosen, options, whole=False))
        inner = Plan("im2win_fused", chosen, options, "im2win_ffma", name, max(prob.N, 1),
                     geo, taps, 0)
        return around(prob, "im2win_runs", inner, options,
                      functools.partial(runs_workspace, fused=True), x_in_place=True)
    geo = geometry(inner_prob, True, max(prob.N, 1), runs_strides(prob))
    geo = geo._replace(redp=runs_reduction(prob))
    name = ffma_kernel_name(chosen, options, tail=geo.redp != geo.red,
                            exact=ffma_exact(geo, chosen, options))
    inner = Plan("im2win_fused", chosen, options, "im2win_ffma", name, max(prob.N, 1), geo,
                 b"", 0)
    return around(prob, "im2win_runs", inner, options, runs_workspace)


def runs_auto_plan(prob: Problem, options: Options, workspace_limit: int | None,
                   x_strides) -> Plan | None:
    """The "im2win_runs" plan where "auto" takes it (Options.window_runs), else None: a
    float32 stem (C/G not a multiple of 8) that runs_refusal accepts, of at least
    RUNS_REDUCTION products, whose padded run is shorter than the window columns' padded
    reduction; NCHW where the kernel writes the NCHW y (Options.nchw_epilogue)."""
    if not options.window_runs or prob.C % 8 == 0 or prob.reduction < RUNS_REDUCTION or \
            (prob.layout == "NCHW" and not options.nchw_epilogue):
        return None
    fused = options.fused_runs and bool(runs_taps(prob, x_strides))
    if runs_refusal(prob, options, workspace_limit, fused=fused) is not None:
        return None
    columns = prob.R * (-(-prob.S * prob.C // 8) * 8)
    if runs_reduction(prob) >= columns:
        return None
    return runs_plan(prob, options, workspace_limit, None, x_strides)


def tf32_columns(prob: Problem, options: Options, workspace_limit: int | None) -> bool:
    """Whether "auto" runs a float32 problem at precision "tf32" or "3xtf32" over its window
    columns: where C is not a multiple of 32 (the Tensor-Core kernel's TMA boxes are 32
    floats, which a stem's window columns give; nothing else runs such a problem at these
    precisions, so no bytes-a-FLOP bound as for the FP32 path) and the columns are possible
    (Options.window_columns, columns_refusal: within `workspace_limit`)."""
    return options.window_columns and prob.C % 32 != 0 and \
        columns_refusal(prob, workspace_limit, "3xtf32") is None


def check_grid(prob: Problem, tile) -> None:
    if -(-prob.Kg // tile.BM) > MAX_GRID_YZ:
        raise ValueError(f"K/G = {prob.Kg} filters per group need more than {MAX_GRID_YZ} "
                         f"tiles of {tile.BM}")


@dataclasses.dataclass(frozen=True)
class Family:
    """A Tensor-Core kernel family: its .cu file, tile table, reduction slice, the planner's
    tile choice, and its instantiation name from (problem, fused, tile, options, tables,
    16-byte filter copies, 16-byte window copies)."""

    file: str
    tiles: dict
    slice: int
    choose: Callable[[Problem], str]
    name: Callable[..., str]


MMA = Family("im2win_mma", MMA_TILES, MMA_BK,
             lambda p: choose_mma_tile(p.Kg, p.reduction, p.layout),
             lambda prob, fused, tile, options, tables, vec_w, vec_x: mma_kernel_name(
                 prob, fused, tile, options, tables, vec_w, vec_x))
WGMMA = Family("im2win_wgmma", WGMMA_TILES, WGMMA_BK,
               lambda p: choose_wgmma_tile(p.Kg, p.N * p.P * p.Q),
               lambda prob, fused, tile, options, tables, vec_w, vec_x: wgmma_kernel_name(
                   prob, fused, tile, options, tables, vec_x, vec_w))
WGMMA_MIN_TILES = 128   # fewer tiles than about one per SM leave the persistent grid idle


def wgmma_pays(prob: Problem, geo: Geometry, src_aligned: bool) -> bool:
    """Whether the planner takes the wgmma kernel with its cp.async producer over mma.sync on
    Hopper, where TMA does not apply (TMA always takes it; a forced tile of either kernel
    overrides both). Read off the H200 measurements (docs/hopper.md): it won where the window
    operand is copied 16 bytes at a time (NHWC, C/G a multiple of 8) with enough tiles to fill
    the SMs; mma.sync measured faster on C = 3 and NCHW (gathers) and on cv12 (50 tiles). (64
    filters were mma.sync's until the producer's byte addresses: cv4 then measured 259 TFLOPS
    on wg256x64 against mma.sync's 214.) The 128-tile threshold is a round number between
    cv12 and cv11 (144), not a sweep."""
    if not (src_aligned and contiguous_runs_of_8(prob, geo)):
        return False
    tile = WGMMA_TILES[WGMMA.choose(prob)]
    tiles = -(-prob.N * prob.P * prob.Q // tile.BM) * -(-prob.Kg // tile.BN) * prob.G
    return tiles >= WGMMA_MIN_TILES


class TmaArgs(NamedTuple):
    """The TMA descriptors' arguments of a wgmma launch whose operands are copied by TMA:
    x's im2col descriptor (None: the kernel takes the filter's alone, rows_wgmma.cu) and the
    filter's tiled one (w as a matrix of K rows of the reduction, boxes of BK x BN)."""

    x: object                     # im2win.cuda.tma.Im2colArgs, or None
    w_dims: tuple[int, int]       # (reduction, K), innermost first
    w_stride: int                 # bytes per filter
    w_box: tuple[int, int]        # (BK, BN)


def tma_plan(prob: Problem, tile: WgmmaTile, options: Options, x_strides, src_aligned: bool,
             w_aligned: bool) -> TmaArgs | None:
    """The TMA arguments of a fused wgmma launch of `tile` where it copies by TMA (the
    options allow it and tma_args takes the problem), else None."""
    if not (options.tma and options.conflict_free and x_strides is not None):
        return None
    return tma_args(prob, tile, x_strides, src_aligned, w_aligned)


def tma_args(prob: Problem, tile: WgmmaTile, x_strides, src_aligned: bool,
             w_aligned: bool) -> TmaArgs | None:
    """The TMA plan of a fused NHWC wgmma launch, or None where it is not taken: 16-byte
    aligned operands and C/G a multiple of a box's channels (tma_box_channels), so that no
    box crosses into the next tap or group and no slice is part padding, and what
    im2col_args checks."""
    from im2win.cuda.tma import im2col_args
    channels = tma_box_channels(prob)
    if not (prob.layout == "NHWC" and src_aligned and w_aligned and channels):
        return None
    try:
        x = im2col_args(prob, x_strides, channels, tile.BM)
    except ValueError:
        return None
    # The filter's box is one whole slice (a 128-byte row) with either box width of x.
    return TmaArgs(x, (prob.reduction, prob.K), prob.reduction * prob.dtype.itemsize,
                   (slice_elements(prob), tile.BN))


def tma_box_channels(prob: Problem) -> int:
    """Channels of one TMA box of x (0: none fits): a whole 128-byte shared row (64 of
    float16 or bfloat16, 32 of float32) where C/G is a multiple of it; for 16-bit types with
    C/G a multiple of 32 only (cv4's 32, cv5's 96), boxes of 32 channels in 64-byte rows, two
    a slice (im2win_wgmma.cu's kHalf)."""
    row = slice_elements(prob)
    if prob.Cg % row == 0:
        return row
    return 32 if prob.dtype.itemsize == 2 and prob.Cg % 32 == 0 else 0


def tma_slices(prob: Problem) -> int:
    """Slices of 64 reduction elements (16-bit types) of a TMA launch: each tap's channels in
    boxes, two boxes of 32 a slice where they are 32 wide (the last slice may hold one)."""
    return -(-prob.R * prob.S * prob.Cg // WGMMA_BK)


def slice_elements(prob: Problem) -> int:
    """Elements of one 128-byte shared row of the wgmma kernel: a slice of the reduction (64
    of float16 or bfloat16, 32 of float32)."""
    return 128 // prob.dtype.itemsize


def wgmma_stages(tile: WgmmaTile, options: Options, precision: str = "float32",
                 resident: int = 0) -> int:
    """The wgmma kernel's ring depth: the tile's, 1 without double buffering, for "3xtf32"
    the deepest that fits its doubled stages, and beside a resident filter of `resident`
    slices the deepest that fits with it."""
    if not options.double_buffer:
        return 1
    if resident:
        return tile.resident_stages(resident)
    return tile.three_stages() if precision == "3xtf32" else tile.STAGES


# A resident filter must leave a ring at least this deep: on cv8 (H200, float16 NHWC, batch 128,
# docs/hopper.md step 8) 256x128 with 2 stages beside it ran 357 TFLOPS against 402 without it,
# 128x128 with 4 stages 434 against 388.
RESIDENT_MIN_STAGES = 4


def resident_allowed(options: Options) -> bool:
    """Whether the options let a TMA plan keep its filter resident (and the ring it needs)."""
    return options.resident_filter and options.persistent and options.double_buffer


def tma_tiles(prob: Problem, tile: WgmmaTile) -> int:
    """Tiles (pixel tiles x filter tiles x groups) of a wgmma launch of `tile`."""
    return -(-prob.N * prob.P * prob.Q // tile.BM) * -(-prob.Kg // tile.BN) * prob.G


def resident_slices(prob: Problem, tile: WgmmaTile, options: Options, splits: int) -> int:
    """The slices of the filter a TMA plan of `tile` keeps in shared memory (0: none): where
    Options.resident_filter and the persistent grid are on, the launch is one work item a
    tile (no split-K) and has one filter tile (one group, K at most the tile's BN), and the
    filter tile leaves a ring of RESIDENT_MIN_STAGES or more."""
    if not resident_allowed(options):
        return 0
    slices = tma_slices(prob)
    if splits > 1 or prob.G > 1 or prob.Kg > tile.BN or \
            tile.resident_stages(slices) < RESIDENT_MIN_STAGES:
        return 0
    return slices


def tf32_refusal(prob: Problem, algorithm: str, options: Options, x_strides, x_aligned: bool,
                 w_aligned: bool, arch: int | None) -> str | None:
    """Why float32 on Tensor Cores (precision "tf32" or "3xtf32") cannot run `prob` (None: it
    can): it runs on the Hopper kernel with TMA copies, so compute capability 9.0, NHWC, fused
    windows, C/groups a multiple of 32, x and w 16-byte aligned (an NCHW problem runs on its
    NHWC twin: make_plan)."""
    if arch != HOPPER or not options.hopper:
        return "it runs on the Hopper kernel (compute capability 9.0, Options(hopper=True))"
    if algorithm not in ("auto", "im2win_fused"):
        return (f"it runs the fused kernel (algorithm 'auto' or 'im2win_fused'; NCHW through "
                f"its NHWC twin: 'auto' or 'im2win_nhwc'), not {algorithm!r}")
    if not (options.tma and options.conflict_free):
        return "it copies by TMA (Options(tma=True, conflict_free=True))"
    tile = WGMMA_TILES[choose_tf32_tile(prob.Kg, prob.N * prob.P * prob.Q, "tf32")]
    if tma_args(prob, tile, x_strides, x_aligned, w_aligned) is None:
        channels = tma_box_channels(prob)
        if prob.layout == "NHWC" and channels and x_aligned and w_aligned:
            from im2win.cuda.tma import im2col_args
            try:                        # what im2col_args refused (a stride, corner, offset)
                im2col_args(prob, x_strides, channels, tile.BM)
            except ValueError as err:
                return f"it copies by TMA, and {err}"
        return (f"it copies by TMA: NHWC, C/groups a multiple of {slice_elements(prob)}, x and w "
                f"16-byte aligned (got layout {prob.layout}, C/groups={prob.Cg})")
    return None


def tf32_plan(prob: Problem, algorithm: str, options: Options, tile: str | None, x_strides,
              x_aligned: bool, w_aligned: bool, arch: int | None, precision: str) -> Plan:
    """float32 on the wgmma kernel's Tensor Cores: one TF32 product ("tf32", lower
    precision, as PyTorch's default for convolutions) or three ("3xtf32": big*small +
    small*big + big*big of each operand's TF32 split, FP32-accurate)."""
    refusal = tf32_refusal(prob, algorithm, options, x_strides, x_aligned, w_aligned, arch)
    if refusal:
        raise ValueError(f"precision={precision!r} cannot run this problem: {refusal}")
    tiles = THREE_TF32_TILES if precision == "3xtf32" else tuple(WGMMA_TILES)
    if tile is not None and tile not in tiles:
        raise ValueError(f"tile must be one of {', '.join(tiles)} for precision="
                         f"{precision!r}, got {tile!r}")
    chosen = WGMMA_TILES[tile or choose_tf32_tile(prob.Kg, prob.N * prob.P * prob.Q, precision)]
    geo = geometry(prob, True, max(prob.N, 1), x_strides)
    geo = geo._replace(redp=-(-prob.reduction // slice_elements(prob)) * slice_elements(prob))
    args, workspace = tma_args(prob, chosen, x_strides, x_aligned, w_aligned), 0
    if precision == "3xtf32":   # the filter split once a call (tf32_split): 2K rows
        args = args._replace(w_dims=(prob.reduction, 2 * prob.K))
        workspace = 2 * prob.K * prob.reduction * prob.dtype.itemsize
    return Plan("im2win_fused", chosen, options, "im2win_wgmma",
                wgmma_tf32_kernel_name(chosen, options, precision), max(prob.N, 1), geo, b"",
                workspace, args, precision=precision)


def wgmma_tf32_kernel_name(tile: WgmmaTile, options: Options, precision: str) -> str:
    return f"im2win_wgmma_tf32<{tile.BM}, {tile.BN}, {wgmma_stages(tile, options, precision)}, " \
           f"{str(options.persistent).lower()}, {str(precision == '3xtf32').lower()}>"


SPLIT_ITEMS = 128        # split-K aims at this many work items (about one per SM of an H200)
# ... and leaves at least this many 64-deep slices of the reduction per range, on average. A
# split costs a second launch and the partial sums' buffer: about 9 us of host time a call on the
# H200 (25.6 against 16.2 for one launch). With 3, 18 float16 NHWC network layers split (batch
# 32, tools/split_probe.py): replayed from a CUDA graph split-K took their geometric mean against
# cuDNN only from 0.59x to 0.57x, one call at a time it lowered it from 0.81x to 0.70x; it saved
# GPU time only on the deep 3x3 layers (resnet50.18, 36 slices: 27.4 -> 21.3 us; resnet50.22, 72
# slices: 27.7 -> 21.8), not on the 1x1 layers of 15 to 32 slices (resnet50.21: 15.0 -> 15.4).
SPLIT_MIN_SLICES = 18
SPLITS = (2, 4, 8)       # the instantiated counts


def split_count(prob: Problem, tile: WgmmaTile, options: Options,
                workspace_limit: int | None = None) -> int:
    """Split-K's ranges per tile for a TMA plan of `tile`: where the tiles are fewer than
    SPLIT_ITEMS, the largest of SPLITS that does not pass SPLIT_ITEMS work items, leaves
    SPLIT_MIN_SLICES slices per range on average (ranges of ceil(slices / splits), the last
    ones shorter or empty: their partial sums are zeros) and whose partial sums fit
    `workspace_limit`; 1 where none does, or with the persistent grid, the ring or
    Options.split_k off."""
    if not (options.split_k and options.persistent and options.double_buffer):
        return 1
    tiles, slices = tma_tiles(prob, tile), tma_slices(prob)
    best = 1
    for splits in SPLITS:
        fits = workspace_limit is None or split_workspace(prob, splits) <= workspace_limit
        if tiles * splits <= SPLIT_ITEMS and slices >= splits * SPLIT_MIN_SLICES and fits:
            best = splits
    return best


def split_workspace(prob: Problem, splits: int) -> int:
    """Bytes of split-K's FP32 partial sums: splits x N*P*Q x K."""
    return splits * prob.N * prob.P * prob.Q * prob.K * 4


def wgmma_split_kernel_name(prob: Problem, tile: WgmmaTile, options: Options, splits: int) -> str:
    return split_kernel_name(CUDA_TYPES[prob.dtype.name][0], tile, wgmma_stages(tile, options),
                             splits, half_boxes(prob))


def split_kernel_name(T: str, tile: WgmmaTile, stages: int, splits: int, half: bool) -> str:
    return f"im2win_wgmma_tma_split<{T}, {tile.BM}, {tile.BN}, {stages}, {splits}, " \
           f"{_cpp(half)}>"


def half_boxes(prob: Problem) -> bool:
    """Whether a TMA launch copies x in boxes of 32 channels, two a slice (kHalf)."""
    return tma_box_channels(prob) == 32


PING_PONG_TILES = 4096   # ping-pong from this many tiles a launch (about 31 an SM of an H200)


def ping_pong(prob: Problem, tile: WgmmaTile, options: Options) -> bool:
    """Whether a TMA launch of `tile` (no split-K) runs its consumers in turn, each on whole
    tiles: Options.ping_pong, the persistent grid, a tile whose accumulators fit one consumer
    (BM/64 * BN <= 256: 128x128 and 256x64), and at least PING_PONG_TILES tiles. Read off
    tools/wgmma_dev.py on the H200 (float16 NHWC, batch 128, TFLOPS with / without, two runs
    agreeing within 2%) once the epilogue stored whole sectors (docs/hopper.md step 10): cv9
    (1458 tiles of 256x64) 316 / 335, cv10 (676 of 128x128) 385 / 407, cv11 (288) 354 / 388,
    cv8 (12100) 497-502 / 488-506; the ablation had cv4 (5941 of 256x64) 2% faster with it.
    Before that epilogue (step 8) it paid from about one tile an SM: cv10 345 / 319."""
    return ping_pong_allowed(tile, options) and tma_tiles(prob, tile) >= PING_PONG_TILES


def ping_pong_allowed(tile: WgmmaTile, options: Options) -> bool:
    """Whether the options and the tile let a TMA launch run its consumers in turn."""
    return options.ping_pong and options.persistent and tile.BM // 64 * tile.BN <= 256


def _cpp(flag: bool) -> str:
    return "true" if flag else "false"


def wgmma_tma_kernel_name(prob: Problem, tile: WgmmaTile, options: Options,
                          resident: int = 0) -> str:
    """The TMA kernel of a plan (`resident`: its filter slices kept in shared memory)."""
    return tma_kernel_name(CUDA_TYPES[prob.dtype.name][0], tile,
                           wgmma_stages(tile, options, resident=resident), options.persistent,
                           bool(resident), ping_pong(prob, tile, options), half_boxes(prob))


def tma_kernel_name(T: str, tile: WgmmaTile, stages: int, persistent: bool, resident: bool,
                    pingpong: bool, half: bool) -> str:
    return f"im2win_wgmma_tma<{T}, {tile.BM}, {tile.BN}, {stages}, {_cpp(persistent)}, " \
           f"{_cpp(resident)}, {_cpp(pingpong)}, {_cpp(half)}>"


MULTICAST_CTAS = 2     # a cluster's CTAs sharing each filter slice (multicast_ctas)
# ... and only where the launch has at least this many work items (docs/hopper.md step 34, an
# H100: cv4's 5941 tiles of 256x64, 45 waves, +6%; cv10's 676 of 128x128, 5 waves, -7%)
MULTICAST_MIN_TILES = 2048


def multicast_ctas(prob: Problem, tile: WgmmaTile, options: Options, resident: int) -> int:
    """The CTAs of a cluster that share each filter slice of a TMA plan of `tile` without split-K
    (im2win_wgmma_tma_mc: each copies BN / MULTICAST_CTAS rows of it into all of them), or 1:
    where Options.multicast and the persistent grid are on and the launch has one filter tile
    (one group, K at most the tile's BN: every work item reads the same slices) that is not
    resident (a resident filter is read from L2 once a block already). cv4 (float16 NHWC, 5941
    tiles of 256x64, its 200 KB filter too large to stay beside the ring) read its filter
    again for every tile: 1.2 of the 6.2 GB its launch moved through an L2 at 85% of its
    throughput (docs/hopper.md step 11). Only where the launch has MULTICAST_MIN_TILES work
    items or more: the pair waits for its slower block, which costs a launch of few waves
    more than the L2 saves."""
    if not (options.multicast and options.persistent) or resident or prob.G > 1 or \
            prob.Kg > tile.BN:
        return 1
    if -(-max(prob.N, 1) * prob.P * prob.Q // tile.BM) < MULTICAST_MIN_TILES:
        return 1
    return MULTICAST_CTAS


def multicast_kernel_name(prob: Problem, tile: WgmmaTile, options: Options, cluster: int) -> str:
    return mc_kernel_name(CUDA_TYPES[prob.dtype.name][0], tile, wgmma_stages(tile, options),
                          ping_pong(prob, tile, options), half_boxes(prob), cluster)


def mc_kernel_name(T: str, tile: WgmmaTile, stages: int, pingpong: bool, half: bool,
                   cluster: int) -> str:
    return f"im2win_wgmma_tma_mc<{T}, {tile.BM}, {tile.BN}, {stages}, {_cpp(pingpong)}, " \
           f"{_cpp(half)}, {cluster}>"


def tensor_core_plan(family: Family, prob: Problem, algorithm: str, options: Options,
                     tile: str | None, chunk: int, workspace: int, geo: Geometry,
                     src_aligned: bool, w_aligned: bool, x_strides=None,
                     workspace_limit: int | None = None, tma: "TmaArgs | None" = None) -> Plan:
    """The Tensor-Core plan of `family` (float16, bfloat16): the reduction padded (by
    predication) to a multiple of the family's slice once. `src_aligned`, `w_aligned`: whether
    the window operand's and the filter's sources start 16-byte aligned; `workspace_limit`
    bounds split-K's partial sums; `tma`: the TMA arguments of `tile` where the caller has
    them already (None: worked out here)."""
    if tile is not None and tile not in family.tiles:
        raise ValueError(f"tile must be one of {', '.join(family.tiles)} on Tensor Cores, got "
                         f"{tile!r}")
    chosen = family.tiles[tile or family.choose(prob)]
    if family is MMA:
        check_grid(prob, chosen)
    fused = algorithm == "im2win_fused"
    geo = geo._replace(redp=-(-prob.reduction // family.slice) * family.slice)
    taps = table_bytes(prob, geo, not fused, options.index_tables)
    vector_w = w_aligned and prob.reduction % 8 == 0
    vector_x = src_aligned and contiguous_runs_of_8(prob, geo)
    if tma is None and family is WGMMA and fused:
        tma = tma_plan(prob, chosen, options, x_strides, src_aligned, w_aligned)
    if tma is not None:         # the TMA computes every address: no table
        splits = split_count(prob, chosen, options, workspace_limit)
        if splits > 1:
            return Plan(algorithm, chosen, options, family.file,
                        wgmma_split_kernel_name(prob, chosen, options, splits), chunk, geo, b"",
                        split_workspace(prob, splits), tma, splits=splits)
        resident = resident_slices(prob, chosen, options, splits)
        cluster = multicast_ctas(prob, chosen, options, resident)
        if cluster > 1:             # each CTA's TMA box: its share of the filter slice
            return Plan(algorithm, chosen, options, family.file,
                        multicast_kernel_name(prob, chosen, options, cluster), chunk, geo, b"",
                        workspace, tma._replace(w_box=(tma.w_box[0], chosen.BN // cluster)),
                        cluster=cluster)
        return Plan(algorithm, chosen, options, family.file,
                    wgmma_tma_kernel_name(prob, chosen, options, resident), chunk, geo, b"",
                    workspace, tma, resident=resident)
    name = family.name(prob, fused, chosen, options, bool(taps), vector_w, vector_x)
    return Plan(algorithm, chosen, options, family.file, name, chunk, geo, taps, workspace)


@functools.lru_cache(maxsize=None)      # of the planner's constants as first called: tests
def specializations() -> tuple[tuple[str, str], ...]:   # that patch them use instantiable()
    """Every (file, name expression) CI compiles (tests/test_kernel_sources.py: for sm_90, or
    sm_90a for FILE_ARCH's files, and a chunk of each file for sm_80 too): what is reachable,
    every kernel the planner picks for the twelve benchmark layers and for the networks'
    convolutions, in every dtype and layout, on sm_80 and sm_90, under the full option set
    (`reachable_specializations`), and every kernel of the gradients (their few tiles:
    `gradient_specializations`); and of `instantiable()`, the full list of what the planner can
    instantiate, a subset holding every value of each template argument and every pair of two
    arguments' values that list holds (`pairwise_cover`).
    The rest of the list (a tile of the autotuner in a form no layer takes, an ablation's
    kernel with one optimisation off) differs from those compiled only in values each
    compiled beside every other argument's every value (not every combination of three or
    more: a fault needing three would pass CI), and compiles where it runs (NVRTC), as every
    kernel does (tools/prewarm.py --ablation compiles the ablation's in parallel first). The
    whole list (2967 on 9a0c1b9) had made CI's run twice its 30 minutes."""
    full = instantiable()
    return tuple(sorted(set(pairwise_cover(full)) | reachable_specializations(full) |
                        gradient_specializations()))


def template_arguments(expr: str) -> tuple[str, tuple[str, ...]]:
    """A name expression's template and its arguments: ("f", ("a", "b")) for "f<a, b>"."""
    name, _, rest = expr.partition("<")
    if "<" in rest or "(" in rest or (rest and not rest.endswith(">")):
        raise ValueError(f"not a flat template name: {expr}")   # a comma split would be wrong
    return name, tuple(a.strip() for a in rest[:-1].split(",")) if rest else ()


def pairwise_cover(names: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """A subset of `names` in which, for each template of each file, every value of each
    argument and every pair of values of two arguments that `names` holds occurs (greedy:
    each pick holds the most pairs not yet held; in sorted order, so always the same)."""
    def pairs(args):
        return {(i, args[i], j, args[j]) for i, j in itertools.combinations(range(len(args)), 2)
                } | {(i, args[i], -1, "") for i in range(len(args))}
    groups: dict = {}
    for file, expr in sorted(names):
        name, args = template_arguments(expr)
        groups.setdefault((file, name, len(args)), []).append(((file, expr), pairs(args)))
    chosen = []
    for items in groups.values():
        needed = set().union(*(held for _, held in items))
        if not needed:                      # a name without arguments: itself
            chosen += [name for name, _ in items]
        while needed:
            pick, held = max(items, key=lambda item: len(item[1] & needed))
            chosen.append(pick)
            needed -= held
    return chosen


def reachable_specializations(full: list[tuple[str, str]]) -> set:
    """(file, name) of every kernel the planner picks, its plan's and its inner plan's (an
    NCHW twin's), for the benchmark layers (batch 128: "auto", "im2win" and "im2win_fused")
    and the networks' convolutions (batch 32: "auto" and "im2win_fused"), contiguous, in
    every dtype and layout (float32 also at the Tensor-Core precisions), on sm_80 and sm_90,
    under the full set (and with mma.sync's on Hopper: Options(hopper=False)); each is in
    `full`."""
    from im2win.layers import LAYERS
    from im2win.networks import NETWORKS
    from im2win.problem import make_problem
    listed = set(full)
    sets = (Options(), Options(hopper=False))
    problems = [(layer.shapes(128, layout), dict(stride=layer.stride), layout,
                 ("auto", "im2win", "im2win_fused"))
                for layer in LAYERS.values() for layout in ("NCHW", "NHWC")]
    problems += [(conv.shapes(32, layout), conv.kwargs, layout, ("auto", "im2win_fused"))
                 for net in NETWORKS.values() for conv in net for layout in ("NCHW", "NHWC")]
    out = set()
    for ((x_shape, w_shape), kwargs, layout, algorithms), dtype in itertools.product(
            problems, CUDA_TYPES):
        x, w = (np.lib.stride_tricks.as_strided(np.empty(1, dtype_of(dtype)), shape, [0] * 4)
                for shape in (x_shape, w_shape))
        prob = make_problem(x, w, layout=layout, **kwargs)
        C, H, W = prob.C, prob.H, prob.W
        strides = (C * H * W, H * W, W, 1) if layout == "NCHW" else (H * W * C, 1, W * C, C)
        precisions = ("float32", "tf32", "3xtf32") if dtype == "float32" else ("float32",)
        for algorithm, options, arch, precision in itertools.product(
                algorithms, sets, (80, HOPPER), precisions):
            try:
                plan = make_plan(prob, x_strides=strides, w_aligned=True, options=options,
                                 arch=arch, algorithm=algorithm, precision=precision)
            except ValueError:          # an algorithm or precision that does not take it
                continue
            for part in (plan, plan.inner):
                if part is not None and part.kernel is not None:
                    out.add((part.file, part.kernel))
    if not out <= listed:
        raise AssertionError(f"planned but not instantiable: {sorted(out - listed)[:4]}")
    return out


def instantiable() -> list[tuple[str, str]]:
    """The (file, name expression) list of what the planner can instantiate, bfloat16 under
    the full optimisation set only, the 16-byte-copy and table forms those of `switch_forms`
    (CI compiles `specializations()` of it).

    For every dtype, layout and window mode, every tile the
    planner picks under every optimisation set (full, and each optimisation off alone), in
    the alignment and table forms of `switch_forms` (16-byte filter loads depend on
    alignment, the reduction table on whether the offsets fit 32 bits); every other tile
    (autotuning) with the full set; and for float16 and bfloat16 every Tensor-Core tile of both
    Tensor-Core kernels (mma.sync, and wgmma for sm_90a) under the full set, in the forms of
    `switch_forms` (16-byte copies of either operand, tables), and for float16 the tiles the
    planner picks under each optimisation of that kernel off alone. bfloat16 differs from
    float16 in its MMA instruction and conversions, which the full set compiles; a bfloat16
    call with an optimisation off (the ablation runs float16) is compiled where it runs
    (NVRTC), as every kernel is.
    """
    from im2win.cuda.tuning import TILES, choose_tile
    out = set()
    for dtype, (T, Acc) in CUDA_TYPES.items():
        for layout in ("NCHW", "NHWC"):
            planned = {choose_tile(Kg, pixels, reduction, layout, dtype)
                       for Kg in (32, 64, 96, 128) for pixels in (1, 1 << 21)
                       for reduction in (27, 300, 5000)}
            prob = Problem(layout=layout, dtype=np.dtype(dtype_of(dtype)), N=1, C=1, H=1, W=1,
                           K=1, R=1, S=1, G=1, sh=1, sw=1, dh=1, dw=1, pt=0, pb=0, pl=0, pr=0,
                           has_bias=False)
            nhwc = str(layout == "NHWC").lower()
            out.add(("direct", f"direct_conv<{T}, {Acc}, {nhwc}>"))
            vector = max(1, DEPTHWISE_VECTOR_BYTES // np.dtype(dtype_of(dtype)).itemsize)
            vectors = {1, vector} if layout == "NHWC" else {1}
            windows = [(0, 0, DEPTHWISE_QT)] + [(S, sw, qt) for (S, sw), qt in
                                               DEPTHWISE_WINDOWS.items()]
            for vec, window in itertools.product(vectors, windows):
                for group in [1] + [g for g in DEPTHWISE_GROUPS if layout == "NHWC" and
                                    vec % g == 0]:
                    out.add(("depthwise", depthwise_kernel_name(dtype, layout, vec, window,
                                                                group)))
            if layout == "NHWC":
                for (S, sw), qt in DEPTHWISE_TILE_QT.items():
                    out.add(("depthwise", depthwise_tile_kernel_name(
                        T, Acc, S, sw, qt, DEPTHWISE_TILE_THREAD_BYTES)))
            if layout == "NHWC" and dtype in TENSOR_CORE_DTYPES:
                for R in DEPTHWISE_MMA_FORMS:
                    out.add(("depthwise", depthwise_mma_kernel_name(T, R)))
                    out.add(("depthwise", depthwise_mma_small_kernel_name(
                        T, R, DEPTHWISE_MMA_SMALL_CB)))
            for (S, sw), (qt, tv) in DEPTHWISE_ROWS.items():
                tv = min(tv, 16 // prob.dtype.itemsize) if layout == "NHWC" else 1
                # and in NHWC with 2 rows copied ahead (DEPTHWISE_ROWS_PREFETCH's first
                # candidate, which the GPU tests also force)
                for prefetch in {0, 2 if depthwise_rows_prefetch(prob, tv, 2) else 0}:
                    out.add(("depthwise", depthwise_rows_kernel_name(
                        T, Acc, tv, S, sw, qt, layout == "NCHW", prefetch)))
            if layout == "NCHW":
                for (S, sw), size in itertools.product(DEPTHWISE_ROWS_VEC_FORMS,
                                                       DEPTHWISE_ROWS_VEC_BYTES):
                    V = size // prob.dtype.itemsize
                    if depthwise_rows_vec_form(S, sw, V, prob.dtype.itemsize):
                        out.add(("depthwise", depthwise_rows_vec_kernel_name(
                            T, Acc, V, S, sw, DEPTHWISE_ROWS_VEC_AHEAD)))
            out.add(("window", f"image_to_window<{T}, {nhwc}>"))
            out.update(("layout", f"transpose_batched<{T}, {tr}>") for tr in TRANSPOSE_ROWS)
            out.add(("layout", f"transpose_narrow<{T}>"))
            out.add(("layout", f"transpose_taps<{T}>"))
            if prob.dtype.itemsize == 2:
                out.add(("layout", f"transpose_words<{T}>"))
            out.add(("layout", f"gather5<{T}>"))
            if dtype != "float64":                 # "im2win_columns" (wgrad's: 16-bit)
                out.add(("layout", f"window_columns<{T}>"))
            for fused in (False, True):
                if dtype in TENSOR_CORE_DTYPES:
                    out |= tensor_core_specializations(prob, fused)
                if dtype == "bfloat16":
                    continue
                for options in Options.ablations().values():
                    tiles = planned if options.micro_kernel else {NO_MICRO_KERNEL}
                    if options == Options():
                        tiles = [t for t in TILES if TILES[t].fits(accumulator_bytes(prob))]
                    for tile in tiles:
                        for vector_filter, _, tables in switch_forms(
                                False, options.index_tables, options == Options()):
                            out.add(("im2win_conv", kernel_name(
                                prob, fused, TILES[tile], options, tables, vector_filter)))
    out.add(("layout", "copy_rows"))
    for dtype in NARROW_DTYPES:
        forms = [(NARROW_STEM_CHANNELS, True, vx) for vx in (True, False)] + [
            (cp, False, vx) for cp in NARROW_GROUPS for vx in (True, False)]
        for cp, stem, vx in forms:
            for kb, nw, mts in narrow_blocks(cp, stem):
                for mt in mts:
                    out.add(("narrow", narrow_kernel_name(dtype, cp, kb, nw, mt, stem, vx)))
        for kb, nw, mts in narrow_blocks(NARROW_STEM_CHANNELS, True, dense=True):
            out.update(("narrow", narrow_kernel_name(dtype, 0, kb, nw, mt, True, True, True))
                       for mt in mts)
        out.update(("narrow_wgmma", narrow_wgmma_kernel_name(dtype, K))
                   for K in NARROW_WGMMA_FILTERS)
        out.update(("narrow_wgmma", narrow_rows_kernel_name(dtype, C)) for C in range(1, 5))
        out.update(("rows_wgmma", rows_wgmma_kernel_name(dtype, kb, stages, steps))
                   for kb in ROWS_WGMMA_BLOCKS for stages in ROWS_WGMMA_STAGES
                   for steps in ROWS_WGMMA_STEPS)
    out.update(("narrow_ffma", narrow_ffma_kernel_name(C, kb, wp, tn, nchw, resident, stage,
                                                       packed))
               for C in range(1, NARROW_FFMA_CHANNELS + 1)
               for kb, wp in NARROW_FFMA_FORMS.items() for tn in NARROW_FFMA_PIXELS
               for nchw in (False, True) for resident in (False, True)
               for stage in {False, nchw} for packed in {False, C > 1})
    for dtype in POINTWISE_DTYPES:
        for K in range(8, POINTWISE_MAX_K + 1, 8):
            out.add(("pointwise", pointwise_kernel_name(dtype, K)))
    for tile in FFMA_TILES.values():           # every tile, fully on and each switch off alone
        for name in ("full", "no_double_buffer", "no_conflict_free"):
            for nchw_y in (0, 1, 2):
                out.add(("im2win_ffma", ffma_kernel_name(tile, Options.ablations()[name],
                                                         nchw_y=nchw_y)))
        for strided in (False, True) if strided_tile(tile) else (False,):
            if strided:                        # x read in place (kStridedX), fully on
                out.update(("im2win_ffma", ffma_kernel_name(tile, Options(), nchw_y=nchw_y,
                                                            strided=True))
                           for nchw_y in (0, 1, 2))
            for splits in SPLITS:              # split-K, fully on, either x
                out.add(("im2win_ffma", ffma_kernel_name(tile, Options(), splits,
                                                         strided=strided)))
    for tile in map(FFMA_TILES.get, FFMA_EXACT_TILES):     # kExact, fully on, either x
        for strided in (False, True) if strided_tile(tile) else (False,):
            out.update(("im2win_ffma", ffma_kernel_name(tile, Options(), nchw_y=nchw_y,
                                                        strided=strided, exact=True))
                       for nchw_y in (0, 1, 2))
            out.update(("im2win_ffma", ffma_kernel_name(tile, Options(), splits,
                                                        strided=strided, exact=True))
                       for splits in SPLITS)
    # split-K's fixup on the planner's 16-deep tiles, fully on: each y form, either x,
    # checked or kExact, every count of ranges (where the planner takes it, ffma_fixup_pays,
    # is a measurement; the tests force the others; its 8-deep tiles' forms compile when
    # asked for: CI's time)
    for tile in (FFMA_TILES["f64x128"], FFMA_TILES["f96x128"]):
        out.update(("im2win_ffma", ffma_kernel_name(tile, Options(), splits, nchw_y=nchw_y,
                                                    strided=strided, exact=exact, fixup=True))
                   for splits in SPLITS for nchw_y in (0, 1, 2)
                   for strided in ((False, True) if strided_tile(tile) else (False,))
                   for exact in (False, True))
    for tile in FFMA_TILES.values():           # "im2win_runs": kTail, 16-deep slices
        if tile.BK == 16:
            out.update(("im2win_ffma", ffma_kernel_name(tile, Options(), nchw_y=nchw_y,
                                                        tail=True)) for nchw_y in (0, 1, 2))
            # fused (kTaps), either checked or kExact where the tile has that form
            out.update(("im2win_ffma", ffma_kernel_name(tile, Options(), nchw_y=nchw_y,
                                                        exact=exact, taps=True))
                       for nchw_y in (0, 1, 2)
                       for exact in {False, tile.name in FFMA_EXACT_TILES})
    out.add(("window", "window_runs<float>"))
    out.add(("im2win_ffma", "split_reduce<float>"))
    out.add(("im2win_ffma", "split_reduce_nchw<float>"))
    out |= tf32_specializations()
    out |= gradient_specializations()
    return sorted(out)


def gradient_specializations() -> set:
    """(file, name) of every kernel of the gradients (their few tiles: CI compiles them all)."""
    from im2win.cuda import dgrad, wgrad, wgrad_ffma
    return wgrad.specializations() | dgrad.specializations() | wgrad_ffma.specializations()


def switch_forms(vector_x: bool, tables: bool, full: bool) -> set:
    """The alignment and table forms CI compiles of one tile, as (16-byte copies of the
    filter, 16-byte copies of the window where the layout has them, index tables): every
    operand aligned (C/G a multiple of 8), none (odd views), the filter alone (a stem whose
    R*S*C is a multiple of 8 and C is not: ConvNeXt's), with tables as the option set has
    them; under the full set also the aligned form without tables (offsets past 32 bits).
    Not compiled: the window aligned and the filter not, which takes a misaligned view of
    the filter (its R*S*C/G is a multiple of 8 wherever C/G is), and the rest of the
    product without tables; such a call compiles its kernel where it runs (NVRTC), as every
    call does, from paths these forms compile. The full product cost CI several minutes."""
    forms = {(True, vector_x, tables), (True, False, tables), (False, False, tables)}
    if full and tables:
        forms.add((True, vector_x, False))
    return forms


def tensor_core_specializations(prob: Problem, fused: bool) -> set:
    """The mma.sync and wgmma instantiations of one (dtype, layout, window mode): every tile
    in every form of `switch_forms` (16-byte copies of the filter, and in NHWC of the window;
    tables) under the full option set (autotuning reaches every tile under it); and for
    float16 each tile the planner can pick (`Family.choose`) under each optimisation off
    alone, in its forms with tables as that set says."""
    out = set()
    for hopper, family in ((False, MMA), (True, WGMMA)):
        sets = Options.ablations(tensor_cores=True, hopper=hopper)
        picked = {family.choose(dataclasses.replace(prob, K=Kg, C=reduction, N=pixels))
                  for Kg in (16, 32, 64, 96, 128, 256) for reduction in (27, 300, 5000)
                  for pixels in (1, 1 << 21)}
        for label, options in sets.items():
            if label != "full" and prob.dtype.name != "float16":
                continue      # bfloat16's own code is its MMA instruction: the full set has it
            for tile in (family.tiles[name] for name in family.tiles
                         if label == "full" or name in picked):
                for vector_w, vector_x, tables in switch_forms(
                        prob.layout == "NHWC", options.index_tables, label == "full"):
                    out.add((family.file, family.name(prob, fused, tile, options, tables,
                                                      vector_w, vector_x)))
                if hopper and fused and prob.layout == "NHWC" and options.tma:
                    T = CUDA_TYPES[prob.dtype.name][0]
                    resident = resident_allowed(options)
                    pingpongs = {False, ping_pong_allowed(tile, options)}
                    # and every ring a resident filter leaves, both box widths
                    for pingpong, half in itertools.product(pingpongs, (False, True)):
                        out.add((family.file, tma_kernel_name(T, tile, wgmma_stages(
                            tile, options), options.persistent, False, pingpong, half)))
                        for stages in range(RESIDENT_MIN_STAGES,
                                            tile.STAGES + 1 if resident else 0):
                            out.add((family.file, tma_kernel_name(T, tile, stages, True, True,
                                                                  pingpong, half)))
                        # the multicast filter's (both 16-bit types: "auto" takes it where a
                        # launch has many tiles)
                        if options.persistent:
                            out.add((family.file, mc_kernel_name(
                                T, tile, wgmma_stages(tile, options), pingpong, half,
                                MULTICAST_CTAS)))
                    if options.split_k and options.persistent and options.double_buffer:
                        for splits, half in itertools.product(SPLITS, (False, True)):
                            out.add((family.file, split_kernel_name(
                                T, tile, wgmma_stages(tile, options), splits, half)))
        if hopper and fused and prob.layout == "NHWC":
            for reduce in ("split_reduce", "split_reduce_nchw"):
                out.add((WGMMA.file, f"{reduce}<{CUDA_TYPES[prob.dtype.name][0]}>"))
    return out


def tf32_specializations() -> set:
    """float32 on the wgmma kernel (NHWC, fused, TMA): every tile in both precisions under
    the full option set and each Hopper switch off alone that keeps TMA."""
    out = set()
    for options in Options.ablations(tensor_cores=True, hopper=True).values():
        if options.hopper and options.tma and options.conflict_free:
            for name, tile in WGMMA_TILES.items():
                for precision in ("tf32", "3xtf32"):
                    if precision == "tf32" or name in THREE_TF32_TILES:
                        out.add(("im2win_wgmma", wgmma_tf32_kernel_name(tile, options,
                                                                        precision)))
    out.add(("im2win_wgmma", "tf32_split"))
    return out


def dtype_of(name: str):
    """The NumPy dtype of a CUDA_TYPES name (bfloat16 from ml_dtypes)."""
    if name == "bfloat16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return name


def kernel_family(file: str) -> str:
    """The kernel file that `file` is, or is a copy of: "im2win_ffma__head" (a variant that
    tools/ffma_dev.py times against the file in the tree, in one process; never shipped) is
    im2win_ffma's, with its headers and target."""
    return file.partition("__")[0]


def source(file: str) -> str:
    """common.cuh (then gemm.cuh for the GEMM kernels, hopper.cuh for the sm_90a ones) followed
    by `file`.cu: the exact text NVRTC (at run time) and nvcc (in CI) compile. Concatenated
    rather than #included, since CuPy's cache key ignores includes."""
    family = kernel_family(file)
    parts = (["common.cuh"] + (["gemm.cuh"] if family in GEMM_FILES else []) +
             (["hopper.cuh"] if family in HOPPER_FILES else []) + [f"{file}.cu"])
    return "\n".join((KERNEL_DIR / part).read_text() for part in parts)


def instantiating_source(file: str, names: list[str]) -> str:
    """source(file) with the named instantiations forced (by taking their addresses), for nvcc
    to compile without a launch (CI's compile test, tools/sass.py)."""
    return source(file) + "\n" + "\n".join(f"auto* instance_{i} = &{name};"
                                          for i, name in enumerate(names)) + "\n"
