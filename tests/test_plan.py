"""The GPU planner is pure: its choices, offsets and errors are tested here without a GPU."""

import dataclasses
import itertools
import re
import types

import ml_dtypes
import numpy as np
import pytest

from helpers import contiguous_strides
from im2win import reference
from im2win.cuda import TILES, Options
from im2win.cuda.plan import (CUDA_TYPES, GEOMETRY_64BIT, KERNEL_DIR, DepthwiseTile, Geometry,
                              depthwise_tile, geometry, graph_plan, inner_options, make_plan,
                              reduction_taps,
                              instantiable, reduction_tables, specializations,
                              window_bytes)
from im2win.cuda.tuning import FFMA_TILES, NO_MICRO_KERNEL, WGMMA_TILES, choose_tile
from im2win.layers import LAYERS
from im2win.problem import make_problem


def problem(x_shape, w_shape, dtype=np.float32, **kwargs):
    return make_problem(np.empty(x_shape, dtype), np.empty(w_shape, dtype), **kwargs)


def plan_for(prob, **kwargs):
    return make_plan(prob, x_strides=contiguous_strides(prob), w_aligned=True, **kwargs)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("window_order", [False, True])
def test_offsets_address_the_operand_exactly(rng, layout, window_order):
    """base(pixel) + off(t) picks B[t, pixel] out of x (fused) or x_win (materialised)."""
    x = rng.standard_normal((2, 6, 9, 8))
    w = np.zeros((4, 3, 3, 2))
    kwargs = dict(groups=2, stride=(2, 1), dilation=(1, 2), padding=((1, 2), (2, 0)))
    if layout == "NHWC":
        x, w = x.transpose(0, 2, 3, 1).copy(), w.transpose(0, 2, 3, 1).copy()
    prob = make_problem(x, w, layout=layout, **kwargs)
    fused = not window_order
    geo = geometry(prob, fused, prob.N, contiguous_strides(prob))
    c, r, s = reduction_taps(prob, window_order)
    off = c * geo.sc + r * geo.sr + s * geo.ss
    x_win = reference.image_to_window(x, prob.R, stride=prob.sh, dilation=prob.dh,
                                      padding=((prob.pt, prob.pb), (prob.pl, prob.pr)),
                                      layout=layout)
    xp = np.pad(x if layout == "NCHW" else x.transpose(0, 3, 1, 2),
                ((0, 0), (0, 0), (prob.pt, prob.pb), (prob.pl, prob.pr)))
    src = (x if fused else x_win).ravel()
    for n, g, p, q in np.ndindex(prob.N, prob.G, prob.P, prob.Q):
        base = (n * geo.sn + g * geo.sg + p * geo.sp + q * geo.sq + geo.base0)
        h, col = p * prob.sh - prob.pt + r * prob.dh, q * prob.sw - prob.pl + s * prob.dw
        inside = (h >= 0) & (h < prob.H) & (col >= 0) & (col < prob.W)
        expected = xp[n, g * prob.Cg + c, p * prob.sh + r * prob.dh, q * prob.sw + s * prob.dw]
        got = src[np.where(inside | (not fused), base + off, 0)] * (inside | (not fused))
        np.testing.assert_array_equal(got, expected)


def test_tables_hold_the_offsets_and_taps():
    prob = problem((1, 4, 9, 9), (2, 4, 3, 2), dilation=(2, 3))
    geo = geometry(prob, True, 1, contiguous_strides(prob))
    off, hw = reduction_tables(prob, geo, window_order=False)
    c, r, s = reduction_taps(prob, False)
    np.testing.assert_array_equal(off, c * 81 + r * 2 * 9 + s * 3)
    np.testing.assert_array_equal(hw >> 16, r * 2)
    np.testing.assert_array_equal(hw & 0xFFFF, s * 3)


def test_the_plan_owns_its_table_and_falls_back_to_computed_offsets():
    prob = problem((1, 700, 6, 6), (5, 700, 3, 3))
    plan = plan_for(prob)
    assert plan.tables and len(plan.taps) == 8 * 6336         # no length limit; whole slices
    taps = np.frombuffer(plan.taps, np.int32).reshape(-1, 2)
    np.testing.assert_array_equal(taps[:6300].T, reduction_tables(prob, plan.geometry, False))
    assert not taps[6300:].any()
    assert plan_for(problem((1, 6, 6, 6), (5, 6, 3, 3)),
                    options=Options(index_tables=False)).tables is False
    huge = make_problem(types.SimpleNamespace(shape=(1, 2, 50000, 50000), dtype=np.float16),
                        np.empty((5, 2, 3, 3), np.float16), stride=2)  # off(t) > 2**31
    assert plan_for(huge).tables is False


def test_plans_are_immutable_and_hashable():
    plan = plan_for(problem((2, 6, 9, 9), (5, 6, 3, 3)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.chunk = 1
    with pytest.raises(AttributeError):
        plan.geometry.npix = 1
    assert hash(plan) == hash(plan_for(problem((2, 6, 9, 9), (5, 6, 3, 3))))


def test_geometry_matches_the_kernel_struct():
    """One contract: Geometry (Python) and struct Geometry (gemm.cuh) agree field by field."""
    header = (KERNEL_DIR / "gemm.cuh").read_text()
    body = re.search(r"struct Geometry \{(.*?)\};", header, re.S).group(1)
    fields = [(name.strip(), 64 if kind == "i64" else 32)
              for kind, names in re.findall(r"^\s*(i64|int) ([^;]+);", body, re.M)
              for name in names.split(",")]
    assert [name for name, _ in fields] == list(Geometry._fields)
    assert [bits for _, bits in fields] == [64] * GEOMETRY_64BIT + \
        [32] * (len(Geometry._fields) - GEOMETRY_64BIT)


def test_wgrad_ffma_arguments_match_the_kernel_struct():
    """wgrad_ffma.ARGS (Python) and struct WgradFfmaArgs (wgrad_ffma.cu) agree field by field."""
    from im2win.cuda import wgrad_ffma
    text = (KERNEL_DIR / "wgrad_ffma.cu").read_text()
    body = re.search(r"struct WgradFfmaArgs \{(.*?)\};", text, re.S).group(1)
    fields = [(name.strip(), np.int64 if kind == "i64" else np.int32)
              for kind, names in re.findall(r"^\s*(i64|int) ([^;]+);", body, re.M)
              for name in names.split(",")]
    assert [name for name, _ in fields] == list(wgrad_ffma.ARGS.names)
    assert [np.dtype(kind) for _, kind in fields] == \
        [wgrad_ffma.ARGS.fields[name][0] for name in wgrad_ffma.ARGS.names]


def test_planner_tile_choices_follow_the_table():
    assert choose_tile(16, 10**6, 300, "NCHW", "float32") == "32x128"
    assert choose_tile(96, 10**6, 363, "NCHW", "float32") == "128x64k16"
    assert choose_tile(64, 10**6, 147, "NHWC", "float32") == "64x64"
    assert choose_tile(64, 10**6, 1568, "NCHW", "float32") == "64x64k16"
    assert choose_tile(128, 2 * 10**6, 576, "NCHW", "float32") == "128x128"
    assert choose_tile(128, 2 * 10**6, 576, "NHWC", "float32") == "128x128k16"
    assert choose_tile(512, 3200, 4608, "NCHW", "float32") == "128x64k16"
    assert choose_tile(512, 12800, 2304, "NCHW", "float32") == "128x64"
    assert choose_tile(512, 3200, 4608, "NCHW", "float64") == "64x64"


def test_every_tile_the_planner_picks_for_the_layers_is_compiled_in_ci():
    """Under the full set CI compiles the layers' kernels; under each optimisation off alone
    (the ablation) they are listed (plan.instantiable), compiled where they run."""
    compiled = {expr for _, expr in specializations()}
    listed = {expr for _, expr in instantiable()}
    for layer in LAYERS.values():
        for layout in ("NCHW", "NHWC"):
            for dtype in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64):
                x_shape, w_shape = layer.shapes(128, layout)
                prob = problem(x_shape, w_shape, dtype, stride=layer.stride, layout=layout)
                for algorithm in ("im2win", "im2win_fused"):
                    # bfloat16 under the full set only: each switch's code is float16's
                    sets = [Options()] if dtype is ml_dtypes.bfloat16 else [
                        *Options.ablations().values(),
                        *Options.ablations(tensor_cores=True).values(),
                        *Options.ablations(hopper=True).values()]
                    for options in sets:
                        for arch in (80, 90):
                            kernel = plan_for(prob, algorithm=algorithm, options=options,
                                              arch=arch).kernel
                            assert kernel in (compiled if options == Options() else listed)


def test_every_tensor_core_kernel_the_planner_picks_for_the_networks_is_compiled_in_ci():
    """Under each optimisation off alone only the tiles `Family.choose` can pick are listed
    (plan.tensor_core_specializations): every network layer's plan is among them; under the
    full set CI compiles it."""
    from im2win.networks import NETWORKS
    compiled = {expr for _, expr in specializations()}
    listed = {expr for _, expr in instantiable()}
    option_sets = {*Options.ablations(tensor_cores=True).values(),
                   *Options.ablations(hopper=True).values()}
    for conv in (c for net in NETWORKS.values() for c in net):
        for layout in ("NCHW", "NHWC"):
            x_shape, w_shape = conv.shapes(32, layout)
            prob = problem(x_shape, w_shape, np.float16, layout=layout, **conv.kwargs)
            for options in option_sets:
                for arch, algorithm in itertools.product((80, 90), ("auto", "im2win_fused")):
                    plan = plan_for(prob, algorithm=algorithm, options=options, arch=arch)
                    known = compiled if options in (Options(), Options(hopper=False)) else listed
                    for kernel in (plan.kernel, plan.inner and plan.inner.kernel):
                        assert kernel in known | {None}, (conv.name, layout, options, arch)


def test_workspace_limit_chunks_whole_images():
    prob = problem((10, 3, 20, 20), (4, 3, 3, 3), padding=1)
    per_image = window_bytes(prob, 1)
    assert per_image == 3 * 20 * 22 * 3 * 4
    assert plan_for(prob, algorithm="im2win").chunk == 10
    filter_bytes = 4 * 3 * 3 * 3 * 4                      # the filter in window order
    plan = plan_for(prob, algorithm="im2win", workspace_limit=3 * per_image + filter_bytes)
    assert plan.chunk == 3 and plan.workspace_bytes == 3 * per_image + filter_bytes
    assert plan_for(prob, algorithm="im2win_fused", workspace_limit=0).workspace_bytes == 0
    with pytest.raises(ValueError, match="smaller than one image's window tensor"):
        plan_for(prob, algorithm="im2win", workspace_limit=per_image + filter_bytes - 1)
    no_channels = problem((2, 0, 8, 8), (4, 0, 3, 3))
    assert plan_for(no_channels, algorithm="im2win", workspace_limit=0).chunk == 2


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(algorithm="fft"), ValueError, "algorithm must be one of"),
    (dict(algorithm=3), TypeError, "algorithm must be a string"),
    (dict(workspace_limit=-1), ValueError, "non-negative"),
    (dict(workspace_limit=1.5), TypeError, "workspace_limit must be an int"),
    (dict(options="fast"), TypeError, "options must be an im2win.cuda.Options"),
    (dict(tile="256x256"), ValueError, "tile must be one of"),
])
def test_bad_plan_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        plan_for(problem((1, 3, 8, 8), (4, 3, 3, 3)), **kwargs)


def test_tiles_that_overflow_shared_memory_are_refused():
    prob = problem((1, 3, 8, 8), (4, 3, 3, 3), np.float64)
    with pytest.raises(ValueError, match="more than 48 KB of shared memory"):
        plan_for(prob, tile="32x128")
    assert plan_for(prob).tile.fits(8)


def test_options_validate_themselves():
    with pytest.raises(TypeError, match="Options.smem must be a bool"):
        Options(smem=1)
    ablations = Options.ablations()
    assert ablations["full"] == Options() and len(ablations) == 13
    assert not ablations["no_double_buffer"].double_buffer
    assert plan_for(problem((1, 5, 8, 8), (4, 5, 3, 3)),
                    options=ablations["no_micro_kernel"]).tile.name == NO_MICRO_KERNEL
    assert {t.threads for t in TILES.values()} == {256}


def test_float16_runs_on_tensor_cores_with_16_byte_copies_where_runs_allow():
    nhwc = problem((2, 9, 9, 16), (8, 3, 3, 16), np.float16, layout="NHWC")
    plan = plan_for(nhwc)
    assert plan.tensor_cores and plan.geometry.redp == 160
    assert plan.kernel.startswith("im2win_mma<half_t, true, true") and ", true, true, true, true>" in \
        plan.kernel                                           # cp.async, 16-byte B, ldmatrix...
    odd = plan_for(problem((2, 9, 9, 3), (8, 3, 3, 3), np.float16, layout="NHWC"),
                   algorithm="im2win_fused")                  # "auto": narrow.cu's stem
    assert odd.geometry.redp == 32 and "3, true, false," in odd.kernel   # C = 3: no 16-byte B
    assert not plan_for(nhwc, options=Options(tensor_cores=False)).tensor_cores
    with pytest.raises(ValueError, match="on Tensor Cores"):
        plan_for(nhwc, tile="128x128")


def test_call_keys_tell_apart_what_compares_equal():
    """The memo of GPU calls keys arguments with their types: True == 1 and 1.0 == 1, but a
    remembered stride=1 must not let stride=True or 1.0 skip validation."""
    from im2win.cuda import _NoKey, _exact, _exact_args
    assert _exact([1, (2, 3)]) == (1, (2, 3)) and _exact("same") == "same"
    for bad in (True, 1.0, np.int64(1), (1, True), [1.0, 2]):
        with pytest.raises(_NoKey):
            _exact(bad)
        with pytest.raises(_NoKey):
            _exact_args((1, bad, None))
    for args in [((1, 1), (0, 0), (1, 1), 1, "NHWC", "auto", None, None),
                 (1, [2, 3], ((1, 0), (2, 2)), 1, "NCHW", "auto", 5, "float32")]:
        assert _exact_args(args) == _exact(args)          # the fast path's key is _exact's


def test_memos_forget_the_oldest_past_their_bound(monkeypatch):
    from im2win import cuda
    monkeypatch.setattr(cuda, "MAX_CALLS", 3)
    memo = {}
    for i in range(5):
        cuda._remember(memo, i, str(i))
    assert memo == {2: "2", 3: "3", 4: "4"}


