"""The launch path on the GPU: CUDA graphs, concurrent streams and the remembered call.
Skipped without a visible GPU."""

import threading

import ml_dtypes
import numpy as np
import pytest

import im2win
from helpers import random_arrays, to_layout
from im2win import cuda
from im2win.cuda.plan import window_bytes
from im2win.problem import make_problem

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy") if im2win.cuda.is_available() else None

LAYOUTS = ["NCHW", "NHWC"]
# The first two share a kernel instantiation (other padding and dilation: other tables), the
# third does not (but in float64, which has one).
CASES = [((2, 16, 13, 11), (24, 16, 3, 3), dict(padding=1)),
         ((2, 16, 13, 11), (24, 16, 3, 3), dict(padding=2, dilation=2)),
         ((3, 5, 9, 10), (7, 5, 2, 3), dict(stride=(2, 1)))]


def device_case(rng, case, dtype, layout, K_extra=0):
    x_shape, w_shape, kwargs = case
    w_shape = (w_shape[0] + K_extra,) + w_shape[1:]
    x, w, b = random_arrays(rng, x_shape, w_shape, w_shape[0], dtype)
    x, w = to_layout(layout, x, w)
    return (cupy.asarray(x), cupy.asarray(w), cupy.asarray(b)), dict(kwargs, layout=layout)


def assert_replays_give(graph, outs, eager, dtype, between=lambda: None):
    """Replay `graph` twice, each after `between()` and amid fresh allocations (which it must
    leave alone): each of `outs`, NaN-filled first, equal to its eager result."""
    for _ in range(2):
        between()
        bystanders = [cupy.full(1 << 16, 7, dtype) for _ in range(16)]
        for out in outs:
            out.fill(np.nan)
        graph.launch()
        cupy.cuda.Device().synchronize()
        for out, y in zip(outs, eager):
            cupy.testing.assert_array_equal(out, y)
        assert all(bool((a == 7).all()) for a in bystanders)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("algorithm", ["im2win_fused", "im2win"])
