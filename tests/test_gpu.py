"""im2win.conv2d on CuPy arrays against the float64 reference. Skipped without a visible GPU."""

import dataclasses
import itertools

import ml_dtypes
import numpy as np
import pytest

import im2win
from helpers import random_arrays, to_layout
from im2win import reference
from im2win.cuda import TILES, Options
from im2win.cuda.plan import SPLITS
from im2win.cuda.tuning import FFMA_TILES, MMA_TILES, WGMMA_TILES
from im2win.problem import make_problem
from im2win.testing import allowed_error, assert_close, relative_error

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy") if im2win.cuda.is_available() else None

AWKWARD = [  # x (N, C, H, W), w (K, C/G, R, S), keyword arguments
    ((3, 5, 13, 17), (7, 5, 3, 3), dict(padding=1)),
    ((2, 8, 11, 9), (67, 8, 3, 2), dict(padding=(0, 1))),             # red % 8 == 0, K tail
    ((2, 6, 19, 11), (10, 3, 3, 2), dict(groups=2, stride=(2, 1), dilation=(1, 2),
                                         padding=((2, 0), (1, 3)))),
    ((1, 3, 23, 23), (131, 3, 5, 5), dict(stride=4)),                 # K tail, stride > 1
    ((5, 8, 7, 5), (9, 8, 7, 5), dict()),                             # P = Q = 1
    ((2, 4, 9, 9), (4, 1, 3, 3), dict(groups=4, padding="same")),     # depthwise
    ((2, 3, 10, 2), (6, 3, 1, 1), dict(stride=2)),                    # 1x1, W < a vector
    ((1, 2, 17, 9), (3, 2, 5, 1), dict(stride=(3, 2), padding=(0, 4))),  # R > sh >= S
]
LAYOUTS = ["NCHW", "NHWC"]
WINDOWS = ["im2win", "im2win_fused"]


def run(x, w, b, layout, kwargs, dtype=np.float32, tile=None, **gpu_kwargs):
    """The GPU path into a NaN-poisoned out (`tile` forces a tile); assert it matches the
    float64 reference."""
    from im2win import cuda
    x, w = to_layout(layout, x.astype(dtype), w.astype(dtype))
    b = None if b is None else b.astype(dtype)
    prob = make_problem(x, w, b, layout=layout, **kwargs)
    out = cupy.full(prob.y_shape, np.nan, dtype)
    args = (cupy.asarray(x), cupy.asarray(w), None if b is None else cupy.asarray(b))
    if tile is None:
        y = im2win.conv2d(*args, layout=layout, out=out, **kwargs, **gpu_kwargs)
    else:
        y = cuda.conv2d(prob, *args, out, tile=tile, **gpu_kwargs)
    assert y is out
    ref = reference.conv2d(x.astype(np.float64), w.astype(np.float64),
                           None if b is None else b.astype(np.float64), layout=layout, **kwargs)
    assert_close(cupy.asnumpy(y), ref, dtype, prob.reduction)
    return y


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("x_shape, w_shape, kwargs", AWKWARD[:3])
def test_window_transform_is_the_reference_bit_for_bit(rng, layout, dtype, x_shape, w_shape,
                                                       kwargs):
    from im2win.cuda import launch
    x, w, _ = random_arrays(rng, x_shape, w_shape, w_shape[0], dtype)
    x, w = to_layout(layout, x, w)
    prob = make_problem(x, w, layout=layout, **kwargs)
    x_gpu = cupy.asarray(x)[:, ::-1][:, ::-1]                     # a strided view, same values
    x_win = launch.image_to_window(prob, x_gpu)
    expected = reference.image_to_window(x, prob.R, stride=prob.sh, dilation=prob.dh,
                                         padding=((prob.pt, prob.pb), (prob.pl, prob.pr)),
                                         layout=layout)
    np.testing.assert_array_equal(cupy.asnumpy(x_win), expected)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("algorithm", ["direct", "im2col_gemm"] + WINDOWS)
@pytest.mark.parametrize("x_shape, w_shape, kwargs", AWKWARD)
def test_every_algorithm_matches_reference(rng, layout, algorithm, x_shape, w_shape, kwargs):
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
    run(x, w, b, layout, kwargs, algorithm=algorithm)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("algorithm", WINDOWS)
@pytest.mark.parametrize("tile", list(TILES))
def test_every_tile_matches_reference(rng, layout, algorithm, tile):
    for x_shape, w_shape, kwargs in AWKWARD[:4]:
        x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
        run(x, w, b, layout, kwargs, tile=tile, algorithm=algorithm)
        if TILES[tile].fits(8):
            run(x, w, b, layout, kwargs, dtype=np.float64, tile=tile, algorithm=algorithm)


FFMA_CASES = [  # im2win_ffma.cu's problems: C/G a multiple of 8, awkward otherwise
    ((3, 16, 13, 11), (36, 16, 3, 3), dict(padding=1)),                 # K % 4 != 0 tail
    ((2, 32, 20, 17), (64, 32, 5, 3), dict(stride=2, padding=(2, 1))),
    ((1, 8, 15, 15), (130, 8, 3, 3), dict(dilation=2, padding=2)),      # filter tile tail
    ((2, 32, 9, 9), (48, 16, 3, 3), dict(groups=2, padding=1)),
    ((1, 24, 33, 30), (20, 24, 7, 7), dict(stride=3, padding=((3, 1), (0, 3)))),
    ((5, 64, 7, 5), (9, 64, 7, 5), dict()),                             # P = Q = 1
    ((2, 16, 11, 10), (192, 16, 3, 3), dict(padding=1)),                # two tiles of 96
]


@pytest.mark.parametrize("tile", list(FFMA_TILES))
@pytest.mark.parametrize("switch", ["full", "no_double_buffer", "no_conflict_free"])
def test_every_ffma_tile_matches_reference(rng, tile, switch):
    options = Options.ablations()[switch]
    ran = 0
    for x_shape, w_shape, kwargs in FFMA_CASES:
        if w_shape[1] % FFMA_TILES[tile].BK:
            continue
        x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
        run(x, w, b, "NHWC", kwargs, tile=tile, algorithm="im2win_fused", options=options)
        ran += 1
    assert ran >= 3


FFMA_SPLIT_CASES = [  # im2win_ffma.cu's split-K forced on small problems (the planner splits only
    # problems of a GFLOP or more): 2, 4 and 8 ranges, odd first slices, empty last ranges
    ((2, 64, 7, 7), (70, 64, 3, 3), dict(padding=1), "NHWC"),          # K % 4 != 0 tail
    ((2, 128, 5, 6), (36, 128, 3, 3), dict(padding=1, stride=(1, 2)), "NHWC"),
    ((1, 16, 9, 7), (64, 16, 3, 3), dict(), "NHWC"),                   # 9 slices of 16
    ((2, 48, 8, 8), (40, 48, 3, 3), dict(padding=1), "NCHW"),          # on the NHWC twin
    ((2, 48, 7, 7), (40, 48, 3, 3), dict(padding=1), "NCHW"),          # P*Q = 49: staged y
    ((2, 64, 9, 9), (64, 64, 3, 3), dict(), "NCHW"),                   # kExact, staged y
]


@pytest.mark.parametrize("fixup", [False, True])
@pytest.mark.parametrize("splits", SPLITS)
@pytest.mark.parametrize("x_shape, w_shape, kwargs, layout", FFMA_SPLIT_CASES)
def test_ffma_split_k_matches_reference_and_repeats_bit_for_bit(rng, monkeypatch, x_shape,
                                                                w_shape, kwargs, layout, splits,
                                                                fixup):
    """Split-K's ranges summed by split_reduce's second launch, or (Options.split_fixup) by
    each tile's last block in the kernel: the same additions in the same order, so the same
    bits, and the same bits on every call whichever block of a tile finishes last."""
    from im2win import cuda
    from im2win.cuda import launch, plan as planning
    monkeypatch.setattr(planning, "ffma_split_count", lambda *args, **kw: splits)
    monkeypatch.setattr(planning, "ffma_fixup_pays", lambda *args: True)   # every form
    algorithm = "im2win_nhwc" if layout == "NCHW" else "auto"
    options = Options(split_fixup=fixup)
    cuda._calls.clear()                                # plans remembered with other counts
    launch._executables.clear()
    try:
        x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
        y = run(x, w, b, layout, kwargs, algorithm=algorithm, options=options)
        xs, ws = (cupy.asarray(np.ascontiguousarray(a.astype(np.float32)))
                  for a in to_layout(layout, x, w))
        bs = cupy.asarray(b.astype(np.float32))
        prob = make_problem(xs, ws, bs, layout=layout, **kwargs)
        plan = cuda._plan(prob, xs, ws, algorithm, options, None)
        if layout == "NCHW":                           # the sum writes the NCHW y
            assert plan.inner.geometry.y_nchw == 1 and plan.x_in_place
            plan = plan.inner
        assert plan.file == "im2win_ffma" and plan.splits == splits and plan.fixup == fixup
        for _ in range(3 if fixup else 1):
            again = im2win.conv2d(xs, ws, bs, layout=layout, algorithm=algorithm,
                                  options=options, **kwargs)
            assert cupy.array_equal(y, again)          # the partial sums in a fixed order
        if fixup:                                      # the second launch's bits
            reduced = im2win.conv2d(xs, ws, bs, layout=layout, algorithm=algorithm,
                                    options=Options(split_fixup=False), **kwargs)
            assert cupy.array_equal(y, reduced)
    finally:
        cuda._calls.clear()
        launch._executables.clear()