def test_the_hopper_kernel_is_chosen_by_device_and_where_it_pays():
    cv8 = problem((128, 112, 112, 64), (128, 3, 3, 64), np.float16, layout="NHWC")
    cv1 = problem((128, 227, 227, 3), (96, 11, 11, 3), np.float16, stride=4, layout="NHWC")
    assert plan_for(cv8, arch=90).file == "im2win_wgmma"
    assert plan_for(cv8, arch=80).file == "im2win_mma"
    assert plan_for(cv8).file == "im2win_mma"                            # device unknown
    assert plan_for(cv8, arch=90, options=Options(hopper=False)).file == "im2win_mma"
    fused = plan_for(cv1, arch=90, algorithm="im2win_fused")
    assert fused.file == "im2win_mma"                                   # C = 3: gathers
    assert plan_for(cv1, arch=90).algorithm == "im2win_columns"        # "auto": see below
    assert plan_for(cv1, arch=90, tile="wg256x96").file == "im2win_wgmma"  # forced
    plan = plan_for(cv8, arch=90)
    # cv8: one filter tile of 128 (9 slices of 64 channels) stays in shared memory beside a
    # ring of 5 window tiles (TMA copies: no pixel table); 128x128 tiles, the consumers in turn.
    assert plan.persistent and plan.resident == 9 and plan.tile.name == "wg128x128"
    assert plan.smem == plan.tile.smem_bytes(5, resident=9, table=False) <= 227 * 1024
    assert plan.tile.smem_bytes(6, resident=9, table=False) > 227 * 1024
    assert plan.kernel == "im2win_wgmma_tma<half_t, 128, 128, 5, true, true, true, false>"
    plain = plan_for(cv8, arch=90, options=Options(resident_filter=False, ping_pong=False,
                                                   multicast=False))
    assert plain.resident == 0 and plain.smem == plain.tile.smem_bytes(table=False) <= 227 * 1024
    assert plain.cluster == 1 and plain.tma.w_box == (64, 128)
    assert plain.kernel == "im2win_wgmma_tma<half_t, 128, 128, 6, true, false, false, false>"
    # Options(multicast=True), the filter not resident: clusters of two, each block's TMA box
    # half of each slice's 128 filter rows
    plain = plan_for(cv8, arch=90, options=Options(resident_filter=False, ping_pong=False,
                                                   multicast=True))
    assert plain.kernel == "im2win_wgmma_tma_mc<half_t, 128, 128, 6, false, false, 2>"
    assert plain.cluster == 2 and plain.tma.w_box == (64, 64)
    # cv4: 200 KB of filter, too large to stay beside the ring
    cv4 = problem((128, 224, 224, 32), (64, 7, 7, 32), np.float16, layout="NHWC", stride=2)
    # multicast by default where the launch has at least MULTICAST_MIN_TILES work items: cv4's
    # 5941 tiles, not cv10's 784 (cv4 itself runs on rows_wgmma.cu unless window_rows is off)
    wide = Options(window_rows=False)
    assert plan_for(cv4, arch=90, options=wide).kernel == \
        "im2win_wgmma_tma_mc<half_t, 256, 64, 5, true, true, 2>"
    assert plan_for(cv4, arch=90).kernel == "rows_wgmma<half_t, 1, 3, 14>"
    cv10 = problem((128, 28, 28, 128), (128, 3, 3, 128), np.float16, layout="NHWC", padding=1)
    assert plan_for(cv10, arch=90, options=Options(resident_filter=False)).cluster == 1
    assert plan_for(cv4, arch=90, options=Options(multicast=False, window_rows=False)
                    ).cluster == 1
    assert plan_for(cv4, arch=90, options=Options(multicast=True, persistent=False,
                                                  window_rows=False)).cluster == 1
    # 256 filters: two filter tiles, so nothing stays resident; 288 tiles, under
    # PING_PONG_TILES: the consumers share each tile.
    cv11 = problem((128, 14, 14, 256), (256, 3, 3, 256), np.float16, layout="NHWC")
    assert plan_for(cv11, arch=90).resident == 0
    assert plan_for(cv11, arch=90).kernel == \
        "im2win_wgmma_tma<half_t, 128, 128, 6, true, false, false, false>"
    plan = plan_for(cv8, arch=90, options=Options(tma=False))
    assert plan.persistent and plan.smem == plan.tile.smem_bytes() <= 227 * 1024
    assert plan.geometry.redp % 64 == 0 and len(plan.taps) % (64 * 8) == 0
    single = plan_for(cv8, arch=90, options=Options(double_buffer=False))
    assert single.resident == 0 and single.smem == single.tile.smem_bytes(1, table=False)
    bf16 = problem((2, 9, 9, 16), (128, 3, 3, 16), ml_dtypes.bfloat16, layout="NHWC")
    assert "bf16_t" in plan_for(bf16, arch=90, tile="wg128x128").kernel
    assert plan_for(bf16, options=Options(tensor_cores=False)).file == "im2win_mma"


def test_stems_and_narrow_groups_get_the_narrow_kernel():
    from im2win.cuda.plan import NarrowArgs, narrow_pitch, narrow_wgmma_takes
    stem = problem((32, 224, 224, 3), (32, 3, 3, 3), np.float16, layout="NHWC", stride=2,
                   padding=1)                                             # mobilenet_v2.0
    plan = plan_for(stem, arch=90)
    assert plan.algorithm == "narrow" and isinstance(plan.geometry, NarrowArgs)
    # C = 3 < 8, taps adjacent, x aligned: the stem packed densely (3 rows of 9 -> 10 products,
    # 32 a reduction), 256 pixels a block, raw rows by cp.async
    assert plan.kernel == "narrow_dense<half_t, 32, 2>"
    tp, tq = plan.geometry.ints[-2:]
    assert (tp, tq) == (2, 112) and plan.geometry.tiles == 32 * 56
    # two blocks an SM (registers), each looping over an even share of the 1792 tiles
    assert plan.geometry.per_sm == 2 and plan.geometry.grid(stem, 132) == (256, 1, 1)
    rows, cols = 1 * 2 + 3, 111 * 2 + 3                                  # the tile's window
    win = rows * 680                     # a stored row: 225 * 3 + 2 elements, to 8, twice
    raw = 2 * 2 * rows * 696             # two buffers of rows of 225 * 3 + 16, to 8
    stage = 8 * 32 * 40 * 2              # each warp's 32 pixels of 32 channels (+8)
    assert plan.smem == (2 * 32 * narrow_pitch(32) + 2 * 64 * 2 + 4 * 32 + 4 * 256 + 2 * 2 * win
                         + raw + stage)
    # not aligned (element copies) or taps apart (dilation): C padded to 8, as raw rows or not
    assert plan_for(stem, x_aligned=False).kernel == \
        "narrow_nhwc<half_t, 8, 32, 4, 4, true, false>"
    dilated = problem((32, 224, 224, 3), (32, 3, 3, 3), np.float16, layout="NHWC", stride=2,
                      padding=2, dilation=2)
    plan = plan_for(dilated, algorithm="narrow")
    assert plan.kernel == "narrow_nhwc<half_t, 8, 32, 4, 4, true, true>"
    assert plan_for(stem, arch=86).geometry.per_sm == 1               # 100 KB an SM there
    # "auto": dense stems up to 7x7 of 3 channels (ResNet's, ConvNeXt's 4x4 stride 4), not
    # 11x11 (cv1)
    for taken in (problem((32, 224, 224, 3), (64, 7, 7, 3), np.float16, layout="NHWC",
                          stride=2, padding=3),
                  problem((32, 224, 224, 3), (96, 4, 4, 3), np.float16, layout="NHWC",
                          stride=4)):
        assert plan_for(taken).kernel.startswith("narrow_dense<half_t, ")
    # on Hopper, dense stems of 64 filters at stride 2 run narrow_rows_wgmma (cv3's: a block of
    # 384 threads an SM over a contiguous run of the 128 * 111 output rows; a ring of 7 * 2 +
    # 3 * 2 rows of 230 columns, two copies each (S odd), and a slot of zeros; x's raw rows
    # copied ahead; 4 atoms of the filters' 7 rows of 32)
    cv3 = problem((128, 227, 227, 3), (64, 7, 7, 3), np.float16, layout="NHWC", stride=2)
    rows = plan_for(cv3, arch=90)
    assert (rows.file, rows.kernel) == ("narrow_wgmma", "narrow_rows_wgmma<half_t, 3, 4>")
    assert rows.geometry.ints[-2:] == (1, 111) and rows.geometry.tiles == 128 * 111
    assert rows.geometry.block == (384, 1, 1) and rows.geometry.grid(cv3, 132) == (132, 1, 1)
    assert rows.smem == (1024 + 4 * 64 * 128 + 21 * 2 * 230 * 8 + 26 * 1376 + 2 * 112 * 144 +
                         256 + 128 + 64)          # raw rows: 227 * 3 * 2 + 14 to 16, 7 * 2 + 6 * 2
    on = Options(stem_rows=True)
    for other in (dict(stride=1), dict(stride=2, dilation=(1, 2))):   # sw != 2, dw != 1
        assert not plan_for(problem((8, 64, 64, 3), (64, 7, 7, 3), np.float16, layout="NHWC",
                                    **other), arch=90, algorithm="narrow",
                            options=on).kernel.startswith("narrow_rows")
    assert not plan_for(problem((8, 64, 64, 3), (64, 9, 7, 3), np.float16, layout="NHWC",
                                stride=2), arch=90, algorithm="narrow",
                        options=on).kernel.startswith("narrow_rows")    # 18 k16 steps > 16
    assert plan_for(problem((8, 64, 64, 3), (64, 5, 5, 3), np.float16, layout="NHWC", stride=2),
                    arch=90, algorithm="narrow",
                    options=on).kernel.startswith("narrow_dense_wgmma")  # S = 5
    # ... else (Options(stem_rows=False)) narrow_dense_wgmma: tiles of one output row, 111
    # pixels, one block of 384 threads an SM over the 128 * 111 tiles
    wg = plan_for(cv3, arch=90, options=Options(stem_rows=False))
    assert (wg.file, wg.kernel) == ("narrow_wgmma", "narrow_dense_wgmma<half_t, 64, 4>")
    assert wg.geometry.ints[-2:] == (1, 111) and wg.geometry.tiles == 128 * 111
    assert wg.geometry.block == (384, 1, 1) and wg.geometry.grid(cv3, 132) == (132, 1, 1)
    steps, wr = 10, 696              # 7 rows of 22 -> 160 products; 227 * 3 + 9 to 8 a row
    assert wg.smem == (1024 + 3 * 64 * 128 + 4 * 7 * wr * 2 + 112 + 2 * 128 * 72 * 2 +
                         steps * 96 + 64 * 4 + 4 * 16)
    for other in (plan_for(cv3, arch=80), plan_for(cv3, arch=90, options=Options(hopper=False)),
                  plan_for(stem, arch=90)):                   # 32 filters: narrow_dense's
        assert other.kernel.startswith("narrow_dense<half_t, ")
    resnet = problem((32, 224, 224, 3), (64, 7, 7, 3), np.float16, layout="NHWC", stride=2,
                     padding=3)
    assert plan_for(resnet, arch=90).file == "narrow_wgmma"
    huge = make_problem(np.broadcast_to(np.empty(1, np.float16), (1 << 25, 224, 224, 3)),
                        np.empty((64, 7, 7, 3), np.float16), layout="NHWC", stride=2,
                        padding=3)                               # 2**25 * 112 tiles: too many
    assert narrow_wgmma_takes(resnet, Options(), 90)
    assert not narrow_wgmma_takes(huge, Options(), 90)
    assert plan_for(cv3, arch=90, algorithm="narrow").file == "narrow_wgmma"
    cv1 = problem((128, 227, 227, 3), (96, 11, 11, 3), np.float16, layout="NHWC", stride=4)
    assert plan_for(cv1).algorithm != "narrow"
    assert plan_for(cv1, algorithm="narrow").kernel.startswith("narrow_dense<half_t, ")
    # groups of 8: 128 pixels a block; of 32 over a 7x7 map: 64 (fewer idle warps)
    grouped = problem((32, 28, 28, 256), (256, 3, 3, 8), np.float16, groups=32, layout="NHWC",
                      padding=1)
    assert plan_for(grouped).kernel == "narrow_nhwc<half_t, 8, 64, 1, 8, false, true>"
    assert plan_for(grouped, x_aligned=False).kernel.endswith("false, false>")
    small = problem((32, 7, 7, 1024), (1024, 3, 3, 32), ml_dtypes.bfloat16, groups=32,
                    layout="NHWC", padding=1)
    assert plan_for(small).algorithm == "im2win_fused"                   # 32: not "auto"'s
    assert plan_for(small, algorithm="narrow").kernel == \
        "narrow_nhwc<bf16_t, 32, 64, 4, 1, false, true>"
    # float32 stems of at most 147 products: narrow_ffma.cu (NARROW_FFMA_AUTO_REDUCTION), the
    # NCHW y staged
    assert plan_for(problem((2, 9, 9, 3), (8, 3, 3, 3), layout="NHWC")).file == "narrow_ffma"
    assert plan_for(problem((2, 3, 9, 9), (8, 3, 3, 3))).kernel == \
        "narrow_ffma<3, 32, 8, 7, true, true, true, false>"
    assert plan_for(problem((2, 55, 55, 3), (96, 11, 11, 3), layout="NHWC",
                            stride=4)).file != "narrow_ffma"                  # 363 products
    with pytest.raises(TypeError, match="algorithm='narrow' takes float16, bfloat16, float32 "
                                        "on the GPU, not float64"):
        plan_for(problem((2, 9, 9, 3), (8, 3, 3, 3), np.float64, layout="NHWC"),
                 algorithm="narrow")
    for refused in (problem((2, 3, 9, 9), (8, 3, 3, 3), np.float16),       # NCHW
                    problem((2, 9, 9, 64), (64, 3, 3, 4), np.float16, groups=16, layout="NHWC"),
                    problem((2, 9, 9, 3), (12, 3, 3, 3), np.float16, layout="NHWC")):   # K
        with pytest.raises(ValueError, match="algorithm='narrow'"):
            plan_for(refused, algorithm="narrow")
    listed = {expr for _, expr in instantiable()}
    assert {plan_for(stem).kernel, plan_for(cv1, algorithm="narrow").kernel, plan.kernel,
            plan_for(grouped).kernel, plan_for(small, algorithm="narrow").kernel,
            plan_for(cv3, arch=90).kernel} <= listed