def test_captured_graph_replays_the_eager_results_bit_for_bit(rng, layout, dtype, algorithm):
    calls = [device_case(rng, case, dtype, layout) for case in CASES]
    probs = [make_problem(*arrays, **kw) for arrays, kw in calls]
    kernels = [cuda._plan(prob, arrays[0], arrays[1], algorithm, None, None).kernel
               for prob, (arrays, _) in zip(probs, calls)]
    # float64 has one instantiation a layout and mode (its vector flags are fixed): there the
    # third problem is planned and its table uploaded inside the capture, but not compiled.
    assert kernels[0] == kernels[1] and (kernels[1] != kernels[2]) == (dtype != np.float64)
    if algorithm == "im2win":                          # one image at a time: chunked launches
        calls[0][1]["workspace_limit"] = window_bytes(probs[0], 1) + \
            probs[0].K * probs[0].reduction * probs[0].dtype.itemsize
    eager = [im2win.conv2d(*arrays, algorithm=algorithm, **kw) for arrays, kw in calls]
    # First seen inside the capture: compiled, planned and its table uploaded there; its
    # filter is a non-contiguous view (a temporary copy) and its out is strided (another).
    (x, w, b), kw = device_case(rng, CASES[2], dtype, layout, K_extra=np.dtype(dtype).itemsize)
    w_view = cupy.stack([w, w], axis=-1)[..., 0]
    fresh_out = cupy.full(make_problem(x, w, b, **kw).y_shape + (2,), np.nan, dtype)[..., 1]
    outs = [cupy.full_like(y, np.nan) for y in eager]
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        for (arrays, kw_i), out in zip(calls, outs):
            assert im2win.conv2d(*arrays, algorithm=algorithm, out=out, **kw_i) is out
        im2win.conv2d(x, w_view, b, algorithm=algorithm, out=fresh_out, **kw)
        graph = stream.end_capture()
    assert all(bool(cupy.isnan(out).all()) for out in outs)          # captured, not run
    fresh_eager = im2win.conv2d(x, w, b, algorithm=algorithm, **kw)
    cupy.cuda.Device().synchronize()
    for _ in range(2):
        # Other problems run in between (the same kernels with other tables), and memory
        # freed since the capture is handed out again and must stay untouched by the replay.
        (x2, w2, b2), kw2 = device_case(rng, CASES[0], dtype, layout)
        im2win.conv2d(x2, w2, b2, algorithm=algorithm, **dict(kw2, padding=3, dilation=3))
        bystanders = [cupy.full(1 << 16, 7, dtype) for _ in range(16)]
        for out in outs + [fresh_out]:
            out.fill(np.nan)
        graph.launch()                       # on the current stream, after the fills
        cupy.cuda.Device().synchronize()
        for out, y in zip(outs, eager):
            cupy.testing.assert_array_equal(out, y)
        cupy.testing.assert_array_equal(fresh_out, fresh_eager)
        assert all(bool((a == 7).all()) for a in bystanders)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_captured_gemm_replays_the_eager_results_bit_for_bit(rng, layout, dtype):
    """The cuBLAS path of 1x1 convolutions inside a capture: at stride 1 on x in place, and at
    a stride through its gathered copy (graph-owned workspace), with and without a bias."""
    cases = [((2, 32, 9, 7), (24, 32, 1, 1), dict()), ((3, 40, 8, 9), (17, 40, 1, 1),
                                                         dict(stride=(2, 3)))]
    calls = [device_case(rng, case, dtype, layout) for case in cases]
    calls = [((x, w, b if i else None), kw) for i, ((x, w, b), kw) in enumerate(calls)]
    eager = [im2win.conv2d(*arrays, algorithm="gemm", **kw) for arrays, kw in calls]
    outs = [cupy.full_like(y, np.nan) for y in eager]
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        for (arrays, kw), out in zip(calls, outs):
            im2win.conv2d(*arrays, algorithm="gemm", out=out, **kw)
        graph = stream.end_capture()
    assert all(bool(cupy.isnan(out).all()) for out in outs)          # captured, not run
    assert_replays_give(graph, outs, eager, dtype)


def test_problems_sharing_a_kernel_with_other_shared_memory_run_in_any_order(rng):
    """Two problems of one wgmma instantiation whose resident filters take different shared
    memory: the larger one still launches after the smaller one's Executable was made (the
    kernel's dynamic shared-memory attribute only grows)."""
    if cuda.compute_capability(cupy.cuda.runtime.getDevice()) != 90:
        pytest.skip("the Hopper kernel's resident filter")
    big = device_case(rng, ((2, 256, 56, 56), (128, 256, 1, 1), {}), np.float16, "NHWC")
    small = device_case(rng, ((2, 64, 56, 56), (128, 64, 1, 1), {}), np.float16, "NHWC")
    plans = [cuda._plan(make_problem(*arrays, **kw), arrays[0], arrays[1], "auto", None, None)
             for arrays, kw in (big, small)]
    assert plans[0].kernel == plans[1].kernel and plans[0].smem > plans[1].smem
    first = im2win.conv2d(*big[0], **big[1])
    im2win.conv2d(*small[0], **small[1])
    again = im2win.conv2d(*big[0], **big[1])
    cupy.testing.assert_array_equal(again, first)


def test_concurrent_calls_on_two_streams_give_the_eager_results(rng):
    """Problems sharing a kernel, interleaved on two streams with no synchronisation."""
    calls = [device_case(rng, CASES[i], dtype, layout)
             for i, (dtype, layout) in enumerate([(np.float32, "NCHW"), (np.float16, "NHWC")])]
    calls += [device_case(rng, CASES[1], np.float32, "NCHW"),
              device_case(rng, CASES[0], np.float16, "NHWC")]
    eager = [im2win.conv2d(*arrays, **kw) for arrays, kw in calls]
    cupy.cuda.Device().synchronize()         # the streams below do not wait for this one
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(2)]
    results = [[] for _ in calls]
    for _ in range(6):
        for i, (arrays, kw) in enumerate(calls):
            with streams[i % 2]:
                results[i].append(im2win.conv2d(*arrays, **kw))
    for s in streams:
        s.synchronize()
    for ys, y in zip(results, eager):
        for got in ys:
            cupy.testing.assert_array_equal(got, y)