FFMA_EXACT_CASES = [  # im2win_ffma.cu's kExact (no bounds predicates): unpadded, K/G a
    # multiple of the tile's filters; pixel tails, strides, a dilation; the last padded (checked)
    ((2, 64, 9, 8), (64, 64, 3, 2), dict(), True),
    ((1, 32, 13, 12), (128, 32, 3, 3), dict(stride=2), True),
    ((3, 16, 11, 10), (96, 16, 2, 3), dict(dilation=(2, 1), stride=(1, 2)), True),
    ((2, 64, 9, 8), (64, 64, 3, 3), dict(padding=(1, 0)), False),
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("x_shape, w_shape, kwargs, exact", FFMA_EXACT_CASES)
def test_ffma_exact_form_matches_reference(rng, fresh_plans, layout, x_shape, w_shape, kwargs,
                                           exact):
    """Where no window reaches the padding and the filters fill the tiles the planner takes
    kExact (no bounds predicates: a load outside x would read past it or what padding
    should zero), in NHWC and on the NCHW twin (reading x in place where its tile can);
    never with padding."""
    from im2win import cuda
    algorithm = "im2win_nhwc" if layout == "NCHW" else "auto"
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
    run(x, w, b, layout, kwargs, algorithm=algorithm)
    xs, ws = (cupy.asarray(np.ascontiguousarray(a.astype(np.float32)))
              for a in to_layout(layout, x, w))
    plan = cuda._plan(make_problem(xs, ws, layout=layout, **kwargs), xs, ws, algorithm, None,
                      None)
    while plan.inner is not None:
        plan = plan.inner
    args = plan.kernel.split("<")[1].rstrip(">").split(", ")   # kExact: the ninth (to_nchw)
    form = 9 if plan.kernel.startswith("im2win_ffma_to_nchw") else 8   # or eighth argument
    assert plan.file == "im2win_ffma" and (len(args) == form and args[-1] == "true") == exact


@pytest.fixture
def fresh_plans():
    """The plans remembered before the test forgotten (the float32 NCHW twins on
    im2win_ffma.cu read x in place, the strided form)."""
    from im2win import cuda
    from im2win.cuda import launch
    cuda._calls.clear()
    launch._executables.clear()
    yield
    cuda._calls.clear()
    launch._executables.clear()


def test_float32_nchw_on_its_nhwc_twin_matches_reference(rng, fresh_plans):
    """float32 NCHW through channels-last copies onto im2win_ffma.cu (what "auto" takes for
    large layers of 8 or more channels a group), and onto im2win_conv.cu where C/G is not.
    im2win_ffma_to_nchw writes the NCHW y: float4 along the pixels where P*Q is a multiple of
    4 and y 16-byte aligned (the last case: 144 pixels an image, a pixel tile's tail, 68
    filters), scalars where y is not (the last case into an out 4 bytes off 16);
    its kStaged form where P*Q is not a multiple of 4, through shared memory, 32
    consecutive pixels of a filter a warp store, across the images' boundaries (the others);
    with Options.nchw_epilogue off, a channels-last y transposed. x is read in place
    (kStridedX) but with Options.x_in_place off and on tiles whose strided x stores would
    conflict (plan.strided_tile)."""
    from im2win import cuda
    vector = ((3, 16, 12, 12), (68, 16, 3, 3), dict(padding=1))
    for x_shape, w_shape, kwargs in FFMA_CASES + AWKWARD[:1] + [vector]:
        x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
        for bias, options in ((b, None), (None, None), (b, Options(nchw_epilogue=False)),
                              (b, Options(x_in_place=False))):
            run(x, w, bias, "NCHW", kwargs, algorithm="im2win_nhwc", options=options)
    x, w, b = (cupy.asarray(a.astype(np.float32)) for a in random_arrays(rng, *vector[:2], 68))
    plan = cuda._plan(make_problem(x, w, padding=1), x, w, "im2win_nhwc", None, None)
    # 68 filters take tiles of 96 x 128 x 16, whose strided x stores would conflict: x copied
    assert plan.inner.kernel == "im2win_ffma_to_nchw<96, 128, 16, true, true, false, false>"
    assert not plan.x_in_place
    assert plan.inner.geometry.y_nchw == 1
    y_shape = make_problem(x, w, padding=1).y_shape
    size = int(np.prod(y_shape))
    buffer = cupy.full(size + 2, np.nan, cupy.float32)
    out = buffer[1:size + 1].reshape(y_shape)                     # contiguous, 4 bytes off 16
    assert out.data.ptr % 16 == 4
    y = im2win.conv2d(x, w, b, out=out, padding=1, algorithm="im2win_nhwc")
    assert y is out and cupy.isnan(buffer[0]) and cupy.isnan(buffer[-1])
    ref = reference.conv2d(cupy.asnumpy(x).astype(np.float64), cupy.asnumpy(w).astype(np.float64),
                           cupy.asnumpy(b).astype(np.float64), padding=1)
    assert_close(cupy.asnumpy(out), ref, np.float32, 16 * 9)


def test_ffma_reads_nchw_views_in_place(rng, fresh_plans):
    """The strided form (kStridedX) on views: an NCHW x sliced along C (channel runs of a
    larger array), along N at a step, starting 4 bytes past 16, along W (rows not evenly
    strided, which no copy reads), and an NHWC problem on the channels-last view of an NCHW
    array, each into a NaN-poisoned out, against the float64 reference; x is not written."""
    from im2win import cuda
    base = cupy.asarray(rng.standard_normal((6, 40, 13, 11)).astype(np.float32))
    w = cupy.asarray(rng.standard_normal((36, 16, 3, 3)).astype(np.float32))
    b = cupy.asarray(rng.standard_normal(36).astype(np.float32))
    flat = cupy.asarray(rng.standard_normal(2 * 16 * 13 * 11 + 1).astype(np.float32))
    shifted = flat[1:].reshape(2, 16, 13, 11)
    assert shifted.data.ptr % 16 == 4
    kwargs = dict(padding=(1, 2), stride=(1, 2))
    for x in (base[:, 8:24], base[::2, 3:19, :, :], shifted, base[:, 8:24, :, 1:10]):
        before = x.copy()
        prob = make_problem(x, w, b, **kwargs)
        plan = cuda._plan(prob, x, w, "im2win_nhwc", None, None)
        assert plan.algorithm == "im2win_nhwc" and plan.x_in_place
        out = cupy.full(prob.y_shape, np.nan, cupy.float32)
        im2win.conv2d(x, w, b, out=out, algorithm="im2win_nhwc", **kwargs)
        ref = reference.conv2d(*(cupy.asnumpy(a).astype(np.float64) for a in (x, w, b)),
                               **kwargs)
        assert_close(cupy.asnumpy(out), ref, np.float32, prob.reduction)
        assert cupy.array_equal(x, before)
    # Under a workspace limit that x's copy would exceed.
    from im2win.cuda.plan import nhwc_workspace
    x = base[:, 8:24]
    prob = make_problem(x, w, b, **kwargs)
    limit = nhwc_workspace(prob) - 1
    assert cuda._plan(prob, x, w, "im2win_nhwc", None, limit).x_in_place
    y = im2win.conv2d(x, w, b, algorithm="im2win_nhwc", workspace_limit=limit, **kwargs)
    ref = reference.conv2d(*(cupy.asnumpy(a).astype(np.float64) for a in (x, w, b)), **kwargs)
    assert_close(cupy.asnumpy(y), ref, np.float32, prob.reduction)
    view = base[:, 8:24].transpose(0, 2, 3, 1)                    # NHWC, channels apart
    w_nhwc = cupy.ascontiguousarray(w.transpose(0, 2, 3, 1))
    prob = make_problem(view, w_nhwc, layout="NHWC", **kwargs)
    plan = cuda._plan(prob, view, w_nhwc, "auto", None, None)
    assert plan.file == "im2win_ffma" and plan.kernel.endswith(", true>")
    y = im2win.conv2d(view, w_nhwc, layout="NHWC", **kwargs)
    ref = reference.conv2d(cupy.asnumpy(view).astype(np.float64),
                           cupy.asnumpy(w_nhwc).astype(np.float64), layout="NHWC", **kwargs)
    assert_close(cupy.asnumpy(y), ref, np.float32, prob.reduction)


def test_ffma_takes_strided_views_and_falls_back_where_it_cannot(rng):
    """A view of x with strides that are multiples of 4 runs on im2win_ffma.cu; one that
    starts 4 bytes in (not 16-byte aligned) on im2win_conv.cu; both match the reference."""
    from im2win import cuda
    x = rng.standard_normal((2, 11, 12, 40)).astype(np.float32)
    w = rng.standard_normal((20, 3, 3, 16)).astype(np.float32)
    base = cupy.asarray(x)
    for view, file in ((base[:, 1:, ::2, 8:24], "im2win_ffma"),
                       (base[:, :, :, 1:17], "im2win_conv")):
        prob = make_problem(view, w, layout="NHWC", padding=1)
        assert cuda._plan(prob, view, cupy.asarray(w), "auto", None, None).file == file
        y = im2win.conv2d(view, cupy.asarray(w), layout="NHWC", padding=1)
        ref = reference.conv2d(cupy.asnumpy(view).astype(np.float64), w.astype(np.float64),
                               layout="NHWC", padding=1)
        assert_close(cupy.asnumpy(y), ref, np.float32, prob.reduction)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("algorithm", WINDOWS)
@pytest.mark.parametrize("switch", list(Options.ablations()))
def test_every_optimisation_switch_matches_reference(rng, layout, algorithm, switch):
    for x_shape, w_shape, kwargs in AWKWARD:
        x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
        run(x, w, b, layout, kwargs, algorithm=algorithm, options=Options.ablations()[switch])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("algorithm", WINDOWS + ["direct"])
@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_other_dtypes_match_reference(rng, layout, algorithm, dtype):
    for x_shape, w_shape, kwargs in AWKWARD[:4]:
        x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
        y = run(x, w, b, layout, kwargs, dtype=dtype, algorithm=algorithm)
        assert y.dtype == dtype


TENSOR_CORE_CASES = AWKWARD[:4] + [
    ((2, 16, 11, 9), (24, 16, 3, 3), dict(padding=1)),                 # 16-byte B copies (NHWC)
    ((3, 32, 9, 10), (40, 16, 3, 2), dict(groups=2, stride=(2, 1), padding=((1, 0), (2, 1)))),
    # C = 3: runs of S*C (NHWC) cut by chunks of 8, pixels inside x and at its edges
    ((2, 3, 20, 21), (17, 3, 7, 7), dict(stride=2, padding=3)),
    ((2, 3, 15, 16), (8, 3, 3, 3), dict(dilation=(2, 2), padding=2)),     # runs of C only
]


def hopper() -> bool:
    from im2win.cuda import compute_capability
    return compute_capability(cupy.cuda.runtime.getDevice()) == 90


def skip_unless_hopper(tile):
    if tile in WGMMA_TILES and not hopper():
        pytest.skip("the wgmma kernel needs compute capability 9.0")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("algorithm", WINDOWS)
@pytest.mark.parametrize("tile", list(MMA_TILES) + list(WGMMA_TILES))
def test_every_tensor_core_tile_matches_reference(rng, layout, algorithm, tile):
    skip_unless_hopper(tile)
    for x_shape, w_shape, kwargs in TENSOR_CORE_CASES:
        x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
        run(x, w, b, layout, kwargs, dtype=np.float16, tile=tile, algorithm=algorithm)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("algorithm", WINDOWS)
@pytest.mark.parametrize("switch", list(Options.ablations(tensor_cores=True)) + ["no_tc"])
def test_every_tensor_core_switch_matches_reference(rng, layout, algorithm, switch):
    options = Options(tensor_cores=False) if switch == "no_tc" else \
        Options.ablations(tensor_cores=True)[switch]
    for x_shape, w_shape, kwargs in TENSOR_CORE_CASES:
        x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
        run(x, w, b, layout, kwargs, dtype=np.float16, algorithm=algorithm, options=options)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("algorithm", WINDOWS)
@pytest.mark.parametrize("switch", list(Options.ablations(hopper=True)))
@pytest.mark.parametrize("tile", ["wg128x128", "wg256x64"])
def test_every_hopper_switch_matches_reference(rng, layout, algorithm, switch, tile):
    skip_unless_hopper(tile)
    for x_shape, w_shape, kwargs in TENSOR_CORE_CASES:
        x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
        run(x, w, b, layout, kwargs, dtype=np.float16, tile=tile, algorithm=algorithm,
            options=Options.ablations(hopper=True)[switch])


TMA_CASES = [  # NHWC, C/G a multiple of 64: the wgmma kernel's TMA copies (Options.tma)
    ((2, 64, 13, 11), (70, 64, 3, 3), dict(padding=1)),                       # K tail
    ((3, 128, 10, 9), (96, 128, 3, 2), dict(stride=2, dilation=(1, 2),
                                             padding=((2, 0), (1, 3)))),     # corners
    ((2, 128, 7, 7), (130, 64, 1, 1), dict(groups=2)),                        # groups, 1x1
    ((5, 64, 5, 6), (64, 64, 5, 5), dict(padding=2)),                          # taps off x
]


HALF_BOX_CASES = [  # NHWC, C/G a multiple of 32, not of 64: TMA boxes of 32 channels, two a slice
    ((2, 32, 13, 11), (70, 32, 3, 3), dict(padding=1)),                  # 9 units: a lone last
    ((3, 96, 10, 9), (96, 96, 3, 2), dict(stride=2, dilation=(1, 2),
                                           padding=((2, 0), (1, 3)))),  # corners, 18 units
    ((2, 64, 7, 7), (130, 32, 1, 1), dict(groups=2)),                    # groups of 32, 1 unit
    ((5, 32, 5, 6), (64, 32, 5, 5), dict(padding=2)),                     # taps off x
]


@pytest.mark.parametrize("tile", list(WGMMA_TILES))
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("half", [False, True])
def test_tma_copies_match_reference(rng, tile, dtype, half):
    """TMA boxes of 64 channels, or (half) of 32, two a slice: against the reference, and
    with Options(tma=False) the cp.async producer on the same problems."""
    skip_unless_hopper(tile)
    from im2win.cuda import plan as cuda_plan
    for x_shape, w_shape, kwargs in HALF_BOX_CASES if half else TMA_CASES:
        x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
        prob = make_problem(*to_layout("NHWC", x.astype(np.float16), w.astype(np.float16)),
                            layout="NHWC", **kwargs)
        assert cuda_plan.half_boxes(prob) == half and cuda_plan.tma_args(
            prob, WGMMA_TILES[tile], (prob.H * prob.W * prob.C, 1, prob.W * prob.C, prob.C),
            True, True) is not None
        run(x, w, b, "NHWC", kwargs, dtype=dtype, tile=tile, algorithm="im2win_fused")
        run(x, w, b, "NHWC", kwargs, dtype=dtype, tile=tile, algorithm="im2win_fused",
            options=Options(tma=False))


# More tiles than SPLIT_ITEMS and one filter tile: the planner keeps the filter resident and,
# with PING_PONG_TILES lowered to what these small cases reach (the rule is plan-tested), runs
# the consumers in turn (ping-pong); K = 100 leaves a filter tail, padding taps off x.
RESIDENT_CASES = [((9, 64, 64, 64), (100, 64, 3, 3), "wg128x128"),
                  ((9, 64, 64, 64), (64, 64, 3, 3), "wg256x64")]


@pytest.mark.parametrize("x_shape, w_shape, tile", RESIDENT_CASES)
@pytest.mark.parametrize("switches", [(), ("resident_filter",), ("ping_pong",),
                                      ("resident_filter", "ping_pong")])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_resident_filter_and_ping_pong_match_reference(rng, monkeypatch, x_shape, w_shape, tile,
                                                       switches, dtype):
    skip_unless_hopper(tile)
    from im2win.cuda import plan as cuda_plan
    monkeypatch.setattr(cuda_plan, "PING_PONG_TILES", cuda_plan.SPLIT_ITEMS)
    options = Options(**{name: False for name in switches})
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
    xh, wh = to_layout("NHWC", x.astype(np.float16), w.astype(np.float16))
    prob = make_problem(xh, wh, layout="NHWC", padding=1)
    plan = cuda_plan.make_plan(prob, x_strides=(prob.H * prob.W * prob.C, 1, prob.W * prob.C,
                                                prob.C), w_aligned=True, options=options,
                               arch=90, algorithm="im2win_fused")
    assert plan.tile.name == tile and plan.tma is not None          # what the case is for
    assert (plan.resident > 0) == ("resident_filter" not in switches)
    assert plan.kernel.endswith(", true, false>") == ("ping_pong" not in switches)
    run(x, w, b, "NHWC", dict(padding=1), dtype=dtype, options=options)


# The multicast filter (im2win_wgmma_tma_mc, clusters of 2): odd tile counts (the last
# cluster's second block a ghost that multiplies the last tile and stores nothing), one tile
# (a ghost block beside it), boxes of 32 channels (cv4's form), a filter tail (K = 100 of 128),
# padding, a stride.
MULTICAST_CASES = [((7, 64, 63, 61), (100, 64, 3, 3), dict(padding=1), "wg128x128"),
                   ((5, 32, 41, 41), (64, 32, 7, 7), dict(stride=2, padding=3), "wg256x64"),
                   ((1, 64, 5, 5), (64, 64, 3, 3), dict(padding=1), "wg256x64"),
                   ((3, 128, 21, 19), (96, 128, 3, 3), dict(padding=(0, 2)), "wg256x96")]


@pytest.mark.parametrize("x_shape, w_shape, kwargs, tile", MULTICAST_CASES)
@pytest.mark.parametrize("ping_pong", [False, True])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_multicast_filter_matches_reference(rng, monkeypatch, x_shape, w_shape, kwargs, tile,
                                            ping_pong, dtype):
    skip_unless_hopper(tile)
    from im2win.cuda import plan as cuda_plan
    # ping-pong where the tile allows it, from these small cases' tile counts (the rule is
    # plan-tested); the filter kept out of shared memory, where it would fit
    monkeypatch.setattr(cuda_plan, "PING_PONG_TILES", 1 if ping_pong else 1 << 40)
    monkeypatch.setattr(cuda_plan, "MULTICAST_MIN_TILES", 0)   # even a single tile
    options = Options(resident_filter=False, multicast=True)
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
    xh, wh = to_layout("NHWC", x.astype(np.float16), w.astype(np.float16))
    prob = make_problem(xh, wh, layout="NHWC", **kwargs)
    strides = (prob.H * prob.W * prob.C, 1, prob.W * prob.C, prob.C)
    plan = cuda_plan.make_plan(prob, x_strides=strides, w_aligned=True, options=options,
                               arch=90, algorithm="im2win_fused", tile=tile)
    assert plan.cluster == 2 and plan.kernel.startswith("im2win_wgmma_tma_mc<")
    assert plan.tma.w_box[1] == plan.tile.BN // 2
    assert cuda_plan.make_plan(prob, x_strides=strides, w_aligned=True, arch=90, tile=tile,
                               options=Options(resident_filter=False, multicast=False),
                               algorithm="im2win_fused").cluster == 1
    run(x, w, b, "NHWC", kwargs, dtype=dtype, tile=tile, algorithm="im2win_fused",
        options=options)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("algorithm", WINDOWS + ["direct"])
@pytest.mark.parametrize("kernel", ["default", "mma.sync", "wg128x256", "wg256x96"])
def test_bfloat16_matches_reference(rng, layout, algorithm, kernel):
    tile = kernel if kernel.startswith("wg") else None
    if tile and algorithm == "direct":
        pytest.skip("tiles are the im2win kernels'")
    skip_unless_hopper(tile)
    options = Options(hopper=False) if kernel == "mma.sync" else None
    for x_shape, w_shape, kwargs in TENSOR_CORE_CASES:
        x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
        y = run(x, w, b, layout, kwargs, dtype=ml_dtypes.bfloat16, tile=tile,
                algorithm=algorithm, options=options)
        assert y.dtype == ml_dtypes.bfloat16


@pytest.mark.parametrize("layout", LAYOUTS)
def test_tensor_core_output_at_any_alignment(rng, layout):
    """out may start at any element: pairs of float16 outputs are stored as one 4-byte word
    only where aligned."""
    x, w, b = random_arrays(rng, (2, 3, 12, 13), (9, 3, 3, 3), 9)
    x, w = to_layout(layout, x.astype(np.float16), w.astype(np.float16))
    prob = make_problem(x, w, layout=layout, padding=1)
    ref = reference.conv2d(x.astype(np.float64), w.astype(np.float64),
                           b.astype(np.float16).astype(np.float64), layout=layout, padding=1)
    for offset in (0, 1):
        base = cupy.full(int(np.prod(prob.y_shape)) + 2, np.nan, cupy.float16)
        out = base[offset:offset + base.size - 2].reshape(prob.y_shape)
        im2win.conv2d(cupy.asarray(x), cupy.asarray(w), cupy.asarray(b.astype(np.float16)),
                      layout=layout, padding=1, out=out)
        assert_close(cupy.asnumpy(out), ref, np.float16, prob.reduction)
        assert bool(cupy.isnan(base[:offset]).all())
        assert bool(cupy.isnan(base[offset + out.size:]).all())


def test_long_reductions_with_and_without_the_table(rng):
    """(C/G)*R*S = 6300, past the 6144 entries the old __constant__ tables held."""
    x, w, b = random_arrays(rng, (2, 700, 6, 6), (5, 700, 3, 3), 5)
    for layout in LAYOUTS:
        for dtype in (np.float32, np.float16):
            for options in (None, Options(index_tables=False)):
                run(x, w, b, layout, dict(padding=1), dtype=dtype, algorithm="im2win_fused",
                    options=options)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("algorithm", WINDOWS + ["direct"])
def test_determinism_and_chunk_invariance(rng, layout, algorithm):
    """INPUTS.md row 30: bit-for-bit the same twice, for any batch slice and any chunking."""
    x, w, b = random_arrays(rng, (7, 6, 15, 13), (8, 6, 3, 3), 8, np.float32)
    x, w = to_layout(layout, x, w)
    x, w, b = cupy.asarray(x), cupy.asarray(w), cupy.asarray(b)
    y = im2win.conv2d(x, w, b, layout=layout, padding=1, algorithm=algorithm)
    cupy.testing.assert_array_equal(y, im2win.conv2d(x, w, b, layout=layout, padding=1,
                                                     algorithm=algorithm))
    cupy.testing.assert_array_equal(y[2:5], im2win.conv2d(x[2:5], w, b, layout=layout,
                                                          padding=1, algorithm=algorithm))
    if algorithm == "im2win":
        per_image = 6 * 15 * 15 * 3 * 4                             # C*P*Wp*R float32
        chunked = im2win.conv2d(x, w, b, layout=layout, padding=1, algorithm="im2win",
                                workspace_limit=2 * per_image + 5)
        cupy.testing.assert_array_equal(y, chunked)


def test_workspace_limit_below_one_image_is_refused():
    x, w = cupy.ones((2, 3, 8, 8), cupy.float32), cupy.ones((4, 3, 3, 3), cupy.float32)
    with pytest.raises(ValueError, match="workspace_limit=10 bytes is smaller than one image"):
        im2win.conv2d(x, w, algorithm="im2win", workspace_limit=10)


def test_non_contiguous_and_misaligned_inputs(rng):
    """INPUTS.md row 26: views, negative strides, a base pointer off 16-byte alignment."""
    x, w, b = random_arrays(rng, (3, 8, 21, 17), (6, 8, 3, 4), 6, np.float32)
    x_gpu = cupy.asarray(x)[::2, 1::2, ::-1, 2:]
    w = np.ascontiguousarray(w[:, ::2])                      # (6, 4, 3, 4): red % 4 == 0
    for dtype in (np.float32, np.float16):
        flat = cupy.zeros(w.size + 1, dtype)
        flat[1:] = cupy.asarray(w.astype(dtype)).ravel()
        w_gpu = flat[1:].reshape(w.shape)                    # contiguous, off 16-byte alignment
        assert w_gpu.flags.c_contiguous and w_gpu.data.ptr % 16 != 0
        for algorithm in WINDOWS + ["direct"]:
            y = im2win.conv2d(x_gpu.astype(dtype), w_gpu, cupy.asarray(b, dtype),
                              algorithm=algorithm)
            ref = reference.conv2d(cupy.asnumpy(x_gpu.astype(dtype)).astype(np.float64),
                                   w.astype(dtype).astype(np.float64),
                                   b.astype(dtype).astype(np.float64))
            assert_close(cupy.asnumpy(y), ref, dtype, 4 * 3 * 4)


def test_channels_last_view_of_nchw_is_read_in_place(rng):
    x, w, b = random_arrays(rng, (2, 16, 9, 9), (8, 16, 3, 3), 8, np.float32)
    x_view = cupy.asarray(np.ascontiguousarray(x.transpose(0, 2, 3, 1))).transpose(0, 3, 1, 2)
    y = im2win.conv2d(x_view, cupy.asarray(w), cupy.asarray(b), algorithm="im2win_fused")
    assert_close(cupy.asnumpy(y), reference.conv2d(x, w, b), np.float32, 16 * 9)


def test_non_contiguous_out_is_written():
    x, w = cupy.ones((2, 3, 6, 6), cupy.float32), cupy.ones((4, 3, 3, 3), cupy.float32)
    base = cupy.full((2, 4, 4, 8), np.nan, cupy.float32)
    out = base[..., ::2]
    assert im2win.conv2d(x, w, out=out) is out
    cupy.testing.assert_array_equal(out, cupy.full((2, 4, 4, 4), 27, cupy.float32))
    assert bool(cupy.isnan(base[..., 1::2]).all())


def test_empty_batch_and_zero_channels():
    y = im2win.conv2d(cupy.zeros((0, 3, 8, 8), cupy.float16), cupy.ones((4, 3, 3, 3),
                                                                        cupy.float16))
    assert y.shape == (0, 4, 6, 6) and y.dtype == cupy.float16
    b = cupy.asarray([1.0, -2.0], cupy.float32)
    for precision in (None, "tf32", "3xtf32"):    # nothing to round: the bias, exactly
        y = im2win.conv2d(cupy.zeros((2, 0, 5, 5), cupy.float32),
                          cupy.zeros((2, 0, 2, 2), cupy.float32), b, precision=precision)
        cupy.testing.assert_array_equal(y, cupy.broadcast_to(b[:, None, None], (2, 2, 4, 4)))


def test_nan_inf_and_float16_range():
    """INPUTS.md row 27: NaN/Inf propagate; float16 partial sums above 65504 do not overflow."""
    x = cupy.asarray([40000.0, 40000.0, -40000.0], cupy.float16).reshape(1, 3, 1, 1)
    for algorithm in WINDOWS + ["direct"]:
        y = im2win.conv2d(x, cupy.ones((1, 3, 1, 1), cupy.float16), algorithm=algorithm)
        assert float(y[0, 0, 0, 0]) == 40000.0
    x = cupy.ones((1, 2, 5, 5), cupy.float32)
    x[0, 0, 2, 2] = cupy.nan
    x[0, 1, 0, 0] = cupy.inf
    ref = reference.conv2d(cupy.asnumpy(x), np.ones((1, 2, 3, 3), np.float32))
    for algorithm in WINDOWS + ["direct"]:
        y = cupy.asnumpy(im2win.conv2d(x, cupy.ones((1, 2, 3, 3), cupy.float32),
                                       algorithm=algorithm))
        np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
        np.testing.assert_array_equal(np.isinf(y), np.isinf(ref))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_float32_products_below_the_normal_range_are_not_flushed(rng, layout):
    """CuPy compiles every kernel with -ftz=true; the kernels accumulate with IEEE fused
    multiply-adds all the same, so x ~ 1e-30 and w ~ 1e-5 (products down to the subnormal
    range, 2^-126) keep float32's accuracy on every CUDA-core path (flushed, the FP32 path's
    error reached 3e-4 of max|y| on the H200)."""
    x, w, b = random_arrays(rng, (2, 32, 7, 6), (40, 32, 3, 3), 40)
    x, w, b = x * 1e-30, w * 1e-5, b * 1e-35
    for algorithm in WINDOWS + ["direct"]:
        run(x, w, b, layout, dict(padding=1), algorithm=algorithm)
    xd, wd, bd = random_arrays(rng, (2, 16, 9, 8), (16, 1, 3, 3), 16)
    run(xd * 1e-30, wd * 1e-5, bd * 1e-35, layout, dict(groups=16, padding=1),
        algorithm="depthwise")


def test_more_groups_than_one_grid_axis_holds(rng):
    """INPUTS.md row 29: 70000 groups, more than a grid's y/z extent."""
    G = 70000
    x, w, b = random_arrays(rng, (1, G, 3, 3), (G, 1, 2, 2), G, np.float32)
    for algorithm in WINDOWS:
        run(x, w, b, "NCHW", dict(groups=G), algorithm=algorithm)


def test_buffers_past_two_to_the_31_elements(rng):
    """INPUTS.md row 28: x of 2.2e9 float16 elements and a window of 6.7e9: 64-bit offsets."""
    N, C, H, W = 700, 2, 1250, 1250
    x = cupy.empty((N, C, H, W), cupy.float16)
    assert x.size > 2**31
    x[...] = 0.5
    x_last = cupy.asarray(rng.uniform(-1, 1, (1, C, H, W)), cupy.float16)
    x[-1:] = x_last
    w_host = rng.uniform(-1, 1, (3, C, 3, 3)).astype(np.float16)
    ref = reference.conv2d(cupy.asnumpy(x_last).astype(np.float64), w_host.astype(np.float64))
    for algorithm in WINDOWS:
        y = im2win.conv2d(x, cupy.asarray(w_host), algorithm=algorithm)
        assert_close(cupy.asnumpy(y[-1:]), ref, np.float16, C * 9)
        del y


def test_pointwise_past_two_to_the_31_elements(rng):
    """pointwise.cu on x and y of 2.15e9 float16 elements each: 64-bit pixel offsets."""
    N, H, W, C, K = 2, 8200, 16384, 8, 8
    x = cupy.full((N, H, W, C), 0.5, cupy.float16)
    assert x.size > 2**31
    rows = cupy.asarray(rng.uniform(-1, 1, (2, W, C)), cupy.float16)
    x[-1, -2:] = rows
    w_host = rng.uniform(-1, 1, (K, 1, 1, C)).astype(np.float16)
    y = im2win.conv2d(x, cupy.asarray(w_host), layout="NHWC", algorithm="pointwise")
    ref = cupy.asnumpy(rows).astype(np.float64) @ w_host.reshape(K, C).astype(np.float64).T
    assert_close(cupy.asnumpy(y[-1, -2:]), ref, np.float16, C)
    first = 0.5 * w_host.reshape(K, C).astype(np.float64).sum(1)
    assert_close(cupy.asnumpy(y[0, 0, :3]), np.broadcast_to(first, (3, K)), np.float16, C)


def test_autotune_times_candidates_and_remembers_the_winner(rng):
    from im2win import cuda
    x, w, b = random_arrays(rng, (4, 16, 20, 20), (32, 16, 3, 3), 32, np.float32)
    x, w, b = cupy.asarray(x), cupy.asarray(w), cupy.asarray(b)
    prob = make_problem(x, w, b, padding=1)
    default = cuda._plan(prob, x, w, "auto", None, None)
    results = cuda.autotune(x, w, b, padding=1, tiles=["64x128", "32x128"], repeat=3)
    assert len(results) == 5 and [r[2] for r in results] == sorted(r[2] for r in results)
    assert ("auto", None) in [r[:2] for r in results]       # the planner's choice, timed too
    plan = cuda._plan(prob, x, w, "auto", None, None)
    if results[0][:2] == ("auto", None):
        assert plan == default
    else:
        assert (plan.algorithm, plan.tile.name) == results[0][:2]
    run(*(cupy.asnumpy(a) for a in (x, w, b)), "NCHW", dict(padding=1))
    # Named candidates only: exactly those; the remembered winner is replaced.
    again = cuda.autotune(x, w, b, padding=1, tiles=["32x128"], algorithms=("im2win",),
                          repeat=3)
    assert [r[:2] for r in again] == [("im2win", "32x128")]
    assert cuda._plan(prob, x, w, "auto", None, None).algorithm == "im2win"
    # Bad candidates and arguments are refused before anything is timed or forgotten: the
    # winner above stays.
    for kwargs, error in ((dict(tiles=["no-such-tile"]), ValueError),
                          (dict(algorithms=("pointwise",)), TypeError),   # float32
                          (dict(repeat=1.5), TypeError), (dict(repeat=True), TypeError),
                          (dict(repeat=0), ValueError)):
        with pytest.raises(error):
            cuda.autotune(x, w, b, padding=1, **kwargs)
        assert cuda._plan(prob, x, w, "auto", None, None).algorithm == "im2win"
    assert len(cuda.autotune(x, w, b, padding=1, algorithms=("auto",),
                             repeat=np.int64(2))) == 1


@pytest.mark.parametrize("x_shape, w_shape, kwargs", [
    ((3, 64, 10, 9), (40, 64, 3, 3), dict(padding=1)),        # NCHW on its NHWC twin
    ((2, 3, 20, 21), (17, 3, 7, 7), dict(stride=2, padding=3)),   # a stem: window columns
])
def test_autotune_at_a_tensor_core_precision_remembers_its_own_winner(rng, x_shape, w_shape,
                                                                    kwargs):
    from im2win import cuda
    from im2win.cuda.tuning import THREE_TF32_TILES
    if not hopper():
        pytest.skip("float32 on Tensor Cores runs on the Hopper kernel")
    x, w, b = (cupy.asarray(a) for a in random_arrays(rng, x_shape, w_shape, w_shape[0],
                                                      np.float32))
    with pytest.raises(ValueError, match="tiles for precision='3xtf32'"):
        cuda.autotune(x, w, b, tiles=["wg128x256"], precision="3xtf32", **kwargs)
    results = cuda.autotune(x, w, b, repeat=2, precision="3xtf32", **kwargs)
    assert sorted(r[1] for r in results) == sorted(THREE_TF32_TILES)
    assert all(r[0] == "auto" for r in results)
    prob = make_problem(x, w, b, **kwargs)
    plan = cuda._plan(prob, x, w, "auto", None, None, precision="3xtf32")
    assert plan.inner.tile.name == results[0][1] and plan.inner.precision == "3xtf32"
    assert cuda._plan(prob, x, w, "auto", None, None).precision == "float32"   # its own key
    y = im2win.conv2d(x, w, b, precision="3xtf32", **kwargs)
    forced = cuda.conv2d(prob, x, w, b, tile=results[0][1], precision="3xtf32")
    assert cupy.array_equal(y, forced)


def test_bad_gpu_arguments_are_refused_before_launch():
    x, w = cupy.ones((1, 2, 5, 5), cupy.float32), cupy.ones((3, 2, 3, 3), cupy.float32)
    with pytest.raises(ValueError, match="non-positive stride"):
        im2win.conv2d(x, w, stride=0)
    with pytest.raises(ValueError, match="algorithm must be one of"):
        im2win.conv2d(x, w, algorithm="winograd")
    with pytest.raises(TypeError, match="options must be an im2win.cuda.Options"):
        im2win.conv2d(x, w, options={"smem": False})
    with pytest.raises(TypeError, match="out has dtype float16"):
        im2win.conv2d(x, w, out=cupy.empty((1, 3, 3, 3), cupy.float16))


def test_numpy_and_cupy_arrays_cannot_be_mixed():
    with pytest.raises(TypeError, match="all arrays must be on one device"):
        im2win.conv2d(np.ones((1, 2, 5, 5), np.float32), cupy.ones((3, 2, 3, 3), cupy.float32))
    with pytest.raises(TypeError, match="all arrays must be on one device"):
        im2win.conv2d(cupy.ones((1, 2, 5, 5), cupy.float32), cupy.ones((3, 2, 3, 3),
                      cupy.float32), out=np.empty((1, 3, 3, 3), np.float32))



DEPTHWISE_CASES = [  # x (N, C, H, W), w (K, 1, R, S), keyword arguments; groups = C
    ((2, 16, 13, 12), (16, 1, 3, 3), dict(padding=1)),                 # 16-byte vectors (NHWC)
    ((3, 24, 11, 17), (24, 1, 5, 5), dict(stride=2, padding=((2, 1), (0, 3)))),
    ((2, 5, 9, 10), (10, 1, 3, 3), dict(dilation=(2, 1), padding=2)),  # multiplier m = 2
    ((1, 32, 8, 40), (32, 1, 7, 7), dict(padding=3)),                  # ConvNeXt's 7x7
    ((2, 3, 5, 5), (3, 1, 1, 3), dict(stride=(1, 2))),
    ((2, 8, 10, 23), (8, 1, 3, 3), dict(stride=(1, 3), dilation=(1, 2), padding=2)),  # general
    ((1, 16, 3, 30), (16, 1, 2, 4), dict(padding=(1, 2))),             # even width: general
    # depthwise_tile_nhwc (NHWC, 16-byte vectors): a channel tile with a tail (9 vectors in
    # tiles of 5), two column tiles and rows in tiles; 7x7 at stride 2; padding on one side.
    ((3, 72, 15, 37), (72, 1, 5, 5), dict(padding=2)),
    ((2, 40, 20, 19), (40, 1, 7, 7), dict(stride=2, padding=3)),
    ((2, 48, 9, 9), (48, 1, 3, 3), dict(stride=2, padding=((0, 2), (1, 0)))),
    # depthwise_rows: odd maps at stride 2, padding on one side, no padding, 5x5 stride 2
    ((2, 16, 17, 13), (16, 1, 3, 3), dict(stride=2, padding=((2, 0), (0, 1)))),
    ((1, 24, 12, 11), (24, 1, 3, 3), dict()),
    ((2, 32, 19, 21), (32, 1, 5, 5), dict(stride=2, padding=(1, 2))),
    # depthwise_rows_vec (NCHW, vectors of a row's columns): rows of 4 to 16 lanes side by side
    # in a warp, channels past C; 5x5 at stride 2; more output columns than W/V vectors
    ((2, 20, 14, 32), (20, 1, 3, 3), dict(padding=1)),
    ((2, 12, 9, 56), (12, 1, 5, 5), dict(stride=2, padding=2)),
    ((1, 6, 7, 120), (6, 1, 3, 3), dict(padding=((1, 1), (1, 4)))),
    # ... on vectors of 2 columns (14x14 maps) and, in float32 and float64, of 1 (7x7 maps)
    ((2, 10, 14, 14), (10, 1, 3, 3), dict(padding=1)),
    ((2, 12, 14, 14), (12, 1, 5, 5), dict(stride=2, padding=2)),
    ((2, 12, 7, 7), (12, 1, 3, 3), dict(padding=1)),
    # ... with halos past the next lane's vector: 7x7 on 14x14 and 7x7 maps (vectors of 2 and
    # 1 columns: 2 and 3 lanes a side), on rows of 3 lanes, 5x5 on vectors of 1 column
    ((2, 12, 14, 14), (12, 1, 7, 7), dict(padding=3)),
    ((2, 10, 7, 7), (10, 1, 7, 7), dict(padding=3)),
    ((1, 6, 8, 6), (6, 1, 7, 7), dict(padding=3)),
    ((2, 9, 7, 7), (9, 1, 5, 5), dict(padding=2)),
    # ... and more output columns than input columns; 7x7 on vectors of 4 (16-bit types)
    ((1, 6, 8, 6), (6, 1, 7, 7), dict(padding=((3, 3), (3, 6)))),
    ((1, 5, 7, 7), (5, 1, 5, 5), dict(padding=((2, 2), (2, 5)))),
    ((2, 8, 9, 28), (8, 1, 7, 7), dict(padding=3)),
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
@pytest.mark.parametrize("x_shape, w_shape, kwargs", DEPTHWISE_CASES)
def test_depthwise_matches_reference(rng, monkeypatch, layout, dtype, x_shape, w_shape,
                                     kwargs):
    from im2win import cuda
    from im2win.cuda import plan as cuda_plan
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
    kwargs = dict(kwargs, groups=x_shape[1])
    for algorithm in ("auto", "depthwise"):
        run(x, w, b, layout, kwargs, dtype=dtype, algorithm=algorithm)
    # the register windows, reading x in place
    run(x, w, b, layout, kwargs, dtype=dtype, algorithm="depthwise", options=Options(smem=False))
    # depthwise_rows on every map it has a form for, in strips of 3 output rows: every map
    # here in several, the last one short
    monkeypatch.setattr(cuda_plan, "DEPTHWISE_ROWS_MIN_ROWS", 0)
    monkeypatch.setattr(cuda_plan, "DEPTHWISE_ROWS_STRIP", 3)
    monkeypatch.setattr(cuda, "_calls", {})
    run(x, w, b, layout, kwargs, dtype=dtype, algorithm="depthwise")
    if layout == "NCHW":
        # ... on vectors (where depthwise_rows_vec takes the problem, just run: 1 row loaded
        # ahead) loading 0 and 2 rows ahead, then on scalars
        for ahead in (0, 2):
            monkeypatch.setattr(cuda_plan, "DEPTHWISE_ROWS_VEC_AHEAD", ahead)
            monkeypatch.setattr(cuda, "_calls", {})
            run(x, w, b, layout, kwargs, dtype=dtype, algorithm="depthwise")
        monkeypatch.setattr(cuda_plan, "DEPTHWISE_ROWS_VEC", False)
        monkeypatch.setattr(cuda, "_calls", {})
        run(x, w, b, layout, kwargs, dtype=dtype, algorithm="depthwise")
    if layout == "NHWC":
        # ... with each thread copying 2 input rows ahead (the default, just run), then 0, 1
        # and 4 (a strip of 3 output rows reads 5 to 9 input rows, the last strip of a map
        # fewer: rings that wrap, and some deeper than the strip's rows)
        for prefetch in (0, 1, 4):
            monkeypatch.setattr(cuda_plan, "DEPTHWISE_ROWS_PREFETCH", prefetch)
            monkeypatch.setattr(cuda, "_calls", {})
            run(x, w, b, layout, kwargs, dtype=dtype, algorithm="depthwise")
        # depthwise_mma_nhwc (16-bit types on Tensor Cores) on every stride-1 form, then
        # depthwise_mma_small_nhwc with CB of 1, 2 and 4, and (16-bit types) with 2 blocks of
        # sub-tiles in y, each looping
        monkeypatch.setattr(cuda_plan, "DEPTHWISE_MMA_FILTERS", cuda_plan.DEPTHWISE_MMA_FORMS)
        monkeypatch.setattr(cuda_plan, "DEPTHWISE_MMA_SMALL_ROWS", 0)
        monkeypatch.setattr(cuda, "_calls", {})
        run(x, w, b, layout, kwargs, dtype=dtype, algorithm="depthwise")
        monkeypatch.setattr(cuda_plan, "DEPTHWISE_MMA_SMALL_ROWS", 1 << 30)
        for cb in (1, 2, 4):
            monkeypatch.setattr(cuda_plan, "DEPTHWISE_MMA_SMALL_CB", cb)
            monkeypatch.setattr(cuda, "_calls", {})
            run(x, w, b, layout, kwargs, dtype=dtype, algorithm="depthwise")
        small = (np.dtype(dtype).itemsize == 2 and x_shape[1] % 8 == 0 and
                 w_shape[0] == x_shape[1] and w_shape[2] == w_shape[3] and
                 "stride" not in kwargs and "dilation" not in kwargs)
        if small:                                   # the problems it takes
            monkeypatch.setattr(cuda_plan, "MAX_GRID_YZ", 2)
            monkeypatch.setattr(cuda, "_calls", {})
            run(x, w, b, layout, kwargs, dtype=dtype, algorithm="depthwise")
            monkeypatch.setattr(cuda_plan, "MAX_GRID_YZ", 65535)
        # depthwise_tile_nhwc where it takes the problem (every form, rows and mma off), and
        # with threads of the other width (8 bytes of channels, or 16)
        monkeypatch.setattr(cuda_plan, "DEPTHWISE_MMA_FILTERS", ())
        monkeypatch.setattr(cuda_plan, "DEPTHWISE_ROWS", {})
        for width in (0, 24 - cuda_plan.DEPTHWISE_TILE_THREAD_BYTES):
            if width:
                monkeypatch.setattr(cuda_plan, "DEPTHWISE_TILE_THREAD_BYTES", width)
            monkeypatch.setattr(cuda, "_calls", {})
            run(x, w, b, layout, kwargs, dtype=dtype, algorithm="depthwise")


GROUPED_CASES = [  # x (N, C, H, W), w (K = C, C/G, R, S), keyword arguments: C/G of 2, 4, 8
    ((2, 32, 9, 11), (32, 4, 3, 3), dict(groups=8, padding=1)),
    ((2, 64, 12, 10), (64, 8, 3, 3), dict(groups=8, stride=2, padding=((1, 0), (2, 1)))),
    ((1, 16, 7, 30), (16, 2, 5, 5), dict(groups=8, padding=2)),
    ((2, 32, 8, 9), (32, 4, 3, 2), dict(groups=8, dilation=(1, 2), padding=1)),  # general form
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
@pytest.mark.parametrize("x_shape, w_shape, kwargs", GROUPED_CASES)
def test_small_groups_take_the_depthwise_kernel(rng, layout, dtype, x_shape, w_shape, kwargs):
    """Groups of a few channels (within one thread's vector, else the im2win path); NCHW on
    the NHWC twin (not float64)."""
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
    for algorithm in ("auto", "depthwise"):
        vec = 16 // np.dtype(dtype).itemsize
        if algorithm == "depthwise" and (vec % w_shape[1] or
                                         (layout == "NCHW" and dtype == np.float64)):
            continue                                  # float64 takes groups of 2 only, in NHWC
        run(x, w, b, layout, kwargs, dtype=dtype, algorithm=algorithm)


def test_depthwise_views_and_misaligned_out(rng):
    """A strided channels-last view (scalar path) and an out one element off 16 bytes."""
    x, w, b = random_arrays(rng, (2, 16, 9, 9), (16, 1, 3, 3), 16)
    xs, ws = to_layout("NHWC", x.astype(np.float16), w.astype(np.float16))
    prob = make_problem(xs, ws, layout="NHWC", groups=16, padding=1)
    ref = reference.conv2d(xs.astype(np.float64), ws.astype(np.float64), layout="NHWC",
                           groups=16, padding=1)
    base = cupy.full(int(np.prod(prob.y_shape)) + 1, np.nan, cupy.float16)
    out = base[1:].reshape(prob.y_shape)
    im2win.conv2d(cupy.asarray(xs), cupy.asarray(ws), out=out, layout="NHWC", groups=16,
                  padding=1)
    assert_close(cupy.asnumpy(out), ref, np.float16, 9)
    wide = cupy.zeros((2, 9, 9, 32), cupy.float16)
    wide[..., ::2] = cupy.asarray(xs)
    y = im2win.conv2d(wide[..., ::2], cupy.asarray(ws), layout="NHWC", groups=16, padding=1)
    assert_close(cupy.asnumpy(y), ref, np.float16, 9)


def test_depthwise_rows_vec_views_and_misaligned_out(rng, monkeypatch):
    """depthwise_rows_vec (NCHW) on a channel slice whose start stays on a vector and into an
    out one element off one (element stores), and the rows kernel on scalars where x starts
    off a vector."""
    from im2win import cuda
    from im2win.cuda import plan as cuda_plan
    x, w, b = random_arrays(rng, (2, 20, 32, 32), (16, 1, 3, 3), 16)
    x, w, b = x.astype(np.float32), w.astype(np.float32), b.astype(np.float32)
    kwargs = dict(groups=16, padding=1)
    ref = reference.conv2d(x[:, 2:18].astype(np.float64), w.astype(np.float64),
                           b.astype(np.float64), **kwargs)
    xg = cupy.asarray(x)
    prob = make_problem(x[:, 2:18], w, b, **kwargs)
    for start in (0, 1):          # x on a vector (the vector form), one element off (scalars)
        flat = cupy.zeros(x.size + start, cupy.float32)
        flat[start:] = xg.ravel()
        view = flat[start:].reshape(x.shape)[:, 2:18]
        assert (cuda_plan.make_plan(prob, x_strides=tuple(t // 4 for t in view.strides),
                                    w_aligned=True, x_aligned=start == 0,
                                    algorithm="depthwise").kernel
                .startswith("depthwise_rows_vec<")) == (start == 0)
        base = cupy.full(int(np.prod(prob.y_shape)) + 1, np.nan, cupy.float32)
        out = base[1:].reshape(prob.y_shape)
        monkeypatch.setattr(cuda, "_calls", {})
        im2win.conv2d(view, cupy.asarray(w), cupy.asarray(b), out=out, **kwargs)
        assert_close(cupy.asnumpy(out), ref, np.float32, 9)


NARROW_CASES = [  # x (N, C, H, W), w (K, C/G, R, S), keyword arguments: stems and groups
    ((2, 3, 23, 21), (32, 3, 3, 3), dict(stride=2, padding=1)),          # MobileNet's stem
    ((2, 3, 17, 19), (16, 3, 4, 4), dict(stride=4)),                     # ConvNeXt's, K = 16
    ((1, 1, 9, 40), (8, 1, 3, 2), dict(dilation=(2, 3), padding=((2, 0), (1, 3)))),  # C = 1
    ((3, 4, 7, 6), (24, 4, 5, 5), dict(stride=(2, 1), padding=2)),       # C = 4, K = 8 * 3
    ((2, 8, 30, 3), (64, 8, 1, 7), dict(padding=(0, 3))),                # C = 8, 7 taps
    # narrow_dense: C < 8 packed by filter row (S*C values, rounded up to even)
    ((2, 3, 29, 31), (64, 3, 7, 7), dict(stride=2)),                     # cv3's: rows of odd length
    ((2, 3, 13, 17), (16, 3, 3, 3), dict(padding=((1, 0), (2, 1)))),     # sw*C odd: odd windows
    ((1, 5, 15, 12), (40, 5, 3, 3), dict(dilation=(2, 1), stride=(1, 2), padding=(2, 1))),
    ((2, 1, 9, 50), (8, 1, 2, 7), dict(stride=(1, 3), padding=(0, 3))),  # C = 1, S*C = 7
    ((5, 2, 11, 9), (32, 2, 5, 5), dict(stride=2, padding=2)),            # 5 images, tails
    ((2, 64, 12, 10), (64, 8, 3, 3), dict(groups=8, stride=2, padding=((1, 0), (2, 1)))),
    ((2, 96, 9, 11), (96, 8, 3, 3), dict(groups=12, padding=1)),       # K = 32 * 3
    ((1, 64, 6, 37), (64, 16, 3, 3), dict(groups=4, dilation=(1, 2), padding=(1, 2))),
    ((2, 128, 5, 5), (128, 32, 3, 1), dict(groups=4, stride=(1, 3))),
    ((2, 256, 15, 9), (256, 8, 3, 3), dict(groups=32, padding=1)),       # several blocks
]


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("x_shape, w_shape, kwargs", NARROW_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_narrow_matches_reference(rng, dtype, x_shape, w_shape, kwargs, bias):
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0], bias=bias)
    run(x, w, b, "NHWC", kwargs, dtype=dtype, algorithm="narrow")


NARROW_WGMMA_CASES = [  # dense stems of K = 32 or 64 (narrow_wgmma.cu on Hopper), padded too
    ((2, 3, 23, 21), (32, 3, 3, 3), dict(stride=2, padding=1)),          # MobileNet's stem
    ((2, 3, 29, 31), (64, 3, 7, 7), dict(stride=2)),                     # cv3's
    ((3, 3, 40, 45), (64, 3, 7, 7), dict(stride=2, padding=3)),          # ResNet's
    ((5, 2, 11, 9), (32, 2, 5, 5), dict(stride=2, padding=2)),           # 5 images, tails
    ((2, 1, 9, 50), (32, 1, 2, 7), dict(stride=(1, 3), padding=(0, 3))),  # C = 1, S*C = 7
    ((2, 3, 9, 300), (64, 3, 3, 3), dict(padding=1)),                    # three tiles a row
    ((1, 3, 20, 23), (64, 3, 4, 4), dict(stride=4)),                     # ConvNeXt's form
    ((2, 5, 13, 17), (32, 5, 3, 3), dict(dilation=(2, 1), padding=((1, 0), (2, 1)))),  # odd
]


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("x_shape, w_shape, kwargs", NARROW_WGMMA_CASES)
def test_narrow_wgmma_matches_reference(rng, monkeypatch, dtype, x_shape, w_shape, kwargs):
    """narrow_wgmma.cu's narrow_dense_wgmma forced onto dense stems, those "auto" leaves to
    narrow_dense (32 filters) or narrow_rows_wgmma too."""
    from im2win import cuda
    from im2win.cuda import plan as cuda_plan
    if not hopper():
        pytest.skip("narrow_wgmma.cu needs compute capability 9.0")
    monkeypatch.setattr(cuda_plan, "narrow_wgmma_pays", lambda prob: True)
    monkeypatch.setattr(cuda_plan, "narrow_rows_pays", lambda prob: False)
    monkeypatch.setattr(cuda, "_calls", {})
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
    run(x, w, b, "NHWC", kwargs, dtype=dtype, algorithm="narrow")
    xs, ws = to_layout("NHWC", x.astype(dtype), w.astype(dtype))
    xs, ws = cupy.asarray(xs), cupy.asarray(ws)
    prob = make_problem(xs, ws, layout="NHWC", **kwargs)
    assert cuda._plan(prob, xs, ws, "narrow", None, None).file == "narrow_wgmma"
    # x's rows in reverse (a negative H stride): the first image's last row is x's end
    flipped = xs[:, ::-1]
    ref = reference.conv2d(cupy.asnumpy(flipped).astype(np.float64),
                           cupy.asnumpy(ws).astype(np.float64), layout="NHWC", **kwargs)
    y = im2win.conv2d(flipped, ws, layout="NHWC", algorithm="narrow", **kwargs)
    assert_close(cupy.asnumpy(y), ref, dtype, prob.reduction)


NARROW_ROWS_CASES = [  # stems of stride 2 narrow_rows_wgmma takes (x, w NCHW-lettered, kwargs)
    ((3, 3, 29, 31), (64, 3, 7, 7), dict(stride=2)),                     # cv3's, 3 images
    ((2, 3, 40, 45), (64, 3, 7, 7), dict(stride=2, padding=3)),          # ResNet's
    ((3, 3, 23, 21), (32, 3, 3, 3), dict(stride=2, padding=1)),          # MobileNet's
    ((2, 4, 15, 224), (40, 4, 4, 4), dict(stride=2, padding=((2, 1), (3, 0)))),  # Q = 112
    ((5, 1, 18, 17), (64, 1, 8, 8), dict(stride=(3, 2), padding=((1, 2), (2, 3)))),  # C = 1
    ((2, 2, 16, 20), (24, 2, 3, 7), dict(stride=2, dilation=(2, 1), padding=(1, 0))),  # dh = 2
]


def each_grid(monkeypatch):
    """Yield twice: with the device's grid, then with one sized for a device of one SM (a
    block's run of tiles or rows then crosses images); built plans and remembered calls are
    forgotten before each, and restored after the test."""
    import weakref
    from im2win import cuda
    from im2win.cuda import launch
    monkeypatch.setattr(launch, "_executables", weakref.WeakValueDictionary())
    monkeypatch.setattr(cuda, "_calls", {})
    sms = launch.sm_count
    for one_sm in (False, True):
        monkeypatch.setattr(launch, "sm_count", (lambda device: 1) if one_sm else sms)
        launch._executables.clear()
        cuda._calls.clear()
        yield one_sm


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("x_shape, w_shape, kwargs", NARROW_ROWS_CASES)
def test_narrow_rows_wgmma_matches_reference(rng, monkeypatch, dtype, x_shape, w_shape, kwargs):
    """narrow_rows_wgmma (Options(stem_rows=True)) forced (K < 64 too) with the device's grid
    and with one sized for a device of one SM (a block's run of output rows then crosses
    images); an infinity in x next to a window's last column (odd S: the column its last
    chunk reads from the zeroed copy) reaches only the outputs whose windows hold it; x's
    rows in reverse into an out one element off 16 bytes (element stores); x one element
    off 16 bytes (its first and last rows' edge chunks)."""
    from im2win import cuda
    from im2win.cuda import plan as cuda_plan
    if not hopper():
        pytest.skip("narrow_rows_wgmma needs compute capability 9.0")
    monkeypatch.setattr(cuda_plan, "narrow_rows_pays", lambda prob: True)
    on = Options(stem_rows=True)
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
    xs, ws = to_layout("NHWC", x.astype(dtype), w.astype(dtype))
    xs, ws = cupy.asarray(xs), cupy.asarray(ws)
    prob = make_problem(xs, ws, layout="NHWC", **kwargs)
    plan = cuda._plan(prob, xs, ws, "narrow", on, None)
    assert plan.kernel.startswith("narrow_rows_wgmma<")
    for _ in each_grid(monkeypatch):
        run(x, w, b, "NHWC", kwargs, dtype=dtype, algorithm="narrow", options=on)
        run(x, w, None, "NHWC", kwargs, dtype=dtype, algorithm="narrow", options=on)
    flipped = xs[:, ::-1]                           # and y one element off 16 bytes
    ref = reference.conv2d(cupy.asnumpy(flipped).astype(np.float64),
                           cupy.asnumpy(ws).astype(np.float64), layout="NHWC", **kwargs)
    out = cupy.full(int(np.prod(prob.y_shape)) + 1, np.nan, dtype)[1:].reshape(prob.y_shape)
    im2win.conv2d(flipped, ws, layout="NHWC", algorithm="narrow", options=on, out=out, **kwargs)
    assert_close(cupy.asnumpy(out), ref, dtype, prob.reduction)
    # x one element off 16 bytes: x's first row starts inside its first 16-byte chunk
    shifted = cupy.empty(xs.size + 1, dtype)[1:].reshape(xs.shape)
    shifted[...] = xs
    ref = reference.conv2d(cupy.asnumpy(xs).astype(np.float64),
                           cupy.asnumpy(ws).astype(np.float64), layout="NHWC", **kwargs)
    y = im2win.conv2d(shifted, ws, layout="NHWC", algorithm="narrow", options=on, **kwargs)
    assert_close(cupy.asnumpy(y), ref, dtype, prob.reduction)
    # an infinity at column S of image 0's first row that output row 0 reads, no padding on
    # the left: pixel q reads columns 2q .. 2q + S (its last chunk's), so pixel 0 reads it
    # only through the zeroed copy
    if prob.pl == 0 and prob.S % 2 and prob.S < prob.W:
        xi = xs.copy()
        xi[0, -(-prob.pt // prob.dh) * prob.dh - prob.pt, prob.S, 0] = np.inf
        y = cupy.asnumpy(im2win.conv2d(xi, ws, layout="NHWC", algorithm="narrow", options=on,
                                       **kwargs))
        ref = reference.conv2d(cupy.asnumpy(xi).astype(np.float64),
                               cupy.asnumpy(ws).astype(np.float64), layout="NHWC", **kwargs)
        assert (np.isfinite(y) == np.isfinite(ref)).all() and not np.isfinite(ref).all()
        finite = np.isfinite(ref)
        assert_close(np.where(finite, y, 0), np.where(finite, ref, 0), dtype, prob.reduction)


ROWS_WGMMA_CASES = [  # layers rows_wgmma takes (x, w NCHW-lettered, kwargs): sw*C*2 == 128
    ((3, 32, 37, 30), (64, 32, 7, 7), dict(stride=2)),                     # cv4's, 3 images
    ((3, 32, 17, 21), (20, 32, 5, 5), dict(stride=2, padding=2)),          # K % 8, a zero slot
    ((2, 32, 23, 25), (64, 32, 3, 3), dict(stride=2, dilation=(2, 1), padding=(1, 0))),
    ((2, 32, 40, 31), (64, 32, 5, 3), dict(stride=2, padding=((3, 2), (0, 1)))),  # P odd
    ((2, 64, 12, 40), (128, 64, 3, 3), dict(padding=1)),                  # cv8's: KB = 2
    ((1, 64, 6, 112), (96, 64, 3, 3), dict(padding=1)),                   # Q = 112, K = 96
    ((2, 64, 9, 33), (64, 64, 2, 5), dict(padding=((0, 3), (2, 1)))),     # R = 2: 2 stages
    ((1, 64, 5, 20), (8, 64, 3, 3), dict(padding=1)),                     # K = 8
]


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("x_shape, w_shape, kwargs", ROWS_WGMMA_CASES)
def test_rows_wgmma_matches_reference(rng, monkeypatch, dtype, x_shape, w_shape, kwargs):
    """rows_wgmma.cu (Options.window_rows) forced where it runs, with the device's grid and with
    one sized for a device of one SM (a block's run of tiles then crosses images), with and
    without bias; a view of every other image of a taller x whose rows outside it are
    infinities (strides of their own, nothing read past the view); an out one element off 16
    bytes (element stores)."""
    from im2win import cuda
    from im2win.cuda import plan as cuda_plan
    if not hopper():
        pytest.skip("rows_wgmma needs compute capability 9.0")
    monkeypatch.setattr(cuda_plan, "rows_wgmma_pays", lambda prob: True)
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
    xs, ws = to_layout("NHWC", x.astype(dtype), w.astype(dtype))
    xs, ws = cupy.asarray(xs), cupy.asarray(ws)
    prob = make_problem(xs, ws, layout="NHWC", **kwargs)
    assert cuda._plan(prob, xs, ws, "auto", None, None).file == "rows_wgmma"
    for _ in each_grid(monkeypatch):
        run(x, w, b, "NHWC", kwargs, dtype=dtype)
        run(x, w, None, "NHWC", kwargs, dtype=dtype)
    N, H, W, C = xs.shape
    tall = cupy.full((2 * N, H + 3, W, C), np.inf, dtype)
    view = tall[::2, 1:H + 1]
    view[...] = xs
    assert cuda._plan(prob, view, ws, "auto", None, None).file == "rows_wgmma"
    out = cupy.full(int(np.prod(prob.y_shape)) + 1, np.nan, dtype)[1:].reshape(prob.y_shape)
    im2win.conv2d(view, ws, layout="NHWC", out=out, **kwargs)
    ref = reference.conv2d(cupy.asnumpy(xs).astype(np.float64),
                           cupy.asnumpy(ws).astype(np.float64), layout="NHWC", **kwargs)
    assert_close(cupy.asnumpy(out), ref, dtype, prob.reduction)


def test_narrow_views_and_misaligned_out(rng):
    """A strided channels-last view (element-by-element copies), an out one element off 16
    bytes, and a filter of non-finite values that must stay within its group."""
    x, w, b = random_arrays(rng, (2, 32, 9, 9), (32, 8, 3, 3), 32)
    xs, ws = to_layout("NHWC", x.astype(np.float16), w.astype(np.float16))
    kwargs = dict(layout="NHWC", groups=4, padding=1)
    ref = reference.conv2d(xs.astype(np.float64), ws.astype(np.float64), **kwargs)
    prob = make_problem(xs, ws, **kwargs)
    base = cupy.full(int(np.prod(prob.y_shape)) + 1, np.nan, cupy.float16)
    out = base[1:].reshape(prob.y_shape)
    wide = cupy.zeros((2, 9, 9, 64), cupy.float16)
    wide[..., ::2] = cupy.asarray(xs)
    im2win.conv2d(wide[..., ::2], cupy.asarray(ws), out=out, algorithm="narrow", **kwargs)
    assert_close(cupy.asnumpy(out), ref, np.float16, prob.reduction)
    ws[8:16] = np.inf                                 # group 1's filters
    y = cupy.asnumpy(im2win.conv2d(cupy.asarray(xs), cupy.asarray(ws), algorithm="narrow",
                                   **kwargs))
    assert np.isnan(y[..., 8:16]).any() and np.isfinite(np.delete(y, range(8, 16), -1)).all()
    # a stem: from a view (element copies) and from x in place (raw rows by 4-byte words), an
    # odd number of elements a row, so that rows start at either half of a word
    x, w, _ = random_arrays(rng, (3, 3, 10, 13), (16, 3, 3, 3), 16)
    xs, ws = to_layout("NHWC", x.astype(np.float16), w.astype(np.float16))
    kwargs = dict(layout="NHWC", stride=2, padding=1)
    ref = reference.conv2d(xs.astype(np.float64), ws.astype(np.float64), **kwargs)
    wide = cupy.zeros((3, 10, 13, 6), cupy.float16)
    wide[..., ::2] = cupy.asarray(xs)
    for x_gpu in (wide[..., ::2], cupy.asarray(xs)[1:], cupy.asarray(xs)):
        y = im2win.conv2d(x_gpu, cupy.asarray(ws), algorithm="narrow", **kwargs)
        assert_close(cupy.asnumpy(y), ref[-len(x_gpu):], np.float16, 27)
    # a dense stem reads past each filter row's S*C values and past the tile's pixels: an
    # infinity in x reaches only the outputs whose windows hold it
    x, w, _ = random_arrays(rng, (2, 3, 12, 15), (16, 3, 3, 3), 16)
    xs, ws = to_layout("NHWC", x.astype(np.float16), w.astype(np.float16))
    xs[1, 4, 6, 0] = np.inf
    xs[0, 7, 2, 2] = -np.inf
    for kwargs in (dict(layout="NHWC", padding=1), dict(layout="NHWC", stride=2)):
        ref = reference.conv2d(xs.astype(np.float64), ws.astype(np.float64), **kwargs)
        y = cupy.asnumpy(im2win.conv2d(cupy.asarray(xs), cupy.asarray(ws), algorithm="narrow",
                                       **kwargs))
        assert (np.isfinite(y) == np.isfinite(ref)).all()
        assert_close(np.where(np.isfinite(ref), y, 0), np.where(np.isfinite(ref), ref, 0),
                     np.float16, 27)


NARROW_FFMA_CASES = [  # float32 stems (narrow_ffma.cu): x (N, C, H, W), w (K, C, R, S)
    ((2, 3, 23, 21), (32, 3, 3, 3), dict(stride=2, padding=1)),          # MobileNet's stem
    ((2, 3, 29, 31), (64, 3, 7, 7), dict(stride=2, padding=3)),          # ResNet's
    ((1, 3, 47, 45), (96, 3, 11, 11), dict(stride=4)),                   # cv1's, K = 96
    ((2, 3, 17, 19), (96, 3, 4, 4), dict(stride=4)),                     # ConvNeXt's
    ((1, 1, 9, 40), (8, 1, 3, 2), dict(dilation=(2, 3), padding=((2, 0), (1, 3)))),  # C = 1
    ((3, 4, 7, 6), (200, 4, 5, 5), dict(stride=(2, 1), padding=2)),      # C = 4, 7 blocks
    ((5, 2, 11, 9), (70, 2, 5, 5), dict(stride=(1, 3), padding=(2, 1))),  # tails of K, Q
    ((2, 3, 9, 300), (64, 3, 3, 3), dict(padding=1)),                    # several tiles a row
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("x_shape, w_shape, kwargs", NARROW_FFMA_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_narrow_ffma_matches_reference(rng, monkeypatch, layout, x_shape, w_shape, kwargs, bias):
    """Every form: filters resident and a row at a time, NCHW y direct and staged, the window
    packed and a plane a channel."""
    from im2win import cuda
    from im2win.cuda import plan as cuda_plan
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0], bias=bias)
    for (resident, stage), packed in itertools.product(
            ((0, False), (1 << 30, layout == "NCHW")), (0, 1 << 30)):
        monkeypatch.setattr(cuda_plan, "NARROW_FFMA_RESIDENT_BYTES", resident)
        monkeypatch.setattr(cuda_plan, "NARROW_FFMA_STAGE_NCHW", stage)
        monkeypatch.setattr(cuda_plan, "NARROW_FFMA_PACKED_REDUCTION", packed)
        monkeypatch.setattr(cuda, "_calls", {})
        run(x, w, b, layout, kwargs, algorithm="narrow")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_narrow_ffma_views_misaligned_out_and_infinities(rng, layout):
    """x a strided view with its rows reversed, out one element off 16 bytes, and an infinity
    in x that reaches only the outputs whose windows hold it."""
    from im2win import cuda
    x, w, b = random_arrays(rng, (2, 3, 14, 17), (64, 3, 3, 3), 64, np.float32)
    x[1, 2, 5, 6] = np.inf
    xs, ws = to_layout(layout, x, w)
    kwargs = dict(layout=layout, stride=2, padding=1)
    prob = make_problem(xs, ws, b, **kwargs)
    wide = cupy.zeros(xs.shape[:3] + (2 * xs.shape[3],), cupy.float32)
    wide[..., ::2] = cupy.asarray(xs)
    view = wide[..., ::2][:, :, ::-1] if layout == "NCHW" else wide[..., ::2][:, ::-1]
    flipped = cupy.asnumpy(view).astype(np.float64)
    ref = reference.conv2d(flipped, ws.astype(np.float64), b.astype(np.float64), **kwargs)
    base = cupy.full(int(np.prod(prob.y_shape)) + 1, np.nan, cupy.float32)
    out = base[1:].reshape(prob.y_shape)
    im2win.conv2d(view, cupy.asarray(ws), cupy.asarray(b), out=out, algorithm="narrow",
                  **kwargs)
    assert cuda._plan(prob, view, cupy.asarray(ws), "narrow", None, None).file == "narrow_ffma"
    y = cupy.asnumpy(out)
    assert (np.isfinite(y) == np.isfinite(ref)).all() and not np.isfinite(ref).all()
    assert_close(np.where(np.isfinite(ref), y, 0), np.where(np.isfinite(ref), ref, 0),
                 np.float32, prob.reduction)


POINTWISE_CASES = [  # x (N, C, H, W), w (K, C, 1, 1): pointwise.cu's 1x1 forms
    ((2, 16, 9, 7), (24, 16, 1, 1)),        # 126 pixels: a full tile and a tail
    ((1, 8, 5, 3), (8, 8, 1, 1)),           # C = K = 8, fewer pixels than one tile
    ((3, 24, 11, 13), (96, 24, 1, 1)),      # C = 16 + 8 (zero columns), K at its most
    ((2, 240, 6, 9), (40, 240, 1, 1)),      # C = 240: 15 steps of 16
    ((4, 32, 29, 31), (16, 32, 1, 1)),      # 3596 pixels: 57 tiles
    ((2, 104, 3, 5), (56, 104, 1, 1)),      # K = 8 * 7
]


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("x_shape, w_shape", POINTWISE_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_pointwise_matches_reference(rng, dtype, x_shape, w_shape, bias):
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0], bias=bias)
    run(x, w, b, "NHWC", {}, dtype=dtype, algorithm="pointwise")


def test_pointwise_blocks_loop_over_many_tiles(rng, monkeypatch):
    """The grid sized for a device of one SM (4 to 8 blocks): each block loops over many tiles,
    copying the next one's rows into the other stage while it multiplies one, and reuses its
    output staging; every output checked, into a new y and into `out`."""
    import weakref
    from im2win import cuda
    from im2win.cuda import launch
    monkeypatch.setattr(launch, "sm_count", lambda device: 1)
    monkeypatch.setattr(launch, "_executables", weakref.WeakValueDictionary())
    monkeypatch.setattr(cuda, "_calls", {})
    for x_shape, w_shape in (((4, 32, 29, 31), (16, 32, 1, 1)),      # 57 tiles, 8 blocks
                             ((3, 24, 11, 13), (96, 24, 1, 1)),      # 7 tiles, 4 blocks
                             ((2, 64, 40, 41), (40, 64, 1, 1)),      # 52 tiles and a tail
                             ((2, 240, 12, 9), (40, 240, 1, 1))):    # 4 tiles, 2 blocks
        x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
        y = run(x, w, b, "NHWC", {}, dtype=np.float16, algorithm="pointwise")
        xs, ws = to_layout("NHWC", x.astype(np.float16), w.astype(np.float16))
        args = (cupy.asarray(xs), cupy.asarray(ws), cupy.asarray(b.astype(np.float16)))
        cupy.testing.assert_array_equal(im2win.conv2d(*args, layout="NHWC"), y)
        prob = make_problem(*args, layout="NHWC")
        plan = cuda._plan(prob, args[0], args[1], "auto", None, None)
        exe = launch.executable(prob, plan)
        assert plan.algorithm == "pointwise" and exe.launches[0][2][0] < plan.geometry.tiles


def test_a_tuned_pointwise_winner_is_not_given_a_misaligned_x(rng, monkeypatch):
    """autotune's winner is remembered for x's alignment too: a shifted x of the same shape
    and strides, which pointwise.cu cannot copy by 16 bytes, gets "auto"'s own choice."""
    from im2win import cuda
    monkeypatch.setattr(cuda, "_tuned", {})
    monkeypatch.setattr(cuda, "_calls", {})
    x, w, _ = random_arrays(rng, (2, 24, 8, 8), (32, 24, 1, 1), 32, bias=False)
    xs, ws = to_layout("NHWC", x.astype(np.float16), w.astype(np.float16))
    base = cupy.zeros((2, 8, 8, 40), cupy.float16)
    base[..., 8:32] = cupy.asarray(xs)
    w_gpu = cupy.asarray(ws)
    assert cuda.autotune(base[..., 8:32], w_gpu, layout="NHWC", algorithms=("pointwise",),
                         repeat=1)[0][0] == "pointwise"
    base[..., 4:28] = cupy.asarray(xs)                    # the same values, 8 bytes off 16
    y = im2win.conv2d(base[..., 4:28], w_gpu, layout="NHWC")
    ref = reference.conv2d(xs.astype(np.float64), ws.astype(np.float64), layout="NHWC")
    assert_close(cupy.asnumpy(y), ref, np.float16, 24)


def test_pointwise_views_misaligned_out_and_filter(rng):
    """x a channel slice of a wider array (pixels 40 apart, read in place), an out and a
    filter one element off 16 bytes (element stores and loads), and "auto" taking it."""
    from im2win import cuda
    x, w, b = random_arrays(rng, (3, 24, 7, 10), (32, 24, 1, 1), 32, bias=True)
    xs, ws = to_layout("NHWC", x.astype(np.float16), w.astype(np.float16))
    bs = b.astype(np.float16)
    ref = reference.conv2d(xs.astype(np.float64), ws.astype(np.float64), bs.astype(np.float64),
                           layout="NHWC")
    wide = cupy.zeros((3, 7, 10, 40), cupy.float16)
    wide[..., 8:32] = cupy.asarray(xs)
    base = cupy.full(ref.size + 1, np.nan, cupy.float16)
    out = base[1:].reshape(ref.shape)
    w_base = cupy.zeros(ws.size + 1, cupy.float16)
    w_base[1:] = cupy.asarray(ws).ravel()
    w_off = w_base[1:].reshape(ws.shape)                 # contiguous, 2 bytes off 16
    im2win.conv2d(wide[..., 8:32], w_off, cupy.asarray(bs), out=out, layout="NHWC",
                  algorithm="pointwise")
    assert_close(cupy.asnumpy(out), ref, np.float16, 24)
    args = (cupy.asarray(xs), cupy.asarray(ws), cupy.asarray(bs))
    assert cuda._plan(make_problem(*args, layout="NHWC"), args[0], args[1], "auto", None,
                      None).algorithm == "pointwise"
    y = im2win.conv2d(*args, layout="NHWC")
    assert_close(cupy.asnumpy(y), ref, np.float16, 24)
    with pytest.raises(ValueError, match="16-byte copies"):     # pixels 36 apart: not 8s
        im2win.conv2d(cupy.zeros((3, 7, 10, 36), cupy.float16)[..., :24], cupy.asarray(ws),
                      layout="NHWC", algorithm="pointwise")


GEMM_CASES = [  # x (N, C, H, W), w (K, C, 1, 1): 1x1, stride 1, no padding
    ((2, 16, 9, 7), (24, 16, 1, 1)),
    ((3, 5, 4, 13), (7, 5, 1, 1)),          # odd C and K: no 16-byte rows
    ((1, 300, 3, 3), (9, 300, 1, 1)),       # a long reduction
    ((4, 1, 6, 5), (3, 1, 1, 1)),           # C = 1
    ((2, 8, 1, 1), (5, 8, 1, 1)),           # one pixel per image
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
@pytest.mark.parametrize("x_shape, w_shape", GEMM_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_pointwise_gemm_matches_reference(rng, layout, dtype, x_shape, w_shape, bias):
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
    for algorithm in ("auto", "gemm"):
        run(x, w, b if bias else None, layout, dict(dilation=2), dtype=dtype,
            algorithm=algorithm)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_pointwise_gemm_reads_views_in_place(rng, layout):
    """A channel slice (NHWC: pixels C + 3 apart; NCHW: channels H*W + 5 apart), an x one
    element past an aligned start, and an out at an odd address."""
    x, w, b = random_arrays(rng, (2, 12, 5, 6), (10, 12, 1, 1), 10)
    xs, ws = to_layout(layout, x.astype(np.float16), w.astype(np.float16))
    ref = reference.conv2d(xs.astype(np.float64), ws.astype(np.float64), b.astype(np.float64),
                           layout=layout)
    if layout == "NHWC":
        wide = cupy.zeros((2, 5, 6, 15), cupy.float16)
        wide[..., 1:13] = cupy.asarray(xs)
        view = wide[..., 1:13]
    else:
        wide = cupy.zeros((2, 12 * 30 + 5 * 12 + 1), cupy.float16)
        planes = wide[:, 1:1 + 12 * 35].reshape(2, 12, 35)[:, :, :30]
        planes[...] = cupy.asarray(xs).reshape(2, 12, 30)
        view = planes.reshape(2, 12, 5, 6)
    prob = make_problem(view, ws, layout=layout)
    base = cupy.full(int(np.prod(prob.y_shape)) + 1, np.nan, cupy.float16)
    out = base[1:].reshape(prob.y_shape)
    y = im2win.conv2d(view, cupy.asarray(ws), cupy.asarray(b.astype(np.float16)), out=out,
                      layout=layout, algorithm="gemm")
    assert y is out
    assert_close(cupy.asnumpy(out), ref, np.float16, 12)


def test_gemm_refuses_what_is_not_one_gemm(rng):
    x = cupy.ones((2, 4, 6, 6), cupy.float32)
    for w_shape, kwargs in [((4, 4, 3, 3), {}), ((4, 4, 1, 1), dict(padding=1)),
                            ((4, 2, 1, 1), dict(groups=2))]:
        with pytest.raises(ValueError, match="algorithm='gemm' cannot run this problem"):
            im2win.conv2d(x, cupy.ones(w_shape, cupy.float32), algorithm="gemm", **kwargs)
    with pytest.raises(ValueError, match="evenly strided"):
        im2win.conv2d(x[:, :, :, ::2], cupy.ones((4, 4, 1, 1), cupy.float32), algorithm="gemm")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("x_shape, w_shape, stride", [
    ((2, 16, 9, 7), (24, 16, 1, 1), (2, 3)),       # H, W not multiples of the stride
    ((3, 40, 8, 8), (9, 40, 1, 1), 2),              # odd K
    ((1, 17, 5, 1), (4, 17, 1, 1), (3, 1)),         # one column, odd C
])
def test_strided_pointwise_gemm_gathers_what_it_reads(rng, layout, dtype, x_shape, w_shape,
                                                      stride):
    """A 1x1 convolution at a stride: the pixels it reads gathered into workspace, then one
    GEMM ("auto" takes it for float32 and float64), from x as given and from a strided view;
    x is left as it was."""
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
    for algorithm in ("auto", "gemm"):
        run(x, w, b, layout, dict(stride=stride), dtype=dtype, algorithm=algorithm)
    xs, ws = to_layout(layout, x.astype(dtype), w.astype(dtype))
    wide = cupy.asarray(np.repeat(xs, 2, axis=0))[::2]          # images 2 apart
    before = wide.copy()
    y = im2win.conv2d(wide, cupy.asarray(ws), layout=layout, stride=stride, algorithm="gemm")
    ref = reference.conv2d(xs.astype(np.float64), ws.astype(np.float64), layout=layout,
                           stride=stride)
    assert_close(cupy.asnumpy(y), ref, dtype, x_shape[1])
    assert cupy.array_equal(wide, before)


NHWC_TWIN_CASES = AWKWARD + [
    ((2, 64, 9, 11), (70, 64, 3, 3), dict(padding=1, stride=(2, 1))),   # the twin copies by TMA
    ((3, 128, 7, 6), (130, 64, 3, 3), dict(groups=2, padding=1)),       # groups, a K tail
]


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("x_shape, w_shape, kwargs", NHWC_TWIN_CASES)
def test_nchw_through_its_nhwc_twin_matches_reference(rng, dtype, x_shape, w_shape, kwargs):
    """algorithm='im2win_nhwc' (forced: the twin's plan on any GPU) and 'auto' (Hopper)."""
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
    for algorithm, bias in (("im2win_nhwc", b), ("im2win_nhwc", None), ("auto", b)):
        run(x, w, bias, "NCHW", kwargs, dtype=dtype, algorithm=algorithm)


NCHW_EPILOGUE_CASES = [  # NCHW problems whose wgmma kernel writes the NCHW y (one work item
    # a tile): on the NHWC twin, and a stem over its window columns (x NCHW-shaped, w)
    ((9, 64, 34, 34), (100, 64, 3, 3), dict(padding=1), "im2win_nhwc"),  # TMA, resident, K tail
    ((9, 128, 34, 34), (130, 64, 3, 3), dict(groups=2, padding=1), "im2win_nhwc"),  # groups
    ((25, 32, 30, 31), (64, 32, 3, 3), dict(padding=1), "im2win_nhwc"),  # boxes of 32, 256x64
    ((33, 24, 40, 41), (40, 24, 3, 3), dict(padding=1), "im2win_nhwc"),  # cp.async, odd P*Q
    ((33, 3, 80, 81), (40, 3, 5, 5), dict(padding=2), "im2win_columns"),  # 754 tiles of 256
]


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("x_shape, w_shape, kwargs, algorithm", NCHW_EPILOGUE_CASES)
def test_nchw_problems_write_the_nchw_y_from_the_epilogue(rng, dtype, x_shape, w_shape, kwargs,
                                                          algorithm):
    """Options.nchw_epilogue: against the reference, and bit for bit the result of the
    kernel writing a channels-last y that layout.cu transposes (the same sums, other
    addresses)."""
    from im2win import cuda
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
    if cuda.compute_capability(cupy.cuda.runtime.getDevice()) == 90:
        prob = make_problem(x.astype(np.float16), w.astype(np.float16), **kwargs)
        arrays = cupy.asarray(x.astype(np.float16)), cupy.asarray(w.astype(np.float16))
        plan = cuda._plan(prob, *arrays, "auto", None, None)
        assert plan.algorithm == algorithm and plan.inner.geometry.y_nchw == 1
    for bias in (b, None):
        y = run(x, w, bias, "NCHW", kwargs, dtype=dtype, algorithm=algorithm)
        transposed = run(x, w, bias, "NCHW", kwargs, dtype=dtype, algorithm=algorithm,
                         options=Options(nchw_epilogue=False))
        cupy.testing.assert_array_equal(y, transposed)


def test_nchw_through_its_nhwc_twin_reads_views_and_writes_views(rng):
    """x a view (every other column, a channel slice), w not contiguous, out a strided view."""
    x, w, b = random_arrays(rng, (2, 80, 9, 22), (64, 64, 3, 3), 64)
    xs = cupy.asarray(x.astype(np.float16))[:, 8:72, :, ::2]
    ws = cupy.asarray(np.ascontiguousarray(w.astype(np.float16).transpose(1, 0, 2, 3)))
    ws = ws.transpose(1, 0, 2, 3)                                  # (64, 64, 3, 3), not C-order
    big = cupy.full((2, 64, 7, 18), np.nan, cupy.float16)
    out = big[:, :, :, ::2]
    y = im2win.conv2d(xs, ws, cupy.asarray(b.astype(np.float16)), out=out,
                      algorithm="im2win_nhwc")
    assert y is out
    ref = reference.conv2d(cupy.asnumpy(xs).astype(np.float64),
                           cupy.asnumpy(ws).astype(np.float64), b.astype(np.float16)
                           .astype(np.float64))
    assert_close(cupy.asnumpy(out), ref, np.float16, 64 * 9)
    assert cupy.isnan(big[:, :, :, 1::2]).all()                   # nothing outside out written


COLUMN_CASES = [  # stems: one group of 1 to 6 channels, S*C at most 64 (x NCHW-shaped, w)
    ((3, 3, 13, 17), (7, 3, 5, 5), dict(padding=2)),                        # a K tail
    ((2, 3, 23, 23), (131, 3, 5, 5), dict(stride=4)),                       # 131 filters
    ((2, 1, 19, 30), (16, 1, 7, 7), dict(stride=2, padding=3)),             # C = 1
    ((2, 5, 11, 12), (24, 5, 3, 4), dict(dilation=(1, 2), padding=((2, 0), (1, 3)))),  # S even
    ((1, 2, 9, 40), (70, 2, 2, 11), dict(stride=(1, 3), padding=(0, 5))),   # S*C = 22
    ((2, 3, 20, 21), (17, 3, 7, 7), dict(stride=2, padding=3)),             # window edges
    ((3, 6, 8, 9), (10, 6, 3, 3), dict(padding="same")),                    # C = 6
    ((2, 3, 29, 30), (96, 3, 11, 11), dict(stride=4, padding=1)),           # cv1's: K = 96
    ((9, 3, 70, 33), (20, 3, 5, 5), dict(padding=2)),   # 630 rows of x: more than the copy's
]                                                       # blocks (4 an SM), which loop


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32])
@pytest.mark.parametrize("x_shape, w_shape, kwargs", COLUMN_CASES)
def test_stems_over_their_window_columns_match_reference(rng, layout, dtype, x_shape, w_shape,
                                                         kwargs):
    """algorithm='im2win_columns' (forced: the R x 1 problem's plan on any GPU), with and
    without bias, and 'auto'."""
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
    for algorithm, bias in (("im2win_columns", b), ("im2win_columns", None), ("auto", b)):
        run(x, w, bias, layout, kwargs, dtype=dtype, algorithm=algorithm)


def test_stems_over_their_window_columns_read_views_and_write_views(rng):
    """x a view (every other column, negative strides along H), w not contiguous, out a
    strided view, both layouts; and what "auto" plans for cv1 on Hopper (cv3: narrow_wgmma.cu's
    dense stem)."""
    from im2win import cuda
    x, w, b = random_arrays(rng, (2, 3, 13, 40), (20, 3, 5, 5), 20)
    for layout, dtype in itertools.product(LAYOUTS, (np.float16, np.float32)):
        xl, wl = to_layout(layout, x.astype(dtype), w.astype(dtype))
        xs = cupy.asarray(xl)[:, ::-1, ::2, :] if layout == "NHWC" else \
            cupy.asarray(xl)[:, :, ::-1, ::2]
        ws = cupy.asarray(np.ascontiguousarray(np.swapaxes(wl, 0, 1)))
        ws = cupy.swapaxes(ws, 0, 1)                                   # not C-order
        prob = make_problem(xs, ws, layout=layout, padding=2)
        big = cupy.full(prob.y_shape[:-1] + (2 * prob.y_shape[-1],), np.nan, dtype)
        out = big[..., ::2]
        y = im2win.conv2d(xs, ws, cupy.asarray(b.astype(dtype)), out=out, layout=layout,
                          padding=2, algorithm="im2win_columns")
        assert y is out
        ref = reference.conv2d(cupy.asnumpy(xs).astype(np.float64),
                               cupy.asnumpy(ws).astype(np.float64),
                               b.astype(dtype).astype(np.float64), layout=layout, padding=2)
        assert_close(cupy.asnumpy(out), ref, dtype, 3 * 25)
        assert cupy.isnan(big[..., 1::2]).all()                   # nothing outside out written
    if cuda.compute_capability(cupy.cuda.runtime.getDevice()) == 90:
        cv1 = (cupy.zeros((128, 227, 227, 3), cupy.float16),
               cupy.zeros((96, 11, 11, 3), cupy.float16))
        prob = make_problem(*cv1, layout="NHWC", stride=4)
        assert cuda._plan(prob, *cv1, "auto", None, None).algorithm == "im2win_columns"
        cv3 = cupy.zeros((128, 227, 227, 3), cupy.float16), cupy.zeros((64, 7, 7, 3), cupy.float16)
        prob = make_problem(*cv3, layout="NHWC", stride=2)
        assert cuda._plan(prob, *cv3, "auto", None, None).kernel == \
            "narrow_rows_wgmma<half_t, 3, 4>"


RUN_CASES = [  # x (N, C, H, W), w (K, C, R, S): float32 stems over their window's runs
    ((2, 3, 29, 30), (96, 3, 11, 11), dict(stride=4, padding=1)),       # cv1's: 363 -> 368
    ((3, 3, 21, 19), (40, 3, 4, 4), dict(stride=4, padding=(1, 2))),    # 48: no tail; K = 40
    ((2, 1, 17, 23), (70, 1, 5, 8), dict(stride=(2, 4), padding=3)),    # C = 1, 40 -> 48
    ((5, 2, 13, 70), (33, 2, 3, 6), dict(stride=2, dilation=(2, 1))),   # dh = 2, 36 -> 48
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("x_shape, w_shape, kwargs", RUN_CASES)
def test_stems_over_their_window_runs_match_reference(rng, layout, x_shape, w_shape, kwargs):
    """algorithm='im2win_runs', fused (each pixel's run built in shared memory from x through
    the table: im2win_ffma.cu's kTaps) and materialised (Options.fused_runs off: the window
    tensor with rows padded to 16 bytes, then im2win_ffma.cu over each pixel's whole run:
    kTail where S*R*C is not a multiple of 16), with and without bias; NCHW through its NCHW
    epilogue and through a channels-last y."""
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
    for fused in (True, False):
        for bias, options in ((b, Options()), (None, Options()),
                              (b, Options(nchw_epilogue=False))):
            options = dataclasses.replace(options, fused_runs=fused)
            run(x, w, bias, layout, kwargs, algorithm="im2win_runs", options=options)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_window_runs_mask_the_next_column_and_read_views(rng, layout):
    """An infinity in the column just past some pixels' runs (the kernel reads it in the
    run's padded last slice) reaches only the outputs whose windows hold it; x a view with
    its rows reversed, out one element off 16 bytes, fused and materialised; and what "auto"
    plans for cv1."""
    from im2win import cuda
    x, w, b = random_arrays(rng, (2, 3, 29, 30), (24, 3, 11, 11), 24, np.float32)
    kwargs = dict(layout=layout, stride=4, padding=1)
    # padded column 11 (x's column 10) follows the run of output column 0; row 3 lies under
    # output row 1 as its tap r = 0 (padded row 4)
    x[0, 1, 28 - 3, 10] = np.inf                      # x's row 3 once the rows are reversed
    x[0, 0, 28 - 3, 10] = np.inf                      # (363: the last float4 masked in part)
    xs, ws = to_layout(layout, x, w)
    view = cupy.asarray(xs)[:, :, ::-1] if layout == "NCHW" else cupy.asarray(xs)[:, ::-1]
    flipped = cupy.asnumpy(view).astype(np.float64)
    ref = reference.conv2d(flipped, ws.astype(np.float64), b.astype(np.float64), **kwargs)
    prob = make_problem(view, ws, b, **kwargs)
    for fused in (True, False):
        base = cupy.full(int(np.prod(prob.y_shape)) + 1, np.nan, cupy.float32)
        out = base[1:].reshape(prob.y_shape)
        im2win.conv2d(view, cupy.asarray(ws), cupy.asarray(b), out=out,
                      algorithm="im2win_runs", options=Options(fused_runs=fused), **kwargs)
        y = cupy.asnumpy(out)
        finite = ref[0, :, 1, 0] if layout == "NCHW" else ref[0, 1, 0, :]
        assert np.isfinite(finite).all()              # output (1, 0) never holds it ...
        assert (np.isfinite(y) == np.isfinite(ref)).all() and not np.isfinite(ref).all()
        assert_close(np.where(np.isfinite(ref), y, 0), np.where(np.isfinite(ref), ref, 0),
                     np.float32, prob.reduction)
    cv1 = (cupy.zeros((128, 227, 227, 3), cupy.float32),
           cupy.zeros((96, 11, 11, 3), cupy.float32))
    cv1 = cv1 if layout == "NHWC" else tuple(a.transpose(0, 3, 1, 2) for a in cv1)
    prob = make_problem(*cv1, layout=layout, stride=4)
    plan = cuda._plan(prob, *cv1, "auto", None, None)
    assert plan.algorithm == "im2win_runs" and plan.inner.kernel.endswith(", true>")
    # autotune takes it on the planner's tile (its tiles are im2win_ffma.cu's 16-deep ones)
    results = cuda.autotune(view, cupy.asarray(ws), cupy.asarray(b), stride=4, padding=1,
                            layout=layout, algorithms=("auto", "im2win_runs"), repeat=1)
    assert sorted(r[:2] for r in results) == [("auto", None), ("im2win_runs", None)]


SPLIT_CASES = [  # NHWC problems with few tiles: split-K (TMA copies: C/G a multiple of 64 or 32)
    ((2, 768, 7, 7), (160, 768, 1, 1), dict()),                     # 1x1: 4 ranges of 3 slices
                                                                    # (SPLIT_MIN_SLICES lowered)
    ((2, 128, 7, 7), (200, 128, 3, 3), dict(padding=1)),            # 3x3, a filter tail
    ((1, 256, 5, 6), (96, 64, 3, 3), dict(groups=4, padding=1)),    # groups
]


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("x_shape, w_shape, kwargs", SPLIT_CASES)
def test_split_k_matches_reference_and_repeats_bit_for_bit(rng, monkeypatch, dtype, x_shape,
                                                           w_shape, kwargs):
    if not hopper():
        pytest.skip("split-K runs on the Hopper kernel's TMA form")
    from im2win import cuda
    from im2win.cuda import plan as cuda_plan
    # Splits of a few slices (the planner's rule asks for more; it is plan-tested), and no
    # call remembered from before the change.
    monkeypatch.setattr(cuda_plan, "SPLIT_MIN_SLICES", 3)
    monkeypatch.setattr(cuda, "_calls", {})
    # split-K's own capture below: a 1x1 layer would run cuBLAS's GEMM there (graph_plan,
    # test_interop's test of it)
    monkeypatch.setattr(cuda_plan, "graph_plan", lambda *args: None)
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
    xs, ws = to_layout("NHWC", x.astype(dtype), w.astype(dtype))
    prob = make_problem(xs, ws, layout="NHWC", **kwargs)
    plan = cuda._plan(prob, cupy.asarray(xs), cupy.asarray(ws), "auto", None, None)
    assert plan.splits > 1 and plan.tma is not None
    first = run(x, w, b, "NHWC", kwargs, dtype=dtype)
    again = run(x, w, b, "NHWC", kwargs, dtype=dtype)
    cupy.testing.assert_array_equal(first, again)                # no atomics: the same bits
    # A new y (the call by pointers, its partial sums from CuPy's pool), then the same call
    # captured into a graph (partial sums the graph's own) and replayed.
    args = (cupy.asarray(xs), cupy.asarray(ws), cupy.asarray(b.astype(dtype)))
    for _ in range(2):
        cupy.testing.assert_array_equal(im2win.conv2d(*args, layout="NHWC", **kwargs), first)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        captured = im2win.conv2d(*args, layout="NHWC", **kwargs)
        graph = stream.end_capture()
    captured.fill(np.nan)
    graph.launch()
    cupy.cuda.Device().synchronize()
    cupy.testing.assert_array_equal(captured, first)
    try:
        import torch
    except ImportError:
        torch = None
    if dtype == np.float16 and torch is not None and torch.cuda.is_available():
        tensors = [torch.from_dlpack(a) for a in args]    # seen once, then by pointers
        for _ in range(2):
            y = im2win.conv2d(*tensors, layout="NHWC", **kwargs)
            cupy.testing.assert_array_equal(cupy.from_dlpack(y), first)
    run(x, w, None, "NHWC", kwargs, dtype=dtype)
    run(x, w, b, "NHWC", kwargs, dtype=dtype, options=Options(split_k=False))
    # NCHW on the NHWC twin: the sum writes the NCHW y (split_reduce_nchw).
    xn, wn = x.astype(dtype), w.astype(dtype)
    twin = cuda._plan(make_problem(xn, wn, layout="NCHW", **kwargs), cupy.asarray(xn),
                      cupy.asarray(wn), "im2win_nhwc", None, None)
    assert twin.inner.splits > 1 and twin.inner.geometry.y_nchw == 1
    run(x, w, b, "NCHW", kwargs, dtype=dtype, algorithm="im2win_nhwc")
TF32_CASES = [  # x (N, C, H, W), w (K, C/G, R, S), keyword arguments: all NHWC, C/G % 32 == 0
    ((2, 64, 9, 11), (70, 64, 3, 3), dict(padding=1, stride=(2, 1))),    # K tail, stride
    ((3, 32, 7, 6), (40, 32, 1, 1), dict()),                              # reduction of 32
    ((2, 256, 6, 5), (64, 256, 3, 3), dict(padding=1)),                   # 2304 long
    ((2, 128, 8, 8), (96, 32, 3, 3), dict(groups=4, padding=1, dilation=2)),   # groups of 32
    ((2, 3, 20, 21), (17, 3, 7, 7), dict(stride=2, padding=3)),   # a stem: window columns
]
SCALES = [(1.0, 1.0), (2.0 ** 100, 2.0 ** -100), (1e-30, 1e-5)]   # the exponent range


@pytest.mark.parametrize("x_shape, w_shape, kwargs", TF32_CASES)
@pytest.mark.parametrize("scale", SCALES)
def test_float32_on_tensor_cores_keeps_its_accuracy(rng, x_shape, w_shape, kwargs, scale):
    """'3xtf32' within 1.5x of the FP32 path's error (the issue's bound) and within float32's
    tolerance; 'tf32' within its own (four TF32 units more); float64 reference on the same
    float32 inputs."""
    if not hopper():
        pytest.skip("float32 on Tensor Cores runs on the Hopper kernel")
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0])
    x, w = (a.astype(np.float32) * np.float32(s) for a, s in zip((x, w), scale))
    b = (b * scale[0] * scale[1]).astype(np.float32)
    xs, ws = to_layout("NHWC", x, w)
    prob = make_problem(xs, ws, b, layout="NHWC", **kwargs)
    ref = reference.conv2d(xs.astype(np.float64), ws.astype(np.float64), b.astype(np.float64),
                           layout="NHWC", **kwargs)
    errors = {}
    for precision in ("float32", "3xtf32", "tf32"):
        out = cupy.full(prob.y_shape, np.nan, np.float32)
        y = im2win.conv2d(cupy.asarray(xs), cupy.asarray(ws), cupy.asarray(b), layout="NHWC",
                          out=out, precision=precision, **kwargs)
        assert y is out
        errors[precision] = relative_error(cupy.asnumpy(y), ref)
    assert errors["3xtf32"] <= max(1.5 * errors["float32"], 2 * np.finfo(np.float32).eps), errors
    assert errors["3xtf32"] <= allowed_error(np.float32, prob.reduction), errors
    assert errors["tf32"] <= allowed_error(np.float32, prob.reduction, "tf32"), errors
    assert errors["tf32"] > errors["3xtf32"], errors        # TF32 alone is less accurate


@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
def test_float32_on_tensor_cores_runs_nchw_on_its_nhwc_twin(rng, precision):
    """NCHW at a Tensor-Core precision (channels-last copies, the twin's epilogue writing the
    NCHW y): the NHWC call's bits, transposed, and within the precision's bound of the float64
    reference; a stride, padding, a filter tail, a bias, a sliced (non-contiguous) x."""
    if not hopper():
        pytest.skip("float32 on Tensor Cores runs on the Hopper kernel")
    x_all, w, b = random_arrays(rng, (4, 64, 11, 9), (70, 64, 3, 3), 70, np.float32)
    x = x_all[::2]                                               # every other image: a view
    kwargs = dict(stride=(2, 1), padding=1)
    out = cupy.full((2, 70, 6, 9), np.nan, np.float32)
    y = im2win.conv2d(cupy.asarray(x_all)[::2], cupy.asarray(w), cupy.asarray(b), out=out,
                      precision=precision, **kwargs)
    assert y is out
    xs, ws = (np.ascontiguousarray(a) for a in to_layout("NHWC", x, w))
    y_nhwc = im2win.conv2d(cupy.asarray(xs), cupy.asarray(ws), cupy.asarray(b), layout="NHWC",
                           precision=precision, **kwargs)
    assert np.array_equal(cupy.asnumpy(y), cupy.asnumpy(y_nhwc).transpose(0, 3, 1, 2))
    ref = reference.conv2d(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64),
                           **kwargs)
    assert relative_error(cupy.asnumpy(y), ref) <= allowed_error(np.float32, 64 * 9, precision)


def test_float32_on_tensor_cores_refuses_what_it_cannot_run(rng):
    x = cupy.asarray(rng.uniform(-1, 1, (2, 9, 9, 48)).astype(np.float32))
    w = cupy.asarray(rng.uniform(-1, 1, (8, 3, 3, 48)).astype(np.float32))
    with pytest.raises(ValueError, match="precision='3xtf32' cannot run this problem"):
        im2win.conv2d(x, w, layout="NHWC", precision="3xtf32")         # 48 channels
    with pytest.raises(ValueError, match="float32 inputs only"):
        im2win.conv2d(x.astype(cupy.float16), w.astype(cupy.float16), layout="NHWC",
                      precision="tf32")