def rows_wgmma_slots_hold(prob, stages: int, nr: int) -> bool:
    """rows_wgmma's producer played as the kernel runs it (rows_wgmma.cu: a row's slot is the
    next of the ring as it is copied; a stage's rows' slots from the run they were copied in),
    over the tiles of two images: True if every row a stage reads is in its slot from its
    copy until the producer's iteration STAGES later (when it waits for the stage's release),
    and no row is copied twice."""
    pairs = -(-prob.P // 2)
    H, R, sh, dh, pt = prob.H, prob.R, prob.sh, prob.dh, prob.pt
    ring = [None] * nr
    held = {}                               # stage -> [(slot, row)] it reads
    ptr, next_h, cur_n, run = 0, 0, -1, (0, 0)
    copied = set()
    i = 0
    for t in range(2 * pairs):
        n, p0 = t // pairs, 2 * (t % pairs)
        last = p0 + 1 if p0 + 1 < prob.P else p0
        lo = max(p0 * sh - pt, 0)
        if n != cur_n or next_h < lo:
            cur_n, next_h, run = n, lo, (lo, ptr)
        for r in range(R):
            while next_h <= min(last * sh - pt + r * dh, H - 1):
                if (n, next_h) in copied:
                    return False
                copied.add((n, next_h))
                ring[ptr] = (n, next_h)
                ptr, next_h = (ptr + 1) % nr, next_h + 1
            reads = []
            for h in (p0 * sh - pt + r * dh, last * sh - pt + r * dh):
                if 0 <= h < H:
                    reads.append(((run[1] + (h - run[0]) % nr) % nr, (n, h)))
            held[i] = reads
            for j in range(max(i - stages + 1, 0), i + 1):   # not yet released
                if any(ring[slot] != row for slot, row in held[j]):
                    return False
            i += 1
    return True


def test_rows_wgmma_takes_layers_whose_window_columns_lie_128_bytes_apart():
    """rows_wgmma.cu (Options.window_rows, where plan.rows_wgmma_pays): NHWC 16-bit layers with
    sw*C*2 == 128, dw == 1, K <= 128, Q <= 112 on Hopper; its ring of x rows (NR, from
    plan.rows_wgmma_ring) holds every row a stage reads until the stage is released."""
    from im2win.cuda import plan as cuda_plan
    cv4 = problem((128, 224, 224, 32), (64, 7, 7, 32), np.float16, layout="NHWC", stride=2)
    cv8 = problem((128, 112, 112, 64), (128, 3, 3, 64), ml_dtypes.bfloat16, layout="NHWC")
    takes = cuda_plan.rows_wgmma_takes
    for prob, kb, stages, nr in ((cv4, 1, 3, 5), (cv8, 2, 2, 4)):
        assert takes(prob, Options(), 90, contiguous_strides(prob), True, True)
        assert cuda_plan.rows_wgmma_form(prob, 90) == (kb, stages, nr)
        plan = cuda_plan.rows_wgmma_plan(prob, Options(), contiguous_strides(prob),
                                         (kb, stages, nr))
        assert plan.one_launch and plan.algorithm == "im2win_fused" and plan.workspace_bytes == 0
        assert plan.kernel == (f"rows_wgmma<{CUDA_TYPES[prob.dtype.name][0]}, {kb}, {stages}, "
                               f"{prob.S * prob.C // 16}>")
        assert plan.geometry.tiles == 128 * -(-prob.P // 2)
        assert plan.geometry.grid(prob, 132)[0] in (131, 132)    # blocks of 54 tiles at most
        assert plan.smem <= 227 * 1024
        for s in (2, 3):
            assert rows_wgmma_slots_hold(prob, s, cuda_plan.rows_wgmma_ring(prob, s))
    # the planner takes it where it pays: one block of filters, rows of more than 96 pixels
    assert plan_for(cv4, arch=90).file == "rows_wgmma"
    assert plan_for(cv8, arch=90).file == "im2win_wgmma"
    cv9 = problem((128, 56, 56, 64), (64, 3, 3, 64), np.float16, layout="NHWC")
    assert takes(cv9, Options(), 90, contiguous_strides(cv9), True, True)
    assert plan_for(cv9, arch=90).file == "im2win_wgmma"
    assert not takes(cv4, Options(tma=False), 90, contiguous_strides(cv4), True, True)
    # never an inner plan (an NCHW problem's NHWC twin, a stem's R x 1 problem): its epilogue
    # writes no NCHW y
    cv4_nchw = problem((128, 32, 224, 224), (64, 32, 7, 7), np.float16, stride=2)
    assert plan_for(cv4_nchw, arch=90, algorithm="im2win_nhwc").inner.file == "im2win_wgmma"
    assert plan_for(cv4_nchw, arch=90).inner.file == "im2win_wgmma"      # "auto": the twin's
    stem = problem((8, 9, 210, 210), (64, 9, 7, 7), np.float16, stride=2)   # 7*9 -> 64 channels
    columns = plan_for(stem, arch=90, algorithm="im2win_columns")
    assert columns.inner.file == "im2win_wgmma"
    # 224 columns of 64 bytes: a slot of 115 lines (pixel 111's window row reaches line 114),
    # no zero slot (no padding row)
    assert cuda_plan.rows_wgmma_smem(cv4, 1, 3, 5) == (1024 + 3 * 4 * 64 * 128 + 5 * 115 * 128 +
                                                       2 * 112 * 144 + 256 + 24 + 48)
    strides = contiguous_strides(cv4)
    assert not takes(cv4, Options(window_rows=False), 90, strides, True, True)
    assert not takes(cv4, Options(hopper=False), 90, strides, True, True)
    assert not takes(cv4, Options(), 80, strides, True, True)
    assert not takes(cv4, Options(), 90, strides, False, True)          # x not 16-byte aligned
    assert not takes(cv4, Options(), 90, strides, True, False)
    assert not takes(cv4, Options(), 90, (strides[0], 1, strides[2] + 4, 32), True, True)
    for other in (dict(w=(64, 7, 7, 32), stride=1), dict(w=(64, 3, 3, 32), stride=2,
                                                          dilation=(1, 2)),
                  dict(w=(192, 3, 3, 32), stride=2), dict(w=(64, 3, 3, 32), stride=1, x=
                                                          (2, 9, 240, 32))):
        x_shape = other.pop("x", (2, 30, 30, 32))
        prob = problem(x_shape, other.pop("w"), np.float16, layout="NHWC", **other)
        assert not takes(prob, Options(), 90, contiguous_strides(prob), True, True)
    assert not takes(problem((2, 30, 30, 32), (64, 7, 7, 32), np.float32, layout="NHWC",
                             stride=2), Options(), 90, strides, True, True)
    # awkward shapes: padding (a zero slot), dilation, R x S of 2 x 5, P odd, few rows
    for x_shape, w_shape, kwargs in (
            ((3, 17, 21, 32), (20, 5, 5, 32), dict(stride=2, padding=2)),
            ((2, 23, 25, 32), (64, 3, 3, 32), dict(stride=2, dilation=(2, 1), padding=(1, 0))),
            ((2, 9, 33, 64), (64, 2, 5, 64), dict(padding=((0, 3), (2, 1)))),
            ((2, 40, 31, 32), (64, 5, 3, 32), dict(stride=2, padding=((3, 2), (0, 1)))),
            ((1, 5, 20, 64), (8, 3, 3, 64), dict(padding=1))):
        prob = problem(x_shape, w_shape, np.float16, layout="NHWC", **kwargs)
        form = cuda_plan.rows_wgmma_form(prob, 90)
        assert form is not None
        assert cuda_plan.rows_wgmma_zeros(prob) == int(prob.pt > 0 or prob.pb > 0)
        for s in (2, 3):
            if s <= prob.R:
                assert rows_wgmma_slots_hold(prob, s, cuda_plan.rows_wgmma_ring(prob, s))
                assert not rows_wgmma_slots_hold(prob, s,
                                                 cuda_plan.rows_wgmma_ring(prob, s) - 1)


def test_float32_stems_get_narrow_ffma_when_forced():
    from im2win.cuda.plan import (NARROW_FFMA_FORMS, NARROW_FFMA_PACKED_REDUCTION,
                                  NARROW_FFMA_PACKED_RESIDENT, NARROW_FFMA_RESIDENT_BYTES,
                                  narrow_ffma_smem, smem_limits)
    listed = {expr for _, expr in instantiable()}
    for prob, kernel in (
            (problem((128, 3, 227, 227), (96, 3, 11, 11), stride=4),      # 55 x 55: tiles of
             "narrow_ffma<3, 96, 2, 7, true, false, true, true>"),       # 2 x 56 of 112 slots
            (problem((32, 224, 224, 3), (64, 7, 7, 3), layout="NHWC", stride=2, padding=3),
             "narrow_ffma<3, 64, 4, 7, false, true, false, true>"),      # 37.6 KB, packed
            (problem((2, 1, 9, 40), (200, 1, 3, 2), dilation=(2, 3)),
             "narrow_ffma<1, 32, 8, 7, true, true, true, false>"),
            (problem((3, 4, 7, 6), (128, 4, 5, 5), stride=(2, 1), padding=2),
             "narrow_ffma<4, 128, 2, 7, true, false, true, true>")):     # 51 KB of filters
        plan = plan_for(prob, algorithm="narrow", arch=90)
        args = plan.geometry
        assert (plan.algorithm, plan.file, plan.kernel) == ("narrow", "narrow_ffma", kernel)
        assert plan.kernel in listed
        kb, tn = int(kernel.split(", ")[1]), int(kernel.split(", ")[3])
        tp, tq = args.ints[-2:]
        # the block's threads cover KB filters of its WP*TN*8 pixels; the tile fits them
        wp = NARROW_FFMA_FORMS[kb]
        assert args.block == (kb * wp, 1, 1) and tp * tq <= wp * tn * 8
        assert args.tiles == prob.N * -(-prob.P // tp) * -(-prob.Q // tq)
        assert args.channel_blocks == -(-prob.K // kb)
        resident, packed = (kernel.rstrip(">").split(", ")[i] == "true" for i in (5, 7))
        assert args.smem == narrow_ffma_smem(prob, kb, tp, tq, resident, prob.layout == "NCHW",
                                             packed) <= smem_limits(90)[0]
        # the window packed for C > 1 and long reductions; resident filters where they take at
        # most NARROW_FFMA_RESIDENT_BYTES (packed: a multiple of it)
        assert packed == (prob.C > 1 and prob.reduction >= NARROW_FFMA_PACKED_REDUCTION)
        assert resident == (4 * prob.reduction * kb <= NARROW_FFMA_RESIDENT_BYTES *
                            (NARROW_FFMA_PACKED_RESIDENT if packed else 1))
    # a problem whose window cannot fit refuses; so do other channel counts and groups
    for refused in (problem((1, 3, 400, 400), (32, 3, 64, 64), dilation=5),
                    problem((2, 5, 9, 9), (8, 5, 3, 3)),
                    problem((2, 4, 9, 9), (8, 2, 3, 3), groups=2)):
        with pytest.raises(ValueError, match="algorithm='narrow'"):
            plan_for(refused, algorithm="narrow", arch=90)


def test_depthwise_problems_get_their_own_kernel():
    nhwc = problem((2, 9, 9, 32), (32, 3, 3, 1), np.float16, groups=32, layout="NHWC")
    plan = plan_for(nhwc)
    assert plan.algorithm == "depthwise"         # the input window in shared memory
    assert plan.kernel == "depthwise_tile_nhwc<half_t, float, 3, 3, 1, 1, 4, 8>"
    # 4 vectors of 8 channels, 8 columns (2 groups of 4) a row: all 7 rows in one tile, whose
    # input window is 9 x 10 pixels
    assert plan.geometry.ints == (2, 32, 9, 9, 7, 7, 0, 0, 7, 8, 4, 1)
    assert plan.geometry.tiles == (1, 1) and plan.geometry.block == (256, 1, 1)
    assert plan.geometry.grid(nhwc, 132) == (1, 1, 2)             # an image a block
    assert plan.geometry.smem == 9 * (32 + 8) * 2 + 9 * 10 * 4 * 16
    assert plan_for(nhwc, options=Options(smem=False)).kernel == \
        "depthwise_nhwc<half_t, float, 8, 1, 4, 3, 1>"                  # a register window
    assert plan_for(nhwc, x_aligned=False).kernel == \
        "depthwise_nhwc<half_t, float, 1, 1, 4, 3, 1>"
    big = problem((32, 14, 14, 672), (672, 5, 5, 1), np.float16, groups=672, layout="NHWC",
                  padding=2)                                        # efficientnet_b0.32
    tile = depthwise_tile(big, 8)
    assert tile == DepthwiseTile(PT=8, QB=16, CV=8, QT=4)          # 11 tiles of 8 vectors
    assert plan_for(big, options=Options(tensor_cores=False)).geometry.grid(big, 132) == \
        (11, 2, 32)
    small = problem((32, 28, 28, 192), (192, 7, 7, 1), np.float16, groups=192, layout="NHWC",
                    padding=3)                                      # convnext_tiny.3
    assert depthwise_tile(small, 8) == DepthwiseTile(PT=3, QB=28, CV=8, QT=2)
    wide = problem((32, 56, 56, 96), (96, 7, 7, 1), np.float16, groups=96, layout="NHWC",
                   padding=3)                                       # convnext_tiny.1: a large
    assert depthwise_tile(wide, 8) is None                         # map keeps the registers
    assert plan_for(wide, options=Options(tensor_cores=False)).kernel == \
        "depthwise_nhwc<half_t, float, 8, 1, 8, 7, 1>"

    for odd in (problem((2, 9, 9, 32), (32, 3, 3, 1), np.float16, groups=32, layout="NHWC",
                        dilation=2),                                # dilation: not listed
                problem((2, 9, 9, 32), (32, 3, 5, 1), np.float16, groups=32, layout="NHWC"),
                problem((2, 9, 9, 32), (64, 3, 3, 1), np.float16, groups=32, layout="NHWC")):
        assert depthwise_tile(odd, 8) is None and plan_for(odd).kernel.startswith(
            "depthwise_nhwc<")
    mult = problem((2, 5, 9, 9), (10, 1, 3, 3), groups=5, stride=2)         # m = 2, NCHW
    assert plan_for(mult).kernel == "depthwise_nchw<float, float, 2, 3, 2>"
    dilated = problem((2, 5, 9, 9), (5, 1, 3, 3), groups=5, dilation=(1, 2))  # general form
    assert plan_for(dilated).kernel == "depthwise_nchw<float, float, 4, 0, 0>"
    single = problem((2, 1, 9, 9), (8, 1, 3, 3))                            # C = 1, G = 1
    assert plan_for(single).file == "narrow_ffma"                           # a float32 stem
    assert plan_for(single, algorithm="depthwise").algorithm == "depthwise"
    with pytest.raises(ValueError, match="groups == C"):
        plan_for(problem((2, 4, 9, 9), (8, 2, 3, 3), groups=2), algorithm="depthwise")
    grouped = problem((2, 9, 9, 64), (64, 3, 3, 4), np.float16, groups=16, layout="NHWC")
    assert plan_for(grouped).kernel == "depthwise_nhwc<half_t, float, 8, 4, 4, 3, 1>"
    eights = problem((2, 9, 9, 64), (64, 3, 3, 8), np.float16, groups=8, layout="NHWC")
    assert plan_for(eights).algorithm == "narrow"                   # narrow.cu's groups
    forced = plan_for(eights, algorithm="depthwise")
    assert forced.kernel.startswith("depthwise_nhwc<half_t, float, 8, 8,")
    assert plan_for(grouped, x_aligned=False).algorithm == "im2win_fused"   # no vectors
    with pytest.raises(ValueError, match="C/groups in"):
        plan_for(grouped, x_aligned=False, algorithm="depthwise")
    assert plan_for(problem((2, 9, 9, 64), (64, 3, 3, 16), np.float16, groups=4,
                            layout="NHWC")).algorithm == "narrow"
    for other in (problem((2, 9, 9, 64), (64, 3, 3, 32), np.float16, groups=2, layout="NHWC"),
                  problem((2, 9, 9, 64), (128, 3, 3, 4), np.float16, groups=16, layout="NHWC")):
        assert plan_for(other).algorithm == "im2win_fused"     # 32 per group, K != C
    # NCHW groups of 4 (and 2) channels: the grouped form on the NHWC twin, between copies of
    # x and w into channels-last workspace and of y back
    for dtype in (np.float16, ml_dtypes.bfloat16, np.float32):
        nchw = problem((2, 64, 9, 9), (64, 4, 3, 3), dtype, groups=16)
        twin = plan_for(nchw)
        assert twin.algorithm == "im2win_nhwc" and twin.inner.algorithm == "depthwise"
        T, Acc = CUDA_TYPES[np.dtype(dtype).name]
        vec = 16 // np.dtype(dtype).itemsize
        assert twin.inner.kernel == f"depthwise_nhwc<{T}, {Acc}, {vec}, 4, 4, 3, 1>"
        copies = (2 * 64 * 9 * 9 + 64 * 4 * 3 * 3 + 2 * 64 * 7 * 7) * np.dtype(dtype).itemsize
        assert twin.workspace_bytes == copies
        assert plan_for(nchw, algorithm="depthwise") == twin
        assert plan_for(nchw, workspace_limit=copies - 1).algorithm == "im2win_fused"
        with pytest.raises(ValueError, match="NHWC twin.*workspace_limit"):
            plan_for(nchw, workspace_limit=copies - 1, algorithm="depthwise")
    pairs = problem((2, 64, 9, 9), (64, 2, 5, 5), np.float32, groups=32, padding=2)
    assert plan_for(pairs).inner.kernel == "depthwise_nhwc<float, float, 4, 2, 4, 5, 1>"
    for other in (problem((2, 64, 9, 9), (64, 8, 3, 3), np.float16, groups=8),   # 8 a group
                  problem((2, 64, 9, 9), (64, 4, 3, 3), np.float64, groups=16),  # no twin
                  problem((2, 64, 9, 9), (128, 4, 3, 3), np.float32, groups=16)):  # K != C
        assert plan_for(other).algorithm != "im2win_nhwc" or \
            plan_for(other).inner.algorithm != "depthwise"
    listed = {expr for _, expr in instantiable()}
    assert {plan.kernel, plan_for(mult).kernel, plan_for(dilated).kernel,
            plan_for(grouped).kernel, plan_for(pairs).inner.kernel} <= listed


def test_depthwise_5x5_and_7x7_16_bit_layers_take_tensor_cores():
    wide = problem((32, 56, 56, 96), (96, 7, 7, 1), np.float16, groups=96, layout="NHWC",
                   padding=3)                                       # convnext_tiny.1
    plan = plan_for(wide)
    assert plan.kernel == "depthwise_mma_nhwc<half_t, 7, true>"
    # 6 tiles of 16 channels; 4 x 2 tiles of 16 rows x 32 columns; 128 threads
    assert plan.geometry.ints == (32, 96, 56, 56, 56, 56, 3, 3, 2)
    assert plan.geometry.tiles == (6, 8) and plan.geometry.block == (128, 1, 1)
    assert plan.geometry.grid(wide, 132) == (6, 8, 32)              # an image a z
    # the window, 22 rows of 40, a plane a channel, the second 8 planes 32 elements on; filters
    assert plan.geometry.smem == (16 * 22 * 40 + 32 + 16 * 49) * 2
    bf16 = problem((32, 28, 28, 192), (192, 7, 7, 1), ml_dtypes.bfloat16, groups=192,
                   layout="NHWC", padding=3)                        # convnext_tiny.3
    assert plan_for(bf16).kernel == "depthwise_mma_nhwc<bf16_t, 7, true>"
    # maps of 14 rows or fewer: 8 x 8 sub-tiles of any image, 4 a block
    five = problem((32, 14, 14, 672), (672, 5, 5, 1), np.float16, groups=672, layout="NHWC",
                   padding=2)                                       # efficientnet_b0.32
    small = plan_for(five)
    assert small.kernel == "depthwise_mma_small_nhwc<half_t, 5, 2>"
    assert small.geometry.ints == (32, 672, 14, 14, 14, 14, 2, 2, 2, 2)
    # 42 tiles of 16 channels; 32 images x 2 x 2 sub-tiles, 4 a block: 32 blocks; one z
    assert small.geometry.grid(five, 132) == (42, 32, 1)
    assert small.geometry.smem == (16 * 4 * 12 * 16 + 32 + 16 * 25) * 2
    seven = problem((32, 7, 7, 768), (768, 7, 7, 1), np.float16, groups=768, layout="NHWC",
                    padding=3)                                      # convnext_tiny.7
    assert plan_for(seven).kernel == "depthwise_mma_small_nhwc<half_t, 7, 2>"
    assert plan_for(seven).geometry.grid(seven, 132) == (48, 8, 1)
    many = problem((300000, 1, 1, 16), (16, 5, 5, 1), np.float16, groups=16, layout="NHWC",
                   padding=2)                       # 75000 blocks of sub-tiles: the kernel loops
    assert plan_for(many).geometry.grid(many, 132) == (1, 65535, 1)
    three = problem((32, 56, 56, 144), (144, 3, 3, 1), np.float16, groups=144, layout="NHWC",
                    padding=1)                                      # mobilenet_v2.7: 3x3
    assert not plan_for(three).kernel.startswith("depthwise_mma")
    for other in (problem((32, 56, 56, 96), (96, 7, 7, 1), np.float32, groups=96,
                          layout="NHWC", padding=3),                # float32: CUDA cores
                  problem((32, 96, 56, 56), (96, 1, 7, 7), np.float16, groups=96, padding=3),
                  problem((32, 56, 56, 96), (96, 7, 7, 1), np.float16, groups=96,
                          layout="NHWC", padding=3, stride=2)):
        assert not plan_for(other).kernel.startswith("depthwise_mma")
    for problem_ in (wide, seven):
        assert not plan_for(problem_, x_aligned=False).kernel.startswith("depthwise_mma")
        assert not plan_for(problem_, options=Options(smem=False)).kernel.startswith(
            "depthwise_mma")
        assert not plan_for(problem_, options=Options(tensor_cores=False)).kernel.startswith(
            "depthwise_mma")
    assert {plan.kernel, small.kernel, plan_for(seven).kernel} <= \
        {expr for _, expr in instantiable()}


def test_depthwise_rows_vec_takes_nchw_rows_of_whole_vectors(monkeypatch):
    """depthwise_rows_vec: NCHW problems of depthwise_rows whose rows are whole vectors of 16,
    8 or 4 bytes (x's start and strides too), with the left padding (S-1)/2 and at most 32
    vectors a row; warps of 32 // NV rows side by side."""
    from im2win.cuda import plan as cuda_plan
    f32 = problem((32, 144, 56, 56), (144, 1, 3, 3), np.float32, groups=144, padding=1)
    plan = plan_for(f32)                  # 14 vectors of 4 columns a row, 2 rows a warp, 4 warps
    assert plan.kernel == "depthwise_rows_vec<float, float, 4, 3, 3, 1, 1, 1>"
    assert plan.geometry.block == (32, 4, 1) and plan.geometry.tiles == (18, 4)
    assert plan.geometry.smem == 0 and plan.geometry.ints[-1] == 16
    f16 = problem((32, 144, 56, 56), (144, 1, 5, 5), np.float16, groups=144, padding=2,
                  stride=2)               # 7 vectors of 8 columns, 4 output columns each
    plan = plan_for(f16)
    assert plan.kernel == "depthwise_rows_vec<half_t, float, 8, 5, 5, 2, 2, 1>"
    assert plan.geometry.block == (32, 4, 1) and plan.geometry.tiles == (9, 4)
    for dtype, shape, V in ((np.float32, (32, 576, 14, 14), 2),   # mobilenet_v2.21
                            (np.float16, (32, 576, 14, 14), 2),
                            (np.float32, (32, 960, 7, 7), 1),     # mobilenet_v2.26
                            (np.float64, (32, 960, 7, 7), 1)):
        kernel = plan_for(problem(shape, (shape[1], 1, 3, 3), dtype, groups=shape[1],
                                  padding=1)).kernel
        assert kernel.startswith("depthwise_rows_vec<") and kernel.split(", ")[2] == str(V)
    f16_7x7 = problem((32, 960, 7, 7), (960, 1, 3, 3), np.float16, groups=960, padding=1)
    assert plan_for(f16_7x7).kernel.startswith("depthwise_nchw<")     # 7 columns: no vector
    # the window's halo from up to DEPTHWISE_ROWS_VEC_HALO lanes a side: 7x7 on vectors of 2
    # and 1 columns (convnext_tiny.5 and .7), 5x5 on vectors of 1 (efficientnet_b0.39); not
    # past the halo's lanes; float64 one lane a side and no 7x7
    for dtype, (C, size, R), V in ((np.float32, (384, 14, 7), 2), (np.float16, (384, 14, 7), 2),
                                   (np.float32, (768, 7, 7), 1), (np.float32, (1152, 7, 5), 1),
                                   (np.float16, (192, 28, 7), 4), (np.float64, (672, 14, 5), 2)):
        kernel = plan_for(problem((32, C, size, size), (C, 1, R, R), dtype, groups=C,
                                  padding=R // 2)).kernel
        assert kernel.startswith("depthwise_rows_vec<") and kernel.split(", ")[2:4] == \
            [str(V), str(R)]
    for C, size, R in ((768, 7, 7), (384, 14, 7), (1152, 7, 5)):
        f64 = problem((32, C, size, size), (C, 1, R, R), np.float64, groups=C, padding=R // 2)
        assert plan_for(f64).kernel.startswith("depthwise_nchw<")
    with monkeypatch.context() as patch:
        patch.setattr(cuda_plan, "DEPTHWISE_ROWS_VEC_HALO", 2)
        assert plan_for(problem((32, 768, 7, 7), (768, 1, 7, 7), np.float32, groups=768,
                                padding=3)).kernel.startswith("depthwise_nchw<")
    few = problem((2, 3, 30, 58), (3, 1, 3, 3), np.float32, groups=3, padding=1)
    plan = plan_for(few)                  # 58 columns: vectors of 2, 29 lanes; 3 warps
    assert plan.kernel == "depthwise_rows_vec<float, float, 2, 3, 3, 1, 1, 1>"
    assert plan.geometry.block == (32, 3, 1) and plan.geometry.tiles == (1, 2)
    with monkeypatch.context() as patch:
        patch.setattr(cuda_plan, "DEPTHWISE_ROWS_VEC_AHEAD", 0)
        assert plan_for(few).kernel == "depthwise_rows_vec<float, float, 2, 3, 3, 1, 1, 0>"
    scalar = "depthwise_rows<float, float, 1, 3, 3, 1, 1, 4, true>"
    assert plan_for(f32, x_aligned=False).kernel == scalar
    assert plan_for(problem((2, 3, 30, 130), (3, 1, 3, 3), groups=3, padding=1)).kernel == \
        scalar                            # 65 vectors of 2 columns: more than a warp
    assert plan_for(problem((2, 3, 30, 56), (3, 1, 3, 3), groups=3, padding=(1, 0))).kernel \
        == scalar                         # no left padding
    assert make_plan(f32, x_strides=(2 * 144 * 56 * 56, 2 * 56 * 56, 2 * 56, 2),
                     w_aligned=True).kernel == scalar       # every other column of a view
    assert make_plan(f32, x_strides=(144 * 56 * 58, 56 * 58, 58, 1),   # rows of 58: 2 columns
                     w_aligned=True).kernel == "depthwise_rows_vec<float, float, 2, 3, 3, 1, 1, 1>"
    nhwc = problem((32, 56, 56, 144), (144, 3, 3, 1), np.float32, groups=144, layout="NHWC",
                   padding=1)
    assert plan_for(nhwc).kernel.startswith("depthwise_rows<")


def test_depthwise_rows_take_large_maps_and_strides_of_2(monkeypatch):
    """depthwise_rows: stride-1 maps of at least 28 output rows and stride 2, 3x3 and 5x5 (in
    NHWC aligned channel vectors); a block per strip of output rows."""
    from im2win.cuda import plan as cuda_plan
    wide = problem((32, 56, 56, 144), (144, 3, 3, 1), np.float16, groups=144, layout="NHWC",
                   padding=1)                                       # mobilenet_v2.7
    plan = plan_for(wide)                 # 2 rows copied ahead (DEPTHWISE_ROWS_PREFETCH)
    assert plan.kernel == "depthwise_rows<half_t, float, 4, 3, 3, 1, 1, 4, false, 2>"
    # 36 vectors of 4 channels in 2 tiles of 18 threads, 14 groups of 4 columns down a block;
    # strips of 16 output rows: 4 of them, the last one short
    assert plan.geometry.ints == (32, 144, 56, 56, 56, 56, 1, 1, 16)
    assert plan.geometry.block == (18, 14, 1) and plan.geometry.tiles == (2, 4)
    assert plan.geometry.grid(wide, 132) == (2, 4, 32)
    # the filters as float, and a ring of 2 rows of 6 pixels of 8 bytes a thread
    assert plan.geometry.smem == 9 * 18 * 4 * 4 + 2 * 6 * 18 * 14 * 8
    with monkeypatch.context() as patch:
        patch.setattr(cuda_plan, "DEPTHWISE_ROWS_PREFETCH", 3)
        ahead = plan_for(wide)
        assert ahead.kernel == "depthwise_rows<half_t, float, 4, 3, 3, 1, 1, 4, false, 3>"
        assert ahead.geometry.smem == 9 * 18 * 4 * 4 + 3 * 6 * 18 * 14 * 8
        assert ahead.geometry.block == plan.geometry.block
        patch.setattr(cuda_plan, "DEPTHWISE_ROWS_PREFETCH", 0)    # each row where it is added
        none = plan_for(wide)
        assert none.kernel == "depthwise_rows<half_t, float, 4, 3, 3, 1, 1, 4, false>"
        assert none.geometry.smem == 9 * 18 * 4 * 4
        patch.setattr(cuda_plan, "DEPTHWISE_ROWS_PREFETCH", 40)   # too deep: no ring
        assert plan_for(wide).kernel == none.kernel
    assert plan_for(wide, options=Options(smem=False)).kernel.startswith("depthwise_nhwc<")
    assert plan_for(wide, x_aligned=False).kernel.startswith("depthwise_nhwc<")
    nchw = problem((32, 144, 56, 56), (144, 1, 3, 3), np.float32, groups=144, padding=1)
    with monkeypatch.context() as patch:  # NCHW on scalars (depthwise_rows_vec below)
        patch.setattr(cuda_plan, "DEPTHWISE_ROWS_VEC", False)
        plan = plan_for(nchw)             # a channel a thread, 14 column groups across a warp
        assert plan.kernel == "depthwise_rows<float, float, 1, 3, 3, 1, 1, 4, true>"
        assert plan.geometry.block == (14, 18, 1) and plan.geometry.tiles == (8, 4)
        assert plan.geometry.smem == 9 * 18 * 4
    assert plan_for(nchw, options=Options(smem=False)).kernel.startswith("depthwise_nchw<")
    small = problem((32, 14, 14, 576), (576, 3, 3, 1), np.float16, groups=576, layout="NHWC",
                    padding=1)                                      # mobilenet_v2.21: the tile
    assert plan_for(small).kernel.startswith("depthwise_tile_nhwc<")
    strided = problem((32, 14, 14, 576), (576, 3, 3, 1), np.float32, groups=576,
                      layout="NHWC", padding=1, stride=2)           # mobilenet_v2.23
    plan = plan_for(strided)
    assert plan.kernel == "depthwise_rows<float, float, 4, 3, 3, 2, 2, 2, false, 2>"
    assert plan.geometry.ints[-1] == 2 and plan.geometry.tiles == (3, 4)
    five = problem((32, 56, 56, 144), (144, 5, 5, 1), np.float64, groups=144, layout="NHWC",
                   padding=2, stride=2)                             # efficientnet_b0.15
    assert plan_for(five).kernel == \
        "depthwise_rows<double, double, 2, 5, 5, 2, 2, 2, false, 2>"
    for other in (problem((32, 56, 56, 96), (96, 7, 7, 1), np.float16, groups=96,
                          layout="NHWC", padding=3),                # 7x7: not a form
                  problem((32, 56, 56, 144), (144, 3, 3, 1), np.float16, groups=144,
                          layout="NHWC", padding=1, dilation=2),
                  problem((32, 56, 56, 144), (288, 3, 3, 1), np.float16, groups=144,
                          layout="NHWC", padding=1)):               # m = 2
        assert not plan_for(other).kernel.startswith("depthwise_rows<")
    listed = {expr for _, expr in instantiable()}
    assert {plan_for(wide).kernel, plan_for(strided).kernel, plan_for(five).kernel} <= listed


def test_hopper_plans_copy_by_tma_where_each_slice_is_64_channels_of_one_tap():
    from im2win.cuda.plan import TmaArgs
    cv8 = problem((32, 56, 56, 64), (128, 3, 3, 64), np.float16, layout="NHWC", padding=1)
    plan = plan_for(cv8, arch=90)
    assert plan.kernel.startswith("im2win_wgmma_tma<half_t, ") and plan.taps == b""
    assert isinstance(plan.tma, TmaArgs) and plan.tma.w_dims == (576, 128)
    assert plan.tma.x.dims == (64, 56, 56, 32) and plan.tma.x.lower == (-1, -1)
    assert plan.tma.w_box == (64, plan.tile.BN) and plan.tma.x.pixels == plan.tile.BM
    assert plan_for(cv8, arch=90, options=Options(tma=False)).tma is None
    assert plan_for(cv8, arch=90, x_aligned=False).tma is None
    assert plan_for(cv8).tma is None                                   # not Hopper
    cv5 = problem((128, 24, 24, 96), (256, 5, 5, 96), np.float16, layout="NHWC")
    half = plan_for(cv5, arch=90)                  # 96 channels: boxes of 32, two a slice
    assert half.tma.x.channels == 32 and half.kernel.endswith(", true>")
    assert half.tma.w_box == (64, half.tile.BN)    # the filter's box: still a whole slice
    assert plan_for(problem((2, 9, 9, 48), (64, 3, 3, 48), np.float16, layout="NHWC"),
                    arch=90).tma is None           # 48 channels: no box width divides them
    # The TMA tile by filters; TMA takes Hopper even where cp.async would not pay.
    cv12 = problem((128, 7, 7, 512), (512, 3, 3, 512), np.float16, layout="NHWC", padding=1)
    cv9 = problem((128, 56, 56, 64), (64, 3, 3, 64), np.float16, layout="NHWC", padding=1)
    big8 = problem((128, 112, 112, 64), (128, 3, 3, 64), np.float16, layout="NHWC", padding=1)
    cv6 = problem((128, 12, 12, 256), (512, 3, 3, 256), np.float16, layout="NHWC")
    cv11 = problem((128, 14, 14, 256), (256, 3, 3, 256), np.float16, layout="NHWC")
    chosen = {name: plan_for(p, arch=90) for name, p in
              (("cv8", cv8), ("cv12", cv12), ("cv9", cv9), ("big8", big8), ("cv5", cv5),
               ("cv6", cv6), ("cv11", cv11))}
    # 256x128 past 128 filters where it makes 192 tiles or more: cv5 400, cv6 200, cv11 144.
    assert {n: (pl.tile.name, pl.tma is not None) for n, pl in chosen.items()} == {
        "cv8": ("wg128x128", True), "cv12": ("wg128x128", True), "cv9": ("wg256x64", True),
        "big8": ("wg128x128", True), "cv5": ("wg256x128", True), "cv6": ("wg256x128", True),
        "cv11": ("wg128x128", True)}
    # ... the filter resident where one filter tile holds it and the ring stays 4 deep.
    assert {n: pl.resident for n, pl in chosen.items()} == {"cv8": 9, "cv12": 0, "cv9": 9,
                                                            "big8": 9, "cv5": 0, "cv6": 0,
                                                            "cv11": 0}
    assert plan_for(cv12, arch=90, options=Options(tma=False)).file == "im2win_mma"  # 98 tiles
    cv4 = problem((128, 224, 224, 32), (64, 7, 7, 32), np.float16, layout="NHWC", stride=2,
                  padding=3)
    assert plan_for(cv4, arch=90, options=Options(window_rows=False)).file == "im2win_wgmma"
    assert plan_for(cv4, arch=90).file == "rows_wgmma"         # window columns 128 bytes apart
    listed = {expr for _, expr in instantiable()}
    assert plan.kernel in listed and {pl.kernel for pl in chosen.values()} <= listed


def test_pointwise_problems_are_one_gemm_on_x_in_place():
    from im2win.cuda.plan import GEMM_MIN_CHANNELS, GemmArgs, gemm_pays
    nhwc = problem((2, 5, 7, 16), (24, 1, 1, 16), np.float32, layout="NHWC")
    plan = plan_for(nhwc, algorithm="gemm")
    assert plan.algorithm == "gemm" and plan.kernel is None and plan.workspace_bytes == 0
    assert plan.geometry == GemmArgs(False, 1, 0, 24, 70, 16, 16, 16, 24, 0, 0, 0, 1)
    assert nhwc.C == GEMM_MIN_CHANNELS and gemm_pays(nhwc) and plan_for(nhwc) == plan
    few = problem((2, 5, 7, 8), (24, 1, 1, 8), np.float32, layout="NHWC")   # a tiny reduction
    assert not gemm_pays(few) and plan_for(few).algorithm == "im2win_fused"
    half = problem((32, 56, 56, 128), (128, 1, 1, 128), np.float16, layout="NHWC")
    assert plan_for(half).algorithm == "im2win_fused"           # the Tensor-Core kernel is faster
    few_channels = problem((32, 112, 112, 16), (112, 1, 1, 16), np.float16, layout="NHWC")
    assert gemm_pays(few_channels) and plan_for(few_channels).algorithm == "gemm"
    few_filters = problem((32, 112, 112, 16), (96, 1, 1, 16), np.float16, layout="NHWC")
    assert plan_for(few_filters).algorithm == "pointwise"       # pointwise.cu first
    few_pixels = problem((32, 28, 28, 32), (192, 1, 1, 32), np.float16, layout="NHWC")
    assert plan_for(few_pixels).algorithm == "im2win_fused"
    for dtype in (np.float16, np.float32):               # no channels: y is the bias
        empty = problem((32, 112, 112, 0), (96, 1, 1, 0), dtype, layout="NHWC")
        assert plan_for(empty).algorithm != "gemm"
        with pytest.raises(ValueError, match="at least one input channel"):
            plan_for(empty, algorithm="gemm")
    empty_batch = problem((0, 8, 9, 32), (16, 1, 1, 32), layout="NHWC", stride=2)
    assert plan_for(empty_batch, algorithm="gemm").geometry.gather        # as for N > 0
    small_half = problem((2, 5, 7, 16), (24, 1, 1, 16), np.float16, layout="NHWC")
    assert plan_for(small_half, algorithm="gemm").geometry == plan.geometry
    sliced = make_plan(nhwc, x_strides=(5 * 7 * 20, 1, 7 * 20, 20), w_aligned=True,
                       algorithm="gemm")
    assert sliced.geometry.ldb == 20                        # pixels 20 apart: read in place
    nchw = problem((3, 16, 5, 7), (24, 16, 1, 1))
    assert plan_for(nchw, algorithm="gemm").geometry == GemmArgs(True, 0, 0, 35, 24, 16, 35, 16,
                                                                 35, 560, 0, 840, 3)
    column = problem((3, 1, 9, 2), (4, 1, 1, 2), layout="NHWC")  # H = 1: the W stride steps
    assert make_plan(column, x_strides=(45, 1, 0, 5), w_aligned=True,
                     algorithm="gemm").geometry.ldb == 5
    for other in (problem((2, 4, 6, 6), (4, 4, 3, 3)), problem((2, 4, 6, 6), (4, 4, 1, 1),
                                                                padding=1),
                  problem((2, 4, 6, 6), (4, 2, 1, 1), groups=2)):
        with pytest.raises(ValueError, match="1x1 convolutions with no padding and groups=1"):
            plan_for(other, algorithm="gemm")
    with pytest.raises(ValueError, match="evenly strided"):    # images 46 apart, not 45
        make_plan(column, x_strides=(46, 1, 9, 5), w_aligned=True, algorithm="gemm")
    with pytest.raises(ValueError, match="evenly strided"):
        make_plan(nchw, x_strides=(560, 35, 14, 2), w_aligned=True, algorithm="gemm")


def test_1x1_layers_of_few_filters_get_the_pointwise_kernel():
    """pointwise.cu (float16 and bfloat16 NHWC, 1x1 at stride 1, C and K multiples of 8, K at
    most 96): the plan, its grid, what "auto" gives it, and what it refuses."""
    from im2win.cuda.plan import (POINTWISE_MAX_K, PointwiseArgs, pointwise_refusal,
                                  pointwise_smem)
    listed = {expr for _, expr in instantiable()}
    prob = problem((32, 56, 56, 96), (24, 1, 1, 96), np.float16, layout="NHWC")
    plan = plan_for(prob, arch=90)
    assert plan.algorithm == "pointwise" and plan.kernel == "pointwise_nhwc<half_t, 3>"
    assert plan.kernel in listed and plan.workspace_bytes == 0
    smem = 2 * ((24 + 128) * 104 + 64 * 32)          # filter, two stages, the staged outputs
    assert plan.smem == pointwise_smem(96, 24) == smem
    tiles = 32 * 56 * 56 // 64
    assert plan.geometry == PointwiseArgs((32, 56, 56, 96, 96), (56 * 56 * 96, 1, 56 * 96, 96),
                                          (128, 1, 1), smem, tiles, 6)
    assert plan.geometry.grid(prob, 132) == (784, 1, 1)             # two tiles a block
    assert plan_for(prob, arch=86).geometry.per_sm == 2             # 100 KB an SM there
    bf16 = problem((3, 5, 7, 40), (96, 1, 1, 40), ml_dtypes.bfloat16, layout="NHWC")
    assert plan_for(bf16, arch=90).kernel == "pointwise_nhwc<bf16_t, 12>" and \
        plan_for(bf16, arch=90).geometry.per_sm == 4
    # a channel slice of a wider array: pixels 104 apart, read in place
    sliced = make_plan(prob, x_strides=(56 * 56 * 104, 1, 56 * 104, 104), w_aligned=True)
    assert sliced.algorithm == "pointwise" and sliced.geometry.ints[-1] == 104
    wide = problem((2, 5, 7, 256), (64, 1, 1, 256), np.float16, layout="NHWC")
    assert plan_for(wide, arch=90).algorithm != "pointwise"         # C past 240: not "auto"
    assert plan_for(wide, algorithm="pointwise", arch=90).kernel == "pointwise_nhwc<half_t, 8>"
    # 110592 bytes of shared memory: within Hopper's and the A100's block, not an sm_86's
    assert plan_for(wide, algorithm="pointwise", arch=80).smem == 110592
    for arch in (86, 89, None):
        with pytest.raises(ValueError, match="99 KB|101376 bytes"):
            plan_for(wide, algorithm="pointwise", arch=arch)
    big = problem((2, 5, 7, 240), (80, 1, 1, 240), np.float16, layout="NHWC")  # 114432 bytes
    assert plan_for(big, arch=90).algorithm == "pointwise"
    assert plan_for(big, arch=86).algorithm != "pointwise"          # "auto" there: not it
    float32 = problem((2, 5, 7, 16), (24, 1, 1, 16), np.float32, layout="NHWC")
    assert plan_for(float32).algorithm != "pointwise"
    with pytest.raises(TypeError, match="algorithm='pointwise' takes float16, bfloat16"):
        plan_for(float32, algorithm="pointwise")
    refused = [problem((2, 16, 5, 7), (24, 16, 1, 1), np.float16),          # NCHW
               problem((2, 5, 7, 16), (24, 3, 3, 16), np.float16, layout="NHWC"),
               problem((2, 5, 7, 16), (24, 1, 1, 16), np.float16, layout="NHWC", stride=2),
               problem((2, 5, 7, 16), (24, 1, 1, 16), np.float16, layout="NHWC", padding=1),
               problem((2, 5, 7, 16), (24, 1, 1, 8), np.float16, layout="NHWC", groups=2),
               problem((2, 5, 7, 12), (24, 1, 1, 12), np.float16, layout="NHWC"),
               problem((2, 5, 7, 16), (20, 1, 1, 16), np.float16, layout="NHWC"),
               problem((2, 5, 7, 16), (POINTWISE_MAX_K + 8, 1, 1, 16), np.float16,
                       layout="NHWC"),
               problem((2, 5, 7, 0), (24, 1, 1, 0), np.float16, layout="NHWC")]
    for other in refused:
        assert plan_for(other).algorithm != "pointwise"
        with pytest.raises(ValueError, match="algorithm='pointwise' takes NHWC"):
            plan_for(other, algorithm="pointwise")
    for strides, aligned in (((56 * 56 * 100, 1, 56 * 100, 100), True),   # 100: not 8s
                             ((56 * 56 * 96, 1, 56 * 96, 96), False),      # x misaligned
                             ((56 * 56 * 96 * 2, 1, 56 * 96, 96), True),   # images apart
                             ((56 * 56 * 96, 56 * 56, 56, 1), True)):      # channels strided
        assert pointwise_refusal(prob, strides, aligned) is not None
        plan = make_plan(prob, x_strides=strides, w_aligned=True, x_aligned=aligned)
        assert plan.algorithm != "pointwise"
        with pytest.raises(ValueError, match="16-byte copies"):
            make_plan(prob, x_strides=strides, w_aligned=True, x_aligned=aligned,
                      algorithm="pointwise")


def test_strided_pointwise_problems_gather_the_pixels_they_read_then_one_gemm():
    from im2win.cuda.plan import GemmArgs, gemm_gather_bytes
    for layout in ("NCHW", "NHWC"):
        shapes = ((32, 256, 7, 9), (64, 256, 1, 1)) if layout == "NCHW" else \
            ((32, 7, 9, 256), (64, 1, 1, 256))
        strided = problem(*shapes, layout=layout, stride=(2, 3))           # P x Q = 4 x 3
        plan = plan_for(strided)
        assert plan.algorithm == "gemm" and plan.geometry.gather
        assert plan.workspace_bytes == gemm_gather_bytes(strided) == 32 * 256 * 4 * 3 * 4
        # Odd strides of x change nothing: the gathered copy is contiguous.
        odd = make_plan(strided, x_strides=(99999, 1 if layout == "NHWC" else 700, 77, 3),
                        w_aligned=True)
        assert odd == plan
        expected = GemmArgs(False, 1, 0, 64, 32 * 12, 256, 256, 256, 64, 0, 0, 0, 1, True) \
            if layout == "NHWC" else GemmArgs(True, 0, 0, 12, 64, 256, 12, 256, 12, 256 * 12, 0,
                                              64 * 12, 32, True)
        assert plan.geometry == expected
        # Within a workspace limit only: "auto" runs the im2win kernels past it.
        limit = gemm_gather_bytes(strided) - 1
        assert plan_for(strided, workspace_limit=limit).algorithm != "gemm"
        with pytest.raises(ValueError, match="workspace_limit"):
            plan_for(strided, algorithm="gemm", workspace_limit=limit)
        assert plan_for(problem(*shapes, np.float16, layout=layout,
                                stride=2)).algorithm != "gemm"        # Tensor Cores there


def test_nchw_problems_run_on_their_nhwc_twin_where_it_takes_the_hopper_kernel():
    from im2win.cuda.plan import nhwc_workspace
    cv8 = problem((8, 64, 56, 56), (128, 64, 3, 3), np.float16, padding=1)
    plan = plan_for(cv8, arch=90)
    assert plan.algorithm == "im2win_nhwc" and plan.kernel is None and plan.file is None
    assert plan.inner.file == "im2win_wgmma" and plan.inner.tma is not None
    # The twin's kernel writes the NCHW y from its epilogue: x and w are the only copies.
    twin = plan_for(dataclasses.replace(cv8, layout="NHWC"), arch=90,
                    options=inner_options(Options()))      # inner plans: no rows_wgmma
    assert twin.geometry.y_nchw == 0 and plan.inner.geometry.y_nchw == 1
    assert plan.inner == dataclasses.replace(twin, geometry=twin.geometry._replace(y_nchw=1))
    assert plan.workspace_bytes == nhwc_workspace(cv8, y=False) == \
        (8 * 64 * 56 * 56 + 128 * 64 * 9) * 2
    assert nhwc_workspace(cv8) == nhwc_workspace(cv8, y=False) + 8 * 56 * 56 * 128 * 2
    # ... but into a channels-last y with the switch off or on mma.sync.
    off = plan_for(cv8, arch=90, options=Options(nchw_epilogue=False))
    assert off.inner.geometry == twin.geometry and off.workspace_bytes == nhwc_workspace(cv8)
    assert plan_for(cv8, arch=80, algorithm="im2win_nhwc").inner.geometry.y_nchw == 0
    # Split-K: the sum of the partial sums writes the NCHW y (split_reduce_nchw).
    few = problem((2, 2304, 7, 7), (160, 2304, 1, 1), np.float16)          # few tiles, 36 slices
    split = plan_for(few, arch=90)
    assert split.algorithm == "im2win_nhwc" and split.inner.splits > 1
    assert split.inner.geometry.y_nchw == 1 and split.workspace_bytes == \
        nhwc_workspace(few, y=False) + split.inner.workspace_bytes
    assert plan_for(few, arch=90, options=Options(nchw_epilogue=False)).inner.geometry.y_nchw \
        == 0
    assert plan_for(cv8, arch=80).algorithm == "im2win_fused"               # not Hopper
    assert plan_for(cv8, arch=90, options=Options(hopper=False)).algorithm == "im2win_fused"
    assert plan_for(cv8, arch=90, workspace_limit=plan.workspace_bytes - 1).algorithm == \
        "im2win_fused"
    assert plan_for(cv8, arch=80, algorithm="im2win_nhwc").inner.file == "im2win_mma"
    stem = problem((8, 3, 64, 64), (32, 3, 7, 7), np.float16, stride=2)      # the twin gathers
    assert plan_for(stem, arch=90).algorithm == "im2win_columns"   # columns of 32: TMA boxes
    assert plan_for(stem, arch=90).inner.tma is not None
    bf16 = problem((8, 64, 28, 28), (128, 64, 3, 3), ml_dtypes.bfloat16, padding=1)
    assert plan_for(bf16, arch=90).algorithm == "im2win_nhwc"
    with pytest.raises(TypeError, match="takes float16, bfloat16, float32 on the GPU, not "
                                        "float64"):
        plan_for(problem((2, 8, 9, 9), (8, 8, 3, 3), np.float64), algorithm="im2win_nhwc")
    with pytest.raises(ValueError, match="float32 NCHW"):
        plan_for(problem((2, 9, 9, 8), (8, 3, 3, 8), np.float16, layout="NHWC"),
                 algorithm="im2win_nhwc")
    half = problem((2, 8, 9, 9), (8, 8, 3, 3), np.float16)
    every_other_column = (8 * 9 * 18, 9 * 18, 18, 2)                        # a view x[..., ::2]
    assert make_plan(half, x_strides=every_other_column, w_aligned=True,
                     algorithm="im2win_nhwc").algorithm == "im2win_nhwc"  # pixels 2 apart
    cropped = (8 * 9 * 12, 9 * 12, 12, 1)                                   # x[..., :9] of 12
    with pytest.raises(ValueError, match="evenly strided"):
        make_plan(half, x_strides=cropped, w_aligned=True, algorithm="im2win_nhwc")
    assert make_plan(half, x_strides=(2 * 8 * 81, 81, 9, 1), w_aligned=True,
                     algorithm="im2win_nhwc").algorithm == "im2win_nhwc"  # a slice along C
    with pytest.raises(ValueError, match="workspace_limit"):
        plan_for(half, algorithm="im2win_nhwc", workspace_limit=10)
    listed = {expr for _, expr in instantiable()}
    assert {"transpose_batched<half_t, 64>", "transpose_batched<half_t, 32>"} <= listed
    assert plan.inner.kernel in listed


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_stems_run_as_r_by_1_problems_over_their_window_columns_on_hopper(layout, monkeypatch):
    from im2win.cuda import plan as cuda_plan
    from im2win.cuda.plan import columns_stage, columns_workspace, ffma_exact, ffma_kernel_name
    # NHWC 16-bit stems of up to 147 products take narrow.cu's dense form first: out here
    monkeypatch.setattr(cuda_plan, "NARROW_AUTO_DENSE_REDUCTION", 0)
    layers = {}
    for name in ("cv1", "cv3", "cv7"):
        x_shape, w_shape = LAYERS[name].shapes(128, layout)
        layers[name] = problem(x_shape, w_shape, np.float16, layout=layout,
                               **LAYERS[name].kwargs)
    nchw = layout == "NCHW"
    for name, prob in layers.items():
        plan = plan_for(prob, arch=90)
        inner = plan_for(columns_stage(prob), arch=90, algorithm="im2win_fused",
                         options=inner_options(Options()))
        assert plan.algorithm == "im2win_columns" and plan.kernel is None
        # NCHW: the kernel's epilogue writes the NCHW y (no channels-last y to transpose).
        assert plan.inner == dataclasses.replace(
            inner, geometry=inner.geometry._replace(y_nchw=int(nchw)))
        assert plan.inner.file == "im2win_wgmma" and inner.splits == 1
        assert plan.workspace_bytes == columns_workspace(prob, y=False) + inner.workspace_bytes
        off = plan_for(prob, arch=90, options=Options(nchw_epilogue=False))
        assert off.inner.geometry == inner.geometry
        assert off.workspace_bytes == columns_workspace(prob) + inner.workspace_bytes
    # The R x 1 problem: S*C channels padded to 8, or to 32 where that adds at most a third
    # (cv3: 21 -> 32, not 24; its x2 then takes TMA boxes of 32 channels), Q columns, stride 1
    # across, window order.
    cv3 = columns_stage(layers["cv3"])
    assert (cv3.layout, cv3.C, cv3.W, cv3.S, cv3.sw, cv3.dw, cv3.pl, cv3.pr) == \
        ("NHWC", 32, 111, 1, 1, 1, 0, 0, ) and cv3.reduction == 7 * 32
    assert (cv3.P, cv3.Q, cv3.R, cv3.sh) == (111, 111, 7, 2)
    assert plan_for(layers["cv3"], arch=90).inner.tma.x.channels == 32
    y_copy = 128 * 111 * 111 * 64 if layout == "NCHW" else 0               # y channels-last
    assert columns_workspace(layers["cv3"]) == (128 * 227 * 111 * 32 + 64 * 7 * 32 + y_copy) * 2
    assert columns_stage(layers["cv1"]).C == 40 and columns_stage(layers["cv7"]).C == 16
    single = dataclasses.replace(layers["cv3"], dtype=np.dtype(np.float32))
    assert columns_stage(single).C == columns_stage(layers["cv3"], wide=False).C == 24
    cv3 = layers["cv3"]
    # "auto" takes it on Hopper only, with the switches on, within the workspace limit.
    assert plan_for(cv3, arch=80).algorithm == "im2win_fused"
    assert plan_for(cv3).algorithm == "im2win_fused"                        # device unknown
    for switch in ("window_columns", "hopper"):
        assert plan_for(cv3, arch=90, options=Options(**{switch: False})).algorithm == \
            "im2win_fused"
    limit = columns_workspace(cv3) + plan_for(cv3, arch=90).inner.workspace_bytes   # with y
    assert plan_for(cv3, arch=90, workspace_limit=limit).algorithm == "im2win_columns"
    assert plan_for(cv3, arch=90, workspace_limit=limit - 1).algorithm == "im2win_fused"
    # C a multiple of 8 keeps the general kernels; forced, any GPU takes it.
    eight = problem((2, 9, 9, 8), (16, 3, 3, 8), np.float16, layout="NHWC")
    assert plan_for(eight, arch=90).algorithm == "im2win_fused"
    assert plan_for(cv3, arch=80, algorithm="im2win_columns").inner.file == "im2win_mma"
    assert plan_for(cv3, arch=90, algorithm="im2win_columns",
                    tile="wg128x128").inner.tile.name == "wg128x128"
    refused = [(problem((2, 4, 9, 9), (8, 2, 3, 3), np.float16, groups=2), "one group"),
               (problem((2, 3, 9, 9), (8, 3, 3, 1), np.float16), "more than one filter"),
               (problem((2, 5, 9, 20), (8, 5, 3, 13), np.float16), "S\\*C=65"),
               (problem((2, 3, 9, 1400), (8, 3, 3, 3), np.float16), "W\\*C=4200"),
               (cv3, "workspace_limit=10")]
    float64 = problem((2, 3, 9, 9), (8, 3, 3, 3), np.float64)
    assert plan_for(float64, arch=90).algorithm != "im2win_columns"
    with pytest.raises(TypeError, match="algorithm='im2win_columns' takes .*not float64"):
        plan_for(float64, arch=90, algorithm="im2win_columns")
    for prob, match in refused:
        limit = 10 if prob is cv3 else None
        assert plan_for(prob, arch=90, workspace_limit=limit).algorithm != "im2win_columns"
        with pytest.raises(ValueError, match="algorithm='im2win_columns' cannot run this "
                                             "problem: .*" + match):
            plan_for(prob, arch=90, algorithm="im2win_columns", workspace_limit=limit)
    # float32 stems: the R x 1 problem on im2win_ffma.cu, on any GPU, where the copies are at
    # most TWIN_BYTES_PER_FLOP bytes a FLOP; in NCHW only where its epilogue writes the NCHW y
    # and the reduction is short (cv7's 27 and cv3's 147) or the R x 1 problem takes tiles of
    # 96 filters (cv1's 363: on tiles of 64 im2win_conv.cu measured as fast).
    # (narrow_ffma.cu out of "auto"'s choices: it takes most of these stems first)
    from im2win.cuda import plan as cuda_plan, tuning
    from im2win.cuda.plan import (COLUMNS_NCHW_REDUCTION, COLUMNS_NHWC_BYTES_PER_FLOP,
                                  FFMA_STAGED_NCHW, TWIN_BYTES_PER_FLOP)
    monkeypatch.setattr(cuda_plan, "NARROW_FFMA_AUTO_REDUCTION", 0)
    from im2win.networks import NETWORKS
    singles = {}
    for name in ("cv1", "cv3", "cv7"):
        x_shape, w_shape = LAYERS[name].shapes(128, layout)
        singles[name] = problem(x_shape, w_shape, np.float32, layout=layout,
                                **LAYERS[name].kwargs)
    for name, prob in singles.items():
        assert columns_workspace(prob, y=False) <= TWIN_BYTES_PER_FLOP * prob.flops
        short = prob.reduction <= COLUMNS_NCHW_REDUCTION
        assert short == (name != "cv1")
        for arch in (None, 80, 90):
            # (cv1 takes its window's runs where they run: test_stems_run_over_window_runs)
            assert (plan_for(prob, arch=arch).algorithm == "im2win_runs") == (name == "cv1")
            plan = plan_for(prob, arch=arch, options=Options(window_runs=False))
            assert plan.algorithm == "im2win_columns"
            assert plan.inner.tile.BM == (96 if name == "cv1" else 64)
            if plan.algorithm == "im2win_columns":
                assert plan.inner.file == "im2win_ffma" and plan.inner.geometry.y_nchw == nchw
                staged = nchw and FFMA_STAGED_NCHW and prob.P * prob.Q % 4 != 0   # cv3
                # (unpadded columns, 64 or 96 filters: kExact, no bounds predicates)
                assert ffma_exact(plan.inner.geometry, plan.inner.tile, Options())
                assert plan.inner.kernel == ffma_kernel_name(
                    plan.inner.tile, Options(), nchw_y=(2 if staged else 1) if nchw else 0,
                    exact=True)
                assert plan.workspace_bytes == columns_workspace(prob, y=False)
    if nchw:                                     # through a channels-last y: not taken
        assert plan_for(singles["cv7"], options=Options(nchw_epilogue=False)).algorithm == \
            "im2win_fused"
    monkeypatch.setattr(tuning, "FFMA_96_ROWS", False)    # cv1 on tiles of 64: NHWC only
    assert (plan_for(singles["cv1"], options=Options(window_runs=False)).algorithm ==
            "im2win_columns") == (not nchw)
    monkeypatch.setattr(tuning, "FFMA_96_ROWS", True)
    # convnext_tiny.0 (4x4 at 4, 0.028 bytes a FLOP): its columns in NHWC only
    conv = next(c for c in NETWORKS["convnext_tiny"] if c.name == "convnext_tiny.0")
    patchify = problem(*conv.shapes(32, layout), np.float32, layout=layout, **conv.kwargs)
    assert TWIN_BYTES_PER_FLOP < columns_workspace(patchify, y=False) / patchify.flops < \
        COLUMNS_NHWC_BYTES_PER_FLOP
    assert (plan_for(patchify).algorithm == "im2win_columns") == (not nchw)
    for switch in ("window_columns", "ffma"):
        assert plan_for(singles["cv7"], options=Options(**{switch: False})).algorithm == \
            "im2win_fused"
    x_shape, w_shape = ((2, 3, 9, 9), (8, 3, 3, 3)) if nchw else ((2, 9, 9, 3), (8, 3, 3, 3))
    thin = problem(x_shape, w_shape, np.float32, layout=layout)     # 8 filters: 0.23 B a FLOP
    assert columns_workspace(thin, y=False) > TWIN_BYTES_PER_FLOP * thin.flops
    assert plan_for(thin).algorithm == "im2win_fused"
    listed = {expr for _, expr in instantiable()}
    assert {f"window_columns<{t}>" for t in ("half_t", "bf16_t", "float")} <= listed
    assert {plan_for(p, arch=90).inner.kernel for p in layers.values()} <= listed
    assert {plan_for(p, algorithm="im2win_columns").inner.kernel
            for p in singles.values()} <= listed


@pytest.mark.parametrize("seed", range(40))
def test_window_columns_turn_a_stem_into_an_r_by_1_convolution(seed):
    """What "im2win_columns" computes: with x2[n, h, q, s*C + c] = xp[n, h, q*sw + s*dw, c]
    (xp: x padded across; zeros past S*C) and w2[k, r, 0, s*C + c] = w[k, r, s, c], the R x 1
    convolution of x2 (stride 1 and no padding across, columns_stage) is the stem's."""
    from im2win.cuda.plan import columns_stage
    rng = np.random.default_rng(seed)
    C, S, R = int(rng.integers(1, 6)), int(rng.integers(2, 8)), int(rng.integers(1, 4))
    sh, sw, dh, dw = (int(v) for v in rng.integers(1, 4, 4))
    pt, pb, pl, pr = (int(v) for v in rng.integers(0, 4, 4))
    x = rng.standard_normal((2, int(rng.integers(R * dh, R * dh + 6)),
                             int(rng.integers(S * dw, S * dw + 8)), C))
    w = rng.standard_normal((3, R, S, C))
    kwargs = dict(stride=(sh, sw), dilation=(dh, dw), padding=((pt, pb), (pl, pr)))
    prob = make_problem(x, w, layout="NHWC", **kwargs)
    inner = columns_stage(prob)
    xp = np.pad(x, ((0, 0), (0, 0), (pl, pr + S * dw), (0, 0)))
    x2 = np.zeros((2, prob.H, prob.Q, inner.C))
    for s in range(S):
        x2[..., s * C:(s + 1) * C] = xp[:, :, s * dw:s * dw + (prob.Q - 1) * sw + 1:sw]
    w2 = np.zeros((3, R, 1, inner.C))
    w2[:, :, 0, :S * C] = w.reshape(3, R, S * C)
    got = reference.conv2d(x2, w2, layout="NHWC", stride=(sh, 1), dilation=(dh, 1),
                           padding=((pt, pb), (0, 0)))
    np.testing.assert_allclose(got, reference.conv2d(x, w, layout="NHWC", **kwargs),
                               atol=1e-12)
    assert (inner.P, inner.Q, inner.reduction) == (prob.P, prob.Q, R * inner.C)
    assert inner.C % 8 == 0 and inner.C - 8 < S * C <= inner.C


def test_float32_nchw_runs_on_its_nhwc_twin_where_the_twin_takes_the_ffma_kernel():
    from im2win.cuda.plan import TWIN_BYTES_PER_FLOP, nhwc_workspace
    cv8 = problem((8, 64, 56, 56), (128, 64, 3, 3), padding=1)
    for arch in (None, 80, 90):
        plan = plan_for(cv8, arch=arch)
        assert plan.algorithm == "im2win_nhwc" and plan.inner.file == "im2win_ffma"
    assert nhwc_workspace(cv8) <= TWIN_BYTES_PER_FLOP * cv8.flops
    assert plan_for(cv8, options=Options(ffma=False)).file == "im2win_conv"
    stem = problem((8, 5, 64, 64), (32, 5, 7, 7), stride=2)             # the twin: im2win_conv
    assert plan_for(stem).algorithm == "im2win_fused" and plan_for(stem).file == "im2win_conv"
    pointwise = problem((8, 64, 56, 56), (64, 32, 1, 1), stride=2,
                        groups=2)                                           # copies outweigh it
    assert nhwc_workspace(pointwise) > TWIN_BYTES_PER_FLOP * pointwise.flops
    assert plan_for(pointwise).algorithm == "im2win_fused"
    # The twin reads x in place: x's copy does not count against a workspace limit.
    tight = plan_for(cv8, workspace_limit=nhwc_workspace(cv8) - 1)
    assert tight.algorithm == "im2win_nhwc" and tight.x_in_place and plan_for(cv8).x_in_place
    assert tight.workspace_bytes <= nhwc_workspace(cv8) - 1
    assert plan_for(cv8, workspace_limit=nhwc_workspace(cv8, x=False) - 1).algorithm == \
        "im2win_fused"
    assert plan_for(cv8, workspace_limit=nhwc_workspace(cv8) - 1,
                    options=Options(x_in_place=False)).algorithm == "im2win_fused"
    with pytest.raises(ValueError, match="copies of w and y take"):
        plan_for(cv8, algorithm="im2win_nhwc", workspace_limit=1000)


def test_float32_nchw_twins_read_x_in_place_on_the_strided_ffma_form():
    """The twin's im2win_ffma.cu reads the NCHW x itself (kStridedX, Plan.x_in_place)
    wherever its strided form runs: its Geometry on x's own strides, no channels-last x in
    the workspace; the forms, tiles and options it does not cover copy x as before."""
    from im2win.cuda.plan import nhwc_workspace
    cv9 = problem((32, 64, 56, 56), (64, 64, 3, 3), padding=1)
    cv8 = problem((32, 64, 56, 56), (128, 64, 3, 3), padding=1)
    assert plan_for(cv8).x_in_place and plan_for(cv8).algorithm == "im2win_nhwc"
    assert plan_for(cv8).workspace_bytes == nhwc_workspace(cv8, y=False, x=False)
    plan = plan_for(cv9)
    assert plan.algorithm == "im2win_nhwc" and plan.x_in_place
    assert plan.inner.kernel == "im2win_ffma_to_nchw<64, 128, 16, true, true, false, true>"
    geo = plan.inner.geometry
    assert (geo.sn, geo.sc, geo.sp, geo.sq, geo.sr, geo.ss) == \
        (64 * 56 * 56, 56 * 56, 56, 1, 56, 1) and geo.base0 == -(56 + 1) and geo.y_nchw
    assert plan.workspace_bytes == nhwc_workspace(cv9, y=False, x=False) == 64 * 64 * 9 * 4
    sliced = (96 * 56 * 56, 56 * 56, 56, 1)                      # x[:, :64] of 96 channels
    assert make_plan(cv9, x_strides=sliced, w_aligned=True).inner.geometry.sn == 96 * 56 * 56
    forced = plan_for(cv9, algorithm="im2win_nhwc", tile="f128x128k8")
    assert forced.x_in_place and forced.inner.tile.name == "f128x128k8"
    for copied in (plan_for(cv9, options=Options(x_in_place=False)),
                   plan_for(cv9, options=Options(double_buffer=False)),
                   plan_for(cv9, precision="3xtf32", arch=90)):
        assert copied.algorithm == "im2win_nhwc" and not copied.x_in_place
        assert copied.workspace_bytes >= nhwc_workspace(cv9, y=False)
    assert plan_for(cv9, options=Options(x_in_place=False)).inner.kernel.endswith(", false>")
    # Tiles whose strided x stores would conflict (a warp over two quads) copy x.
    from im2win.cuda.plan import strided_tile
    assert {name for name, tile in FFMA_TILES.items() if not strided_tile(tile)} == \
        {"f64x64", "f96x128"}
    k96 = problem((32, 64, 56, 56), (96, 64, 3, 3), padding=1, stride=2)
    assert plan_for(k96).inner.tile.name == "f96x128" and not plan_for(k96).x_in_place
    k96c24 = problem((32, 24, 56, 56), (96, 24, 3, 3), padding=1, stride=2)
    assert plan_for(k96c24).inner.tile.name == "f96x128k8" and plan_for(k96c24).x_in_place
    assert not plan_for(cv9, algorithm="im2win_nhwc", tile="f64x64").x_in_place
    # Rows not evenly strided (x sliced along W): no copy can read them, the twin reads x.
    narrow = (64 * 56 * 60, 56 * 60, 60, 1)
    cut = make_plan(cv8, x_strides=narrow, w_aligned=True, algorithm="im2win_nhwc")
    assert cut.x_in_place
    assert make_plan(cv8, x_strides=narrow, w_aligned=True).algorithm == "im2win_nhwc"
    with pytest.raises(ValueError, match="evenly strided"):
        make_plan(cv8, x_strides=narrow, w_aligned=True, algorithm="im2win_nhwc",
                  options=Options(x_in_place=False))
    small = problem((8, 512, 7, 7), (512, 512, 3, 3), padding=1)     # split-K's partial sums
    split = plan_for(small)
    assert split.x_in_place and split.inner.splits > 1 and \
        split.inner.kernel.startswith("im2win_ffma_split<") and \
        split.inner.kernel.endswith(", true>")
    # An NHWC problem on a channels-last view of an NCHW array takes the strided form itself.
    nhwc = problem((8, 56, 56, 64), (128, 3, 3, 64), layout="NHWC", padding=1)
    view = make_plan(nhwc, x_strides=(64 * 56 * 56, 56 * 56, 56, 1), w_aligned=True,
                     x_aligned=False)
    assert view.file == "im2win_ffma" and view.kernel.endswith(", true>")
    for off in (Options(conflict_free=False), Options(x_in_place=False)):
        assert make_plan(nhwc, x_strides=(64 * 56 * 56, 56 * 56, 56, 1), w_aligned=True,
                         options=off).file == "im2win_conv"


def test_ffma_split_fixup_names_its_y_form_and_counts_its_tiles(monkeypatch):
    """Options.split_fixup: split-K's tiles summed by their last block (im2win_ffma_fixup),
    which writes y in its plan's form (NHWC; on the NCHW twin the float4 or staged NCHW y, as
    im2win_ffma_to_nchw), no split_reduce; its workspace the partial sums and an int a tile.
    Forced here on every split (the planner's rule, ffma_fixup_pays, below)."""
    from im2win.cuda import plan as planning
    from im2win.cuda.plan import fixup_counter_bytes, split_workspace
    monkeypatch.setattr(planning, "ffma_fixup_pays", lambda *args: True)
    fixup = Options(split_fixup=True)
    nhwc = problem((8, 7, 7, 512), (512, 3, 3, 512), layout="NHWC", padding=1)
    plain, fixed = plan_for(nhwc, options=Options(split_fixup=False)), plan_for(nhwc)
    assert plain.splits > 1 and not plain.fixup
    assert fixed.fixup and fixed.splits == plain.splits and fixed.kernel == \
        plain.kernel.replace("im2win_ffma_split<", "im2win_ffma_fixup<").replace(
            f", {plain.splits}, ", f", {plain.splits}, 0, ")
    tiles = -(-8 * 49 // fixed.tile.BN) * -(-512 // fixed.tile.BM)
    assert fixup_counter_bytes(nhwc, fixed.tile) == -(-4 * tiles // 16) * 16
    assert fixed.workspace_bytes == split_workspace(nhwc, fixed.splits) + \
        fixup_counter_bytes(nhwc, fixed.tile)
    for shape, form in (((8, 512, 7, 7), 2), ((8, 512, 8, 8), 1)):   # P*Q = 49, 64
        twin = plan_for(problem(shape, (512, 512, 3, 3), padding=1), options=fixup)
        inner = twin.inner
        assert twin.x_in_place and inner.fixup and inner.geometry.y_nchw == 1
        assert inner.kernel.startswith(f"im2win_ffma_fixup<64, 128, 16, true, true, "
                                       f"{inner.splits}, {form}, true")
    assert not plan_for(nhwc, options=Options(split_fixup=True, split_k=False)).fixup


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_ffma_split_fixup_where_it_measured_faster(layout):
    """By default the fixup sums two ranges on the kExact loop (cv6, cv11); eight ranges
    (cv12) and the checked loop (resnet50.16: padded) keep split_reduce's second launch."""
    cases = [((128, 256, 12, 12), (512, 256, 3, 3), {}, 2, True),          # cv6
             ((128, 256, 14, 14), (256, 256, 3, 3), {}, 2, True),          # cv11
             ((128, 512, 7, 7), (512, 512, 3, 3), {}, 8, False),           # cv12
             ((32, 256, 14, 14), (256, 256, 3, 3), dict(padding=1), 2, False)]  # resnet50.16
    for x_shape, w_shape, kwargs, splits, fixup in cases:
        if layout == "NHWC":
            x_shape, w_shape = (x_shape[0], *x_shape[2:], x_shape[1]), \
                (w_shape[0], *w_shape[2:], w_shape[1])
        prob = problem(x_shape, w_shape, layout=layout, **kwargs)
        plan, off = plan_for(prob), plan_for(prob, options=Options(split_fixup=False))
        if layout == "NCHW":
            plan, off = plan.inner, off.inner
        assert (plan.splits, plan.fixup, off.splits, off.fixup) == (splits, fixup, splits, False)
        assert plan.kernel.startswith("im2win_ffma_fixup<" if fixup else "im2win_ffma_split<")


def test_tma_problems_with_few_tiles_split_long_reductions(monkeypatch):
    from im2win.cuda import plan as cuda_plan
    from im2win.cuda.plan import split_workspace
    late = problem((32, 7, 7, 512), (512, 3, 3, 512), np.float16, layout="NHWC", padding=1)
    plan = plan_for(late, arch=90)               # resnet50.22: 52 tiles, 72 slices: 2 ranges
    assert plan.tma is not None and plan.splits == 2
    assert plan.kernel == "im2win_wgmma_tma_split<half_t, 128, 128, 6, 2, false>"
    assert plan.workspace_bytes == split_workspace(late, 2) == 2 * 32 * 49 * 512 * 4
    assert plan.grid(32, 1) == (52 * 2, 1, 1)
    assert plan_for(late, arch=90, workspace_limit=split_workspace(late, 2) - 1).splits == 1
    assert plan_for(late, arch=90, options=Options(split_k=False)).splits == 1
    assert plan_for(late, arch=90, options=Options(persistent=False)).splits == 1
    # Short reductions are not split: the second launch costs more host time than it saves.
    small_1x1 = problem((32, 7, 7, 960), (160, 1, 1, 960), np.float16, layout="NHWC")
    assert plan_for(small_1x1, arch=90).splits == 1     # mobilenet_v2.27: 26 tiles, 15 slices
    deep_1x1 = problem((32, 7, 7, 2048), (512, 1, 1, 2048), np.float16, layout="NHWC")
    assert plan_for(deep_1x1, arch=90).splits == 1      # resnet50.21: 32 slices, 16 a range
    big = problem((128, 56, 56, 64), (128, 3, 3, 64), np.float16, layout="NHWC", padding=1)
    assert plan_for(big, arch=90).splits == 1
    # The count: the largest that keeps SPLIT_MIN_SLICES a range and SPLIT_ITEMS work items.
    monkeypatch.setattr(cuda_plan, "SPLIT_MIN_SLICES", 3)
    plan = plan_for(small_1x1, arch=90)
    assert plan.splits == 4 and plan.grid(32, 1) == (26 * 4, 1, 1)
    assert plan.kernel == "im2win_wgmma_tma_split<half_t, 128, 128, 6, 4, false>"
    assert plan_for(small_1x1, arch=90, workspace_limit=split_workspace(small_1x1, 4) - 1
                    ).splits == 2
    listed = {expr for _, expr in instantiable()}
    assert plan.kernel in listed and "split_reduce<half_t>" in listed


def test_float32_on_tensor_cores_is_planned_on_the_hopper_tma_kernel_or_refused():
    from im2win.cuda.plan import nhwc_workspace, tf32_specializations
    prob = problem((8, 28, 28, 64), (128, 3, 3, 64), layout="NHWC", padding=1)
    for precision, three in (("tf32", "false"), ("3xtf32", "true")):
        plan = plan_for(prob, arch=90, precision=precision)
        assert plan.file == "im2win_wgmma" and plan.precision == precision
        assert plan.kernel.startswith("im2win_wgmma_tf32<") and plan.kernel.endswith(
            f", true, {three}>")
        assert plan.tma.w_box == (32, plan.tile.BN) and plan.tma.x.channels == 32
        assert plan.smem <= 227 * 1024 and ("im2win_wgmma", plan.kernel) in \
            tf32_specializations()
    three = plan_for(prob, arch=90, precision="3xtf32")
    assert three.smem == three.tile.smem_bytes(three.tile.three_stages(), three=True,
                                              table=False)
    # "3xtf32" reads the filter split once a call (tf32_split): 2K rows, in its workspace.
    assert three.tma.w_dims == (prob.reduction, 2 * prob.K) and \
        three.workspace_bytes == 2 * prob.K * prob.reduction * 4
    assert plan_for(prob, arch=90, precision="tf32").workspace_bytes == 0
    assert plan_for(prob, arch=90).file == "im2win_ffma"                # float32: CUDA cores
    # NCHW runs on its NHWC twin (channels-last copies), the twin's epilogue writing NCHW y.
    nchw = problem((8, 64, 28, 28), (128, 64, 3, 3), padding=1)
    for precision in ("tf32", "3xtf32"):
        plan = plan_for(nchw, arch=90, precision=precision)
        assert plan.algorithm == "im2win_nhwc" and plan.inner.precision == precision
        assert plan.inner.kernel == plan_for(prob, arch=90, precision=precision).kernel
        assert plan.inner.geometry.y_nchw == 1 and \
            plan.workspace_bytes == nhwc_workspace(nchw, y=False) + plan.inner.workspace_bytes
        assert plan_for(nchw, arch=90, precision=precision, algorithm="im2win_nhwc") == plan
    refused = [(prob, dict(arch=80), "compute capability 9.0"),
               (prob, dict(arch=90, algorithm="im2win"), "fused kernel"),
               (prob, dict(arch=90, options=Options(tma=False)), "TMA"),
               (nchw, dict(arch=90, algorithm="im2win_fused"), "NHWC, C/groups a multiple of 32"),
               (nchw, dict(arch=90, workspace_limit=1000), "NCHW runs on its NHWC twin"),
               (problem((8, 28, 28, 48), (128, 3, 3, 48), layout="NHWC"), dict(arch=90),
                "C/groups=48"),
               (problem((2, 40, 40, 64), (8, 3, 3, 64), layout="NHWC", stride=9),
                dict(arch=90), "TMA traversal strides are at most 8")]   # im2col_args' reason
    for p, kwargs, match in refused:
        with pytest.raises(ValueError, match=match):
            plan_for(p, precision="3xtf32", **kwargs)
    with pytest.raises(ValueError, match="float32 inputs only"):
        plan_for(problem((2, 9, 9, 64), (8, 3, 3, 64), np.float16, layout="NHWC"), arch=90,
                 precision="tf32")
    for tile in WGMMA_TILES.values():                          # every ring fits, in both
        assert tile.smem_bytes(tile.three_stages(), three=True) <= 227 * 1024 and \
            tile.three_stages() >= 2
    # "3xtf32" adds each slice into a second accumulator set: 256x128 gives way to 128x128,
    # and the tiles of more than 64 accumulators per thread are refused by name.
    wide = problem((128, 56, 56, 64), (128, 3, 3, 64), layout="NHWC", padding=1)
    assert plan_for(wide, arch=90, precision="tf32").tile.name == "wg256x128"
    assert plan_for(wide, arch=90, precision="3xtf32").tile.name == "wg128x128"
    with pytest.raises(ValueError, match="wg128x128, wg256x64"):
        plan_for(wide, arch=90, precision="3xtf32", tile="wg128x256")


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_float32_stems_on_tensor_cores_run_over_window_columns_of_32(layout):
    """A stem at precision "tf32" or "3xtf32": its R x 1 problem over window columns padded to
    a multiple of 32 (the kernel's TMA boxes of 32 floats; the FP32 path pads to 8), whatever
    the bytes a FLOP, since nothing else runs it at these precisions; NCHW y written by the
    epilogue."""
    from im2win.cuda.plan import columns_stage, columns_workspace
    for name, C2, C8 in (("cv1", 64, 40), ("cv3", 32, 24), ("cv7", 32, 16)):
        x_shape, w_shape = LAYERS[name].shapes(8, layout)
        prob = problem(x_shape, w_shape, layout=layout, **LAYERS[name].kwargs)
        assert columns_stage(prob).C == C8
        for precision in ("tf32", "3xtf32"):
            plan = plan_for(prob, arch=90, precision=precision)
            stage = columns_stage(prob, precision=precision)
            inner = plan_for(stage, arch=90, algorithm="im2win_fused", precision=precision,
                             options=inner_options(Options()))
            assert plan.algorithm == "im2win_columns" and stage.C == C2
            assert plan.inner == dataclasses.replace(
                inner, geometry=inner.geometry._replace(y_nchw=int(layout == "NCHW")))
            assert plan.inner.precision == precision and plan.workspace_bytes == \
                columns_workspace(prob, y=False, precision=precision) + inner.workspace_bytes
            assert plan_for(prob, arch=90, precision=precision,
                            algorithm="im2win_columns") == plan
        for kwargs in (dict(workspace_limit=1000), dict(options=Options(window_columns=False))):
            with pytest.raises(ValueError, match="C/groups=3|workspace_limit=1000"):
                plan_for(prob, arch=90, precision="3xtf32", **kwargs)


def test_ffma_splits_the_reduction_of_small_grids():
    from im2win.cuda.plan import (FFMA_SPLIT_MIN_SLICES, ffma_kernel_name, split_workspace)
    # ResNet-50's 3x3 layers at batch 32, the counts tools/ffma_split_dev.py measured fastest
    late = problem((32, 7, 7, 512), (512, 3, 3, 512), layout="NHWC", padding=1)   # 200 tiles
    mid = problem((32, 14, 14, 256), (256, 3, 3, 256), layout="NHWC", padding=1)  # 392
    early = problem((32, 28, 28, 128), (128, 3, 3, 128), layout="NHWC", padding=1)  # 784
    assert [plan_for(p).splits for p in (late, mid, early)] == [8, 2, 1]
    plan = plan_for(late)
    assert plan.file == "im2win_ffma" and plan.grid(32, 1)[2] == plan.splits
    assert plan.kernel == ffma_kernel_name(plan.tile, Options(), plan.splits) and \
        plan.kernel.startswith("im2win_ffma_split<")
    assert plan.workspace_bytes == split_workspace(late, plan.splits)
    listed = {expr for _, expr in instantiable()}
    assert plan.kernel in listed and "split_reduce<float>" in listed
    # the device's SMs: on half an H200's, mid's 392 tiles are a wave already
    assert plan_for(mid, sms=66).splits == 1 and plan_for(late, sms=66).splits > 1
    # NCHW through its NHWC twin: the twin's plan splits alike, for the device's SMs
    nchw = problem((32, 256, 14, 14), (256, 256, 3, 3), padding=1)
    assert plan_for(nchw).inner.splits == 2 and plan_for(nchw, sms=66).inner.splits == 1
    # Not: the switch or the ring off, groups, a short reduction, a big grid, the workspace.
    for kwargs in (dict(options=Options(split_k=False)),
                   dict(options=Options(double_buffer=False)),
                   dict(workspace_limit=split_workspace(late, 2) - 1)):
        assert plan_for(late, **kwargs).splits == 1
    grouped = problem((32, 7, 7, 512), (512, 3, 3, 256), layout="NHWC", padding=1, groups=2)
    short = problem((32, 7, 7, 8), (512, 3, 3, 8), layout="NHWC", padding=1)   # 9 slices
    big = problem((128, 56, 56, 64), (64, 3, 3, 64), layout="NHWC", padding=1)
    for prob in (grouped, short, big):
        assert plan_for(prob).file == "im2win_ffma" and plan_for(prob).splits == 1
    assert short.reduction // 8 < 2 * FFMA_SPLIT_MIN_SLICES


def test_float32_nhwc_fused_windows_of_8_channels_run_on_the_ffma_kernel():
    nhwc = problem((2, 9, 9, 32), (64, 3, 3, 32), layout="NHWC", padding=1)
    plan = plan_for(nhwc)
    assert plan.file == "im2win_ffma" and plan.tile.BK == 16 and not plan.taps
    assert plan.kernel == "im2win_ffma<64, 128, 16, true, true, false>" and \
        plan.workspace_bytes == 0
    eight = plan_for(problem((2, 9, 9, 24), (64, 3, 3, 24), layout="NHWC"))
    assert eight.file == "im2win_ffma" and eight.tile.name == "f64x128k8"
    off = plan_for(nhwc, options=Options(conflict_free=False, double_buffer=False))
    assert off.kernel == "im2win_ffma<64, 128, 16, false, false, false>"
    for other in (plan_for(nhwc, options=Options(ffma=False)),
                  plan_for(nhwc, options=Options(vector_loads=False)),
                  plan_for(nhwc, algorithm="im2win"),
                  plan_for(problem((2, 32, 9, 9), (64, 32, 3, 3))),          # NCHW
                  plan_for(problem((2, 9, 9, 12), (64, 3, 3, 12), layout="NHWC")),
                  make_plan(nhwc, x_strides=contiguous_strides(nhwc), w_aligned=False),
                  make_plan(nhwc, x_strides=contiguous_strides(nhwc), w_aligned=True,
                            x_aligned=False)):
        assert other.file == "im2win_conv"
    xn, _, xh, xw = contiguous_strides(nhwc)
    strided = (2 * xn, 1, 2 * xh, 2 * xw)                          # still multiples of 4
    assert make_plan(nhwc, x_strides=strided, w_aligned=True).file == "im2win_ffma"
    odd = (xn, 1, xh + 1, xw + 1)
    assert make_plan(nhwc, x_strides=odd, w_aligned=True).file == "im2win_conv"
    with pytest.raises(ValueError, match="is im2win_ffma.cu's.*not a multiple of 16"):
        plan_for(problem((2, 9, 9, 24), (64, 3, 3, 24), layout="NHWC"), tile="f64x128")
    with pytest.raises(ValueError, match="float32 NHWC problems with fused windows only"):
        plan_for(problem((2, 32, 9, 9), (64, 32, 3, 3)), tile="f64x128k8")


def test_ffma_tiles_of_96_filters_where_they_cover_k_with_fewer_rows():
    """96, 288 and 480 filters take tiles of 96 (no row idle, where 64 leaves a quarter, a
    tenth, a sixteenth); 64, 192, 131 (192 rows either way) and 32 keep 64. The slice depth
    follows C/G as before, and the stems' R x 1 problems (cv1: 96 filters) follow K."""
    for K, rows in ((96, 96), (288, 96), (480, 96), (64, 64), (192, 64), (131, 64), (32, 64)):
        for C, depth in ((32, 16), (24, 8)):
            plan = plan_for(problem((2, 9, 9, C), (K, 3, 3, C), layout="NHWC", padding=1))
            assert plan.file == "im2win_ffma" and (plan.tile.BM, plan.tile.BK) == (rows, depth)
            assert plan.kernel.startswith(f"im2win_ffma<{rows}, 128, {depth},")
    cv1 = problem((2, 227, 227, 3), (96, 11, 11, 3), layout="NHWC", stride=4)
    columns = plan_for(cv1, options=Options(window_runs=False))
    assert columns.algorithm == "im2win_columns"
    assert columns.inner.kernel == "im2win_ffma<96, 128, 8, true, true, false, false, true>"
    assert plan_for(cv1, options=Options(fused_runs=False)).inner.kernel == \
        "im2win_ffma<96, 128, 16, true, true, false, true>"
    assert plan_for(cv1).inner.kernel == \
        "im2win_ffma<96, 128, 16, true, true, false, false, true, true>"


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_stems_run_over_window_runs(layout):
    """"im2win_runs" materialised (Options.fused_runs off): the 1 x 1 problem over x_win's
    rows padded to 16 bytes, each output pixel's S*R*C run one "pixel" of channels, padded
    once to the slice (kTail only where it is not a multiple of 16); "auto" takes it for
    float32 stems of at least RUNS_REDUCTION products that it pads less than the window
    columns (cv1, cv2), and what it refuses."""
    from im2win.cuda.plan import (RUNS_REDUCTION, WINDOW_RUN_ROW, runs_pitch, runs_stage,
                                  runs_strides, runs_workspace)
    nchw = layout == "NCHW"
    x_shape, w_shape = LAYERS["cv1"].shapes(128, layout)
    cv1 = problem(x_shape, w_shape, np.float32, layout=layout, **LAYERS["cv1"].kwargs)
    inner = runs_stage(cv1)
    assert (inner.layout, inner.C, inner.H, inner.W, inner.R, inner.S, inner.sw) == \
        ("NHWC", 363, 55, 55, 1, 1, 1)
    assert runs_pitch(cv1) == 7492 and runs_strides(cv1) == (55 * 7492, 1, 7492, 132)
    materialised = Options(fused_runs=False)

    def plan_for(prob, **kwargs):
        kwargs["options"] = dataclasses.replace(kwargs.get("options", Options()),
                                                fused_runs=False)
        return make_plan(prob, x_strides=contiguous_strides(prob), w_aligned=True, **kwargs)
    for arch in (None, 80, 90):
        plan = plan_for(cv1, arch=arch, options=materialised)
        assert plan.algorithm == "im2win_runs" and plan.inner.file == "im2win_ffma"
        geo = plan.inner.geometry
        assert (geo.red, geo.redp, geo.sq, geo.sp, geo.y_nchw) == (363, 368, 132, 7492, nchw)
        staged = nchw and cv1.P * cv1.Q % 4 != 0                  # 3025 pixels an image
        assert plan.inner.kernel == (
            "im2win_ffma_to_nchw<96, 128, 16, true, true, true, false, true>" if staged else
            "im2win_ffma<96, 128, 16, true, true, false, true>")
        assert plan.workspace_bytes == runs_workspace(cv1, y=False) == \
            (128 * 55 * 7492 + 368 + 96 * 368) * 4
    through_y = plan_for(cv1, options=Options(nchw_epilogue=False), algorithm="im2win_runs")
    assert through_y.workspace_bytes == runs_workspace(cv1) and \
        through_y.inner.geometry.y_nchw == 0
    assert (plan_for(cv1, options=Options(nchw_epilogue=False)).algorithm ==
            "im2win_runs") == (not nchw)
    assert plan_for(cv1, options=Options(window_runs=False)).algorithm == "im2win_columns"
    limit = runs_workspace(cv1, y=False) - 1
    assert plan_for(cv1, workspace_limit=limit).algorithm != "im2win_runs"
    # 48 products (a multiple of 16): no kTail; forced, below RUNS_REDUCTION
    short = problem((2, 3, 21, 19), (40, 3, 4, 4), stride=4, layout="NCHW")
    assert short.reduction < RUNS_REDUCTION and plan_for(short).algorithm != "im2win_runs"
    forced = plan_for(short, algorithm="im2win_runs")
    assert forced.inner.kernel == "im2win_ffma_to_nchw<64, 128, 16, true, true, false, false>"
    refused = [
        (problem((2, 3, 21, 19), (40, 3, 4, 4), np.float16, stride=4), "takes float32"),
        (problem((2, 6, 21, 19), (40, 3, 4, 4), stride=4, groups=2), "one group"),
        (problem((2, 3, 21, 19), (40, 3, 4, 4), stride=4, dilation=(1, 2)), "dw = 1"),
        (problem((2, 3, 21, 19), (40, 3, 3, 3), stride=1), "sw\\*R\\*C = 9"),
        (problem((1, 1, 8, WINDOW_RUN_ROW), (4, 1, 4, 4), stride=4), "exceeds"),
    ]
    for prob, match in refused:
        with pytest.raises((ValueError, TypeError), match=match):
            plan_for(prob, algorithm="im2win_runs")
    with pytest.raises(ValueError, match="double_buffer"):
        plan_for(cv1, algorithm="im2win_runs", options=Options(double_buffer=False))
    with pytest.raises(ValueError, match="16-deep slices"):
        plan_for(cv1, algorithm="im2win_runs", tile="f96x128k8")
    with pytest.raises(ValueError, match="workspace_limit"):
        plan_for(cv1, algorithm="im2win_runs", workspace_limit=limit)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_stems_runs_fused_read_x_through_the_table(rng, layout):
    """Fused runs (Options.fused_runs, the default): im2win_ffma.cu's kTaps on the problem's
    own Geometry (red = S*R*C, redp rounded up to 16), its table's off(t) picking
    xp[n, c, p*sh + r*dh, q*sw + s*dw] for t in window order (s, then r, then c) out of x
    itself; no window tensor in the workspace (the filter's window order only), so a
    workspace_limit below x_win's still takes it; kExact where no window reaches the padding
    and K fills the tiles."""
    from im2win.cuda.plan import runs_workspace
    fused = Options(fused_runs=True)

    def plan_for(prob, **kwargs):
        kwargs.setdefault("options", fused)
        return make_plan(prob, x_strides=contiguous_strides(prob), w_aligned=True, **kwargs)
    x_shape, w_shape = LAYERS["cv1"].shapes(128, layout)
    cv1 = problem(x_shape, w_shape, np.float32, layout=layout, **LAYERS["cv1"].kwargs)
    plan = plan_for(cv1)
    assert plan.algorithm == "im2win_runs" and plan.x_in_place
    geo = plan.inner.geometry
    assert (geo.red, geo.redp, geo.y_nchw) == (363, 368, layout == "NCHW")
    assert plan.inner.kernel == (
        "im2win_ffma_to_nchw<96, 128, 16, true, true, true, false, false, true, true>"
        if layout == "NCHW" else "im2win_ffma<96, 128, 16, true, true, false, false, true, true>")
    assert plan.workspace_bytes == runs_workspace(cv1, y=False, fused=True) == 96 * 368 * 4
    assert plan_for(cv1, workspace_limit=runs_workspace(cv1, y=False) - 1).x_in_place
    assert not plan_for(cv1, options=Options(fused_runs=False)).x_in_place
    # a padded stem forced onto the runs: no kExact, and the table addresses x exactly
    x = rng.standard_normal((2, 3, 13, 14))
    w = np.zeros((5, 3, 4, 3))
    kwargs = dict(stride=(2, 4), padding=((1, 2), (2, 1)))
    if layout == "NHWC":
        x, w = x.transpose(0, 2, 3, 1).copy(), w.transpose(0, 2, 3, 1).copy()
    prob = make_problem(x.astype(np.float32), w.astype(np.float32), layout=layout, **kwargs)
    plan = plan_for(prob, algorithm="im2win_runs")
    geo = plan.inner.geometry
    assert plan.x_in_place and plan.inner.kernel.endswith("false, false, true>")
    table = np.frombuffer(plan.inner.taps, np.int32).reshape(-1, 2)
    assert len(table) % 64 == 0 and not table[prob.reduction:].any()
    off, dr, ds = table[:prob.reduction, 0], table[:prob.reduction, 1] >> 16, \
        table[:prob.reduction, 1] & 0xffff
    s, r, c = np.unravel_index(np.arange(prob.reduction), (prob.S, prob.R, prob.C))
    assert (dr == r * prob.dh).all() and (ds == s * prob.dw).all()
    xp = np.pad(x if layout == "NCHW" else x.transpose(0, 3, 1, 2),
                ((0, 0), (0, 0), (prob.pt, prob.pb), (prob.pl, prob.pr)))
    for n, p, q in np.ndindex(prob.N, prob.P, prob.Q):
        base = n * geo.sn + p * geo.sp + q * geo.sq + geo.base0
        h, col = p * prob.sh - prob.pt + dr, q * prob.sw - prob.pl + ds
        inside = (h >= 0) & (h < prob.H) & (col >= 0) & (col < prob.W)
        got = x.ravel()[np.where(inside, base + off, 0)] * inside
        np.testing.assert_array_equal(got, xp[n, c, p * prob.sh + r, q * prob.sw + s])


def test_transpose_launch_picks_the_layout_kernel_and_its_grid():
    """layout.cu's transposes as Executable._transpose launches them (the CPU emulation,
    tools/emulate_layout.py, runs each kernel on this choice): filter taps by passes from
    TRANSPOSE_TAPS_MIN_ELEMENTS where rows are contiguous, else one element a thread; 16-byte
    words for aligned 2-byte rows of whole words; else 64 x 64 or 32 x 128 tiles, whichever
    leaves fewer elements idle (64 x 64 on a tie); grids capped."""
    from im2win.cuda.plan import TRANSPOSE_TAPS_MIN_ELEMENTS, transpose_launch
    taps = transpose_launch(4, 60, 512, 9, 512 * 9, 9, 1, True)
    assert taps == ("transpose_taps", (60 * 2, 1, 1), (256, 1, 1))     # 455 rows a pass
    assert 60 * 512 * 9 >= TRANSPOSE_TAPS_MIN_ELEMENTS > 5 * 512 * 9
    assert transpose_launch(4, 5, 512, 9, 512 * 9, 9, 1, True)[0] == "transpose_narrow"
    assert transpose_launch(4, 60, 512, 9, 512 * 12, 12, 1, True)[0] == "transpose_narrow"
    assert transpose_launch(4, 600000, 1, 3, 3, 3, 1, True)[1] == (8 * 65535, 1, 1)
    assert transpose_launch(2, 3, 64, 136, 64 * 136, 136, 1, True) == \
        ("transpose_words", (3, 3, 1), (256, 1, 1))
    assert transpose_launch(2, 3, 64, 136, 64 * 136, 136, 1, False)[0] == "transpose_batched"
    assert transpose_launch(4, 70000, 70, 130, 9100, 130, 1, True) == \
        ("transpose_batched", (2 * 3, 65535, 1), (32, 8, 1))          # 128 x 192 against 96 x 256
    # cv4's NCHW x: 32 channels of 224 x 224 pixels on 32 x 128 tiles (64 x 64: half idle)
    assert transpose_launch(4, 128, 32, 50176, 32 * 50176, 50176, 1, True) == \
        ("transpose_batched32", (392, 128, 1), (32, 8, 1))
    # cv5's: 96 channels of 24 x 24: 96 x 640 on 32 x 128 tiles against 128 x 576
    assert transpose_launch(4, 128, 96, 576, 96 * 576, 576, 1, True)[:2] == \
        ("transpose_batched32", (3 * 5, 128, 1))
    assert transpose_launch(4, 128, 64, 12544, 64 * 12544, 12544, 1, True)[0] == \
        "transpose_batched"                                                     # cv8's: a tie


def test_graph_plan_takes_cublas_for_16_bit_nhwc_1x1_layers_inside_a_capture():
    """Inside a CUDA graph capture "auto" runs float16 and bfloat16 NHWC 1x1 layers at stride
    1 that it gives pointwise.cu or the Tensor-Core kernels as cuBLAS's GEMM (graph_plan);
    nothing else changes: float32, NCHW, 3x3, strided, grouped, padded, and what "auto"
    already gives cuBLAS."""
    def graph_of(x_shape, w_shape, dtype, layout="NHWC", **kw):
        prob = problem(x_shape, w_shape, dtype, layout=layout, **kw)
        plan = plan_for(prob, arch=90)
        return plan, graph_plan(prob, plan, contiguous_strides(prob), plan.options)

    for dtype in (np.float16, ml_dtypes.bfloat16):
        for w_shape in ((1024, 1, 1, 256), (64, 1, 1, 64)):      # wgmma kernel, pointwise.cu
            plan, graph = graph_of((32, 14, 14, w_shape[3]), w_shape, dtype)
            assert plan.algorithm in ("im2win_fused", "pointwise")
            assert graph.algorithm == "gemm" and not graph.geometry.gather
    assert graph_of((32, 56, 56, 16), (128, 1, 1, 16), np.float16)[0].algorithm == "gemm"
    for args, kw in ((((32, 14, 14, 256), (1024, 1, 1, 256), np.float32), {}),
                     (((32, 256, 14, 14), (1024, 256, 1, 1), np.float16, "NCHW"), {}),
                     (((32, 14, 14, 256), (256, 3, 3, 256), np.float16), {}),
                     (((32, 14, 14, 256), (1024, 1, 1, 256), np.float16), dict(stride=2)),
                     (((32, 14, 14, 256), (1024, 1, 1, 128), np.float16), dict(groups=2)),
                     (((32, 14, 14, 256), (1024, 1, 1, 256), np.float16), dict(padding=1)),
                     (((32, 56, 56, 16), (128, 1, 1, 16), np.float16), {})):
        assert graph_of(*args, **kw)[1] is None


def test_ffma_exact_forms_only_where_every_load_is_inside_x_and_w():
    """kExact (no bounds predicates) where no window reaches the padding, the filters fill the
    tiles and the full kernel runs on a planner's tile; named in the kernel and listed in CI."""
    from im2win.cuda.plan import ffma_exact, ffma_kernel_name
    listed = {expr for _, expr in instantiable()}
    cases = [(problem((2, 9, 8, 64), (64, 3, 2, 64), layout="NHWC"), {}, True),
             (problem((2, 9, 8, 64), (128, 3, 3, 64), layout="NHWC", stride=2), {}, True),
             (problem((2, 9, 8, 64), (64, 3, 3, 64), layout="NHWC", padding=(0, 1)), {}, False),
             (problem((2, 9, 8, 64), (64, 3, 3, 64), layout="NHWC", padding=(1, 0)), {}, False),
             (problem((2, 9, 8, 64), (70, 3, 3, 64), layout="NHWC"), {}, False),      # K tail
             (problem((2, 9, 8, 64), (64, 3, 3, 64), layout="NHWC"),
              dict(options=Options(double_buffer=False)), False),
             (problem((2, 9, 8, 64), (64, 3, 3, 64), layout="NHWC"),
              dict(options=Options(exact_loads=False)), False),
             (problem((2, 9, 8, 64), (64, 3, 3, 64), layout="NHWC"), dict(tile="f64x64"), False)]
    for prob, kwargs, exact in cases:
        plan = plan_for(prob, **kwargs)
        assert plan.file == "im2win_ffma"
        assert ffma_exact(plan.geometry, plan.tile, plan.options) == exact
        assert plan.kernel == ffma_kernel_name(plan.tile, plan.options, plan.splits,
                                               exact=exact)
        assert plan.kernel in listed