def test_calls_from_several_threads_give_the_eager_results(rng):
    """Remembered calls launched from threads at once (each thread has its own argument
    buffers and its own default stream per device)."""
    calls = [device_case(rng, CASES[i % 3], dtype, "NHWC")
             for i, dtype in enumerate([np.float32, np.float16, np.float32, np.float16])]
    eager = [im2win.conv2d(*arrays, **kw) for arrays, kw in calls]
    cupy.cuda.Device().synchronize()
    results = {}

    def work(i):
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            arrays, kw = calls[i % len(calls)]
            results[i] = [im2win.conv2d(*arrays, **kw) for _ in range(20)]
        stream.synchronize()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == list(range(8))
    for i, ys in results.items():
        for y in ys:
            cupy.testing.assert_array_equal(y, eager[i % len(calls)])


def test_a_remembered_call_still_refuses_bad_arguments(monkeypatch):
    x, w = cupy.ones((1, 2, 5, 5), cupy.float32), cupy.ones((3, 2, 3, 3), cupy.float32)
    for _ in range(2):
        im2win.conv2d(x, w, stride=1, groups=1, padding=[1, 1], workspace_limit=None)
    for kwargs, error, match in [(dict(stride=True), TypeError, "stride must be an int"),
                                 (dict(stride=1.0), TypeError, "stride must be an int"),
                                 (dict(groups=True), TypeError, "groups must be an int"),
                                 (dict(padding=[True, 1]), TypeError, "padding must be an int"),
                                 (dict(workspace_limit=True), TypeError,
                                  "workspace_limit must be an int")]:
        with pytest.raises(error, match=match):
            im2win.conv2d(x, w, **dict(dict(padding=[1, 1]), **kwargs))
    # out of a remembered key (same shapes and strides), overlapping x this time
    big, other = (cupy.ones((2, 3, 3, 3), cupy.float32) for _ in range(2))
    w1 = cupy.ones((3, 2, 1, 1), cupy.float32)
    im2win.conv2d(other[1:, :2], w1, out=big[1:])
    with pytest.raises(ValueError, match="out overlaps x"):
        im2win.conv2d(big[1:, :2], w1, out=big[1:])
    # x and out channel slices of one buffer (a concatenation): within each other's bounds,
    # no element shared, so a remembered call's bounds test falls back to the exact one
    cat = cupy.zeros((2, 5, 3, 3), cupy.float32)
    cat[:, :2] = 1
    for i in range(2):
        if i:       # the second call is the remembered one: nothing planned again
            monkeypatch.setattr(cuda, "conv2d", lambda *a, **k: pytest.fail("planned again"))
        assert im2win.conv2d(cat[:, :2], w1, out=cat[:, 2:]) is not None
        cupy.testing.assert_array_equal(cat[:, 2:], cupy.full((2, 3, 3, 3), 2, cupy.float32))
        cupy.testing.assert_array_equal(cat[:, :2], cupy.ones((2, 2, 3, 3), cupy.float32))
    monkeypatch.undo()
    with pytest.raises(ValueError, match="out overlaps x"):
        im2win.conv2d(cat[:, 1:3], w1, out=cat[:, 2:])
    with pytest.raises(TypeError, match="all arrays must be on one device"):
        im2win.conv2d(x, cupy.asnumpy(w))


def test_remembered_calls_are_bounded(monkeypatch, rng):
    monkeypatch.setattr(cuda, "MAX_CALLS", 3)
    cuda._calls.clear()
    for pad in range(6):
        (x, w, b), kw = device_case(rng, CASES[2], np.float32, "NCHW")
        y = im2win.conv2d(x, w, b, **dict(kw, padding=pad))
        assert len(cuda._calls) <= 3
        expected = cuda.conv2d(make_problem(x, w, b, **dict(kw, padding=pad)), x, w, b)
        cupy.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("algorithm, cases", [
    ("im2win_nhwc", [((2, 64, 9, 11), (70, 64, 3, 3), dict(padding=1)),
                     ((1, 16, 7, 8), (24, 16, 3, 3), dict(stride=2))]),
    ("im2win_columns", [((2, 3, 19, 21), (70, 3, 7, 7), dict(padding=3, stride=2)),
                        ((1, 5, 9, 8), (24, 5, 3, 3), dict(padding=1))])])
def test_captured_copies_around_a_kernel_replay_the_eager_results_bit_for_bit(rng, algorithm,
                                                                              cases):
    """The copies' workspace (the graph's own memory: the NHWC twin's layout copies, a stem's
    window columns) and, on Hopper, the TMA descriptors of it that the capture baked into the
    kernel's parameters."""
    calls = [device_case(rng, case, np.float16, "NCHW") for case in cases]
    eager = [im2win.conv2d(*arrays, algorithm=algorithm, **kw) for arrays, kw in calls]
    outs = [cupy.full_like(y, np.nan) for y in eager]
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        for (arrays, kw), out in zip(calls, outs):
            im2win.conv2d(*arrays, algorithm=algorithm, out=out, **kw)
        graph = stream.end_capture()
    def between():
        (x2, w2, b2), kw2 = device_case(rng, cases[0], np.float16, "NCHW")
        im2win.conv2d(x2 * 2, w2, b2, algorithm=algorithm, **kw2)       # other buffers
    assert_replays_give(graph, outs, eager, np.float16, between)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32])
@pytest.mark.parametrize("batch, rows, cols, pad, offset", [
    (3, 64, 136, 0, 0),          # 2-byte types: 16-byte words on both sides
    (2, 40, 200, 8, 0),          # src rows padded (sr = cols + 8), tiles' tails
    (2, 40, 200, 8, 1),          # src one element off a 16-byte boundary: element by element
    (2, 36, 49, 0, 0),           # rows and columns not whole words (cv12's x: 49 pixels)
    (3, 32, 300, 0, 0),          # 32 rows (cv4's x: 32 channels): 32 x 128 tiles, a tail
    (2, 96, 200, 8, 1),          # 96 rows, src padded and off 16 bytes: 32 x 128 tiles
    (1, 8, 8, 0, 0),
    (5, 512, 9, 0, 0),           # a filter's taps under TRANSPOSE_TAPS_MIN_ELEMENTS:
    (3, 1000, 25, 0, 1),         # one element a thread
    (4, 3, 1, 0, 0),
    (60, 512, 9, 0, 0),          # past it, rows contiguous: transpose_taps, 2 passes of 455
    #                              rows an item in float32
    (11, 1000, 25, 0, 1),        # 5 x 5 taps off a 16-byte boundary, 7 passes in float32
    (600000, 1, 3, 0, 0),        # more passes than the grid's 8 * 65535 blocks: its loop
    (2, 40, 9, 3, 0)])           # taps of padded rows (sr = cols + 3): transpose_narrow
def test_layout_transposes_move_every_element(rng, dtype, batch, rows, cols, pad, offset):
    """Executable._transpose (the layout.cu kernel plan.transpose_launch picks: transpose_taps
    for fewer than 32 columns where rows are contiguous and TRANSPOSE_TAPS_MIN_ELEMENTS move,
    transpose_narrow for fewer otherwise, transpose_words where both sides' rows are whole
    16-byte words, else transpose_batched on 64 x 64 or 32 x 128 tiles): dst[b, c, r] =
    src[b, r, c], nothing else written. Compared bit for bit through unsigned views (bfloat16
    has no CuPy ufuncs)."""
    from im2win.cuda import launch
    x, w = cupy.zeros((2, 16, 8, 8), dtype), cupy.zeros((16, 16, 3, 3), dtype)
    prob = make_problem(x, w, padding=1)
    exe = launch.executable(prob, cuda._plan(prob, x, w, "im2win_nhwc", None, None))
    bits = {2: np.uint16, 4: np.uint32}[np.dtype(dtype).itemsize]
    sr, sb, size = cols + pad, rows * (cols + pad), batch * rows * cols
    flat = cupy.asarray(rng.integers(0, 1 << 15, batch * sb + 16).astype(bits)).view(dtype)
    src = flat[offset:offset + batch * sb].reshape(batch, rows, sr)[:, :, :cols]
    big = cupy.full(size + 16, 7, bits)
    dst = big[8:8 + size].view(dtype).reshape(batch, cols, rows)
    exe._transpose(src, dst, batch, rows, cols, sb, sr, 1)
    cupy.testing.assert_array_equal(dst.view(bits), src.view(bits).transpose(0, 2, 1))
    assert bool((big[:8] == 7).all()) and bool((big[8 + size:] == 7).all())


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("shape, index", [
    ((3, 9, 7, 32), np.s_[:, 1::2, ::3, :]),          # backward data's phase views: one launch
    ((2, 8, 8, 16), np.s_[::-1, ::2, 1::2, :]),       # negative strides
    ((2, 5, 6, 40), np.s_[:, :, :, 8:24]),            # a slice of the channels
    ((2, 5, 6, 12), np.s_[:, 1::2, :, :]),            # rows not whole 16-byte words: CuPy
    ((2, 5, 6, 16), np.s_[:, :, :, ::2])])            # last axis strided: CuPy
def test_copy_into_a_strided_out(rng, dtype, shape, index):
    """launch.copy_into (a strided `out` written from the contiguous result): the view's
    elements equal the result's, every element outside the view keeps its value."""
    from im2win.cuda import launch
    base = cupy.full(shape, cupy.nan, dtype)
    out = base[index]
    y = cupy.asarray(rng.uniform(-1, 1, out.shape).astype(dtype))
    assert launch.copy_into(out, y) is out
    want = cupy.full(shape, cupy.nan, dtype)
    want[index] = y
    cupy.testing.assert_array_equal(base, want)


def test_a_16_bit_1x1_call_first_seen_inside_a_capture_keeps_its_kernel(rng, monkeypatch):
    """Eagerly a float16 NHWC 1x1 call of "auto" holds cuBLAS's GEMM for captures
    (plan.graph_plan); first seen inside a capture with cuBLAS not yet primed in the process
    (launch._primed emptied here), it does not (cuBLAS would make its handle and workspace
    inside the capture), and the capture replays the kernel's eager bits."""
    from im2win.cuda import launch
    (x, w, b), kw = device_case(rng, ((2, 64, 12, 11), (256, 64, 1, 1), dict()), np.float16,
                                "NHWC")
    monkeypatch.setattr(cuda, "_calls", {})
    eager = im2win.conv2d(x, w, b, **kw)
    (call,) = cuda._calls.values()
    assert call.exe.plan.algorithm != "gemm" and call.graph.plan.algorithm == "gemm"
    monkeypatch.setattr(launch, "_primed", set())
    cuda._calls.clear()
    out = cupy.full_like(eager, np.nan)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        assert im2win.conv2d(x, w, b, out=out, **kw) is out
        graph = stream.end_capture()
    (call,) = cuda._calls.values()
    assert call.graph is None
    assert_replays_give(graph, [out], [eager], np.float16)


PRELUDE_CASES = [  # (x, w, kwargs, layout, algorithm, splits): the filter's copy then one launch
    ((2, 48, 8, 8), (40, 48, 3, 3), dict(padding=1), "NCHW", "im2win_nhwc", 1),   # float4 y
    ((2, 48, 7, 7), (40, 48, 3, 3), dict(padding=1), "NCHW", "im2win_nhwc", 2),   # staged y
    ((2, 64, 9, 9), (64, 64, 3, 3), dict(), "NCHW", "im2win_nhwc", 2),            # kExact
    ((2, 3, 35, 35), (96, 3, 11, 11), dict(stride=4), "NCHW", "auto", 1),         # fused runs
    ((2, 3, 33, 33), (64, 3, 11, 11), dict(stride=4, padding=2), "NHWC", "auto", 1)]


@pytest.mark.parametrize("x_shape, w_shape, kwargs, layout, algorithm, splits, fixup",
                         [case + (False,) for case in PRELUDE_CASES] +
                         [case + (True,) for case in PRELUDE_CASES if case[-1] > 1])
def test_filter_prelude_by_pointers_gives_the_scratch_paths_bits(rng, monkeypatch, x_shape,
                                                                 w_shape, kwargs, layout,
                                                                 algorithm, splits, fixup):
    """An NCHW twin reading x in place, or a stem on its fused runs, copies only the filter
    first, so a call that returns a new y goes by pointers (the copy into the workspace, the
    inner launch's partial sums after it): the same bits as the Scratch path (out=), with w
    off a 16-byte boundary too, and through PyTorch's allocator, also inside a PyTorch CUDA
    graph (the workspace then the graph's own memory)."""
    from im2win.cuda import launch, plan as planning
    monkeypatch.setattr(planning, "ffma_split_count", lambda *args, **kw: splits)
    monkeypatch.setattr(planning, "ffma_fixup_pays", lambda *args: fixup)
    cuda._calls.clear()
    launch._executables.clear()
    try:
        (x, w, b), kw = device_case(rng, (x_shape, w_shape, kwargs), np.float32, layout)
        prob = make_problem(x, w, b, **kw)
        plan = cuda._plan(prob, x, w, algorithm, None, None)
        exe = launch.executable(prob, plan)
        assert exe.by_pointers and exe.prelude is not None and plan.inner.splits == splits
        assert exe.launch_workspace == exe.filter_bytes + exe.inner.launch_workspace
        assert plan.inner.fixup == fixup
        w_off = cupy.empty(w.size + 1, w.dtype)[1:].reshape(w.shape)     # 4 bytes off 16
        w_off[...] = w
        out = cupy.full(prob.y_shape, np.nan, np.float32)
        scratch = im2win.conv2d(x, w, b, algorithm=algorithm, out=out, **kw)
        assert scratch is out
        for filters in (w, w_off, w):
            y = im2win.conv2d(x, filters, b, algorithm=algorithm, **kw)
            cupy.testing.assert_array_equal(y, scratch)
        # those calls went by pointers: remembered as fast Calls (w's and w_off's), no graph
        remembered = [c for c in cuda._calls.values()
                      if isinstance(c, launch.Call) and c.extents is None]     # (no out=)
        assert any(c.exe is exe for c in remembered)
        assert all(c.fast and c.graph is None and c.exe.prelude is not None for c in remembered)
        torch = pytest.importorskip("torch")
        xt, wt, bt = (torch.from_dlpack(a) for a in (x, w, b))
        yt = im2win.conv2d(xt, wt, bt, algorithm=algorithm, **kw)
        cupy.testing.assert_array_equal(cupy.from_dlpack(yt), scratch)
        torch_calls = [c for c in cuda._calls.values() if isinstance(c, launch.TorchCall)]
        assert torch_calls and all(c.direct and c.call.fast and c.call.exe is exe
                                   for c in torch_calls)     # by pointers through PyTorch too
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            yt = im2win.conv2d(xt, wt, bt, algorithm=algorithm, **kw)
        for _ in range(2):
            yt.fill_(float("nan"))
            bystanders = [torch.full((1 << 16,), 7.0, device=xt.device) for _ in range(8)]
            graph.replay()
            torch.cuda.synchronize()
            cupy.testing.assert_array_equal(cupy.from_dlpack(yt), scratch)
            assert all(bool((a == 7).all()) for a in bystanders)
    finally:
        cuda._calls.clear()
        launch._executables.clear()
