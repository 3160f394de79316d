"""The GPU side of im2win (CuPy): planning, kernels and autotuning.

Importing this package never imports CuPy or touches a GPU; `conv2d` and `autotune` do, on first
use. `Options` switches each optimisation of the im2win kernels (for the ablation study).
"""

from __future__ import annotations

import functools
import sys
import threading

from im2win.cuda.tuning import ALGORITHMS, TILES, Options

__all__ = ["ALGORITHMS", "MAX_CALLS", "TILES", "Options", "autotune", "conv2d", "is_available"]

# How many distinct calls (argument shapes, strides, dtypes, hyper-parameters, devices) are
# remembered, validated and planned, so that repeating one costs only its launch; the oldest is
# forgotten first. A ResNet-50 has about 50 distinct convolutions, a model zoo a few hundred
# (a PyTorch call takes two entries: its CuPy views' Call and its TorchCall).
# Autotuned winners are bounded the same way.
MAX_CALLS = 4096

_calls: dict = {}         # call key -> launch.Call
_backward_problems: dict = {}   # backward call key -> (Problem, result shape, direct callable)
# (Problem, x strides, x 16-byte aligned, precision) -> (algorithm, tile): `autotune`
_tuned: dict = {}
_lock = threading.Lock()


def _remember(memo: dict, key, value) -> None:
    with _lock:
        if key not in memo and len(memo) >= MAX_CALLS:
            del memo[next(iter(memo))]
        memo[key] = value


@functools.cache
def is_available() -> bool:
    """Return whether CuPy imports and sees at least one CUDA device."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, no driver, or no device: all mean "no GPU here"
        return False


class _NoKey(Exception):
    """An argument has no exact hashable form: the call is validated in full."""


def _exact(value):
    """value as a key that no invalid value can equal (True == 1 and 1.0 == 1, but their
    types differ); lists as tuples, which every check treats alike."""
    kind = type(value)
    if kind is int or kind is str or value is None:
        return value
    if kind is tuple or kind is list:
        return tuple(map(_exact, value))
    raise _NoKey


def _array_key(a, aligned: bool = False):
    if a is None:
        return None
    if type(a) is not sys.modules["cupy"].ndarray:
        raise _NoKey
    data = a.data
    return a.shape, a.strides, a.dtype, data.device_id, aligned and data.ptr % 16 == 0


def call_key(x, w, bias, out, stride, padding, dilation, groups, layout, algorithm, options,
             workspace_limit, precision=None):
    """The memo key of an `im2win.conv2d` call on CuPy arrays: everything its validation and
    plan depend on (shapes, strides, dtypes, devices, the inputs' 16-byte alignment, the
    arguments with their types); None when an argument has no exact form."""
    if options is not None and type(options) is not Options:
        return None
    args = (stride, padding, dilation, groups, layout, algorithm, workspace_limit, precision)
    try:
        args = _exact_args(args)
        ndarray = sys.modules["cupy"].ndarray
        if type(x) is not ndarray or type(w) is not ndarray:
            return None
        xd, wd = x.data, w.data         # flat: this key is made on every call (host time)
        key = (x.shape, x.strides, x.dtype, xd.device_id, xd.ptr % 16 == 0, w.shape,
               w.strides, w.dtype, wd.device_id, wd.ptr % 16 == 0, options, args)
        if bias is None and out is None:
            return key
        return key + (_array_key(bias), _array_key(out))
    except _NoKey:
        return None


def torch_call_key(x, w, bias, stride, padding, dilation, groups, layout, algorithm, options,
                   workspace_limit, precision=None):
    """The memo key of an `im2win.conv2d` call on PyTorch CUDA tensors with no `out`, made of
    what `call_key` takes from the CuPy views of them, read off the tensors themselves (their
    torch dtype and device); None for anything else (other arrays, tensors off CUDA,
    subclasses, tensors that require grad, are not strided or have their negative bit set, an
    argument with no exact form): those take the checks of a first call every time."""
    torch = sys.modules.get("torch")
    if torch is None or (options is not None and type(options) is not Options):
        return None
    tensor, strided = torch.Tensor, torch.strided
    for a in (x, w) if bias is None else (x, w, bias):
        # plain dense CUDA tensors read as they lie (a negative bit would flip the sign)
        if type(a) is not tensor or not a.is_cuda or a.requires_grad or \
                a.layout is not strided or a.is_neg():
            return None
    args = (stride, padding, dilation, groups, layout, algorithm, workspace_limit, precision)
    try:
        args = _exact_args(args)
    except _NoKey:
        return None
    # devices by index (get_device: -1 on the CPU)
    key = ("torch", x.shape, x.stride(), x.dtype, x.get_device(), x.data_ptr() % 16 == 0,
           w.shape, w.stride(), w.dtype, w.get_device(), w.data_ptr() % 16 == 0, options, args)
    if bias is None:
        return key
    return key + (bias.shape, bias.stride(), bias.dtype, bias.get_device())


def _exact_args(args: tuple) -> tuple:
    """The call's non-array arguments as a key: their own where each is an int, a str, None
    or a tuple of ints (what `_exact` would make of them: a module's stride, padding and
    dilation pairs), else through `_exact` (a loop, not `_exact`'s recursion: this runs on
    every call)."""
    for value in args:
        kind = type(value)
        if kind is tuple:
            for item in value:
                if type(item) is not int:
                    return tuple(map(_exact, args))
        elif kind is not int and kind is not str and value is not None:
            return tuple(map(_exact, args))
    return args


def backward_key(make, a, b, shape, kwargs):
    """The memo key of a gradient call on CuPy arrays (`make`: its problem's maker): all its
    checks and its path depend on (shapes, strides, dtypes, devices, the arrays' 16-byte
    alignment, the arguments with their types); None when an argument has no exact form."""
    try:
        return (make, _array_key(a, True), _array_key(b, True), _exact(shape),
                tuple((name, _exact(value)) for name, value in kwargs.items()))
    except _NoKey:
        return None


def cached_backward(key):
    """(Problem, result shape, direct callable or None) of a gradient call checked before
    under `key` (`im2win.api._backward`), or None."""
    return None if key is None else _backward_problems.get(key)


def remember_backward(key, checked) -> None:
    if key is not None:
        _remember(_backward_problems, key, checked)


def cached_call(key):
    """The remembered Call of `key` (from `call_key`; a TorchCall from `torch_call_key`), or
    None."""
    return None if key is None else _calls.get(key)


def remember_torch_call(key, call) -> None:
    """Remember, under `torch_call_key`'s key, the Call made for CuPy views of those tensors."""
    from im2win.cuda import launch
    if key is not None and call is not None:
        _remember(_calls, key, launch.TorchCall(call))


def _plan(prob, x, w, algorithm, options, workspace_limit, tile=None, precision="float32"):
    """The plan for these arrays (pure: nothing is copied or launched before it succeeds)."""
    from im2win.cuda import launch, plan as planning

    x_strides = launch.element_strides(x, prob.layout)
    x_aligned, w_aligned = _aligned(x, w)
    tuned = _tuned.get(_tuned_key(prob, x, w, precision))
    if algorithm == "auto" and tile is None and tuned and workspace_limit is None:
        algorithm, tile = tuned
    return planning.make_plan(prob, x_strides=x_strides, w_aligned=w_aligned,
                              algorithm=algorithm, options=options,
                              workspace_limit=workspace_limit, tile=tile, x_aligned=x_aligned,
                              arch=compute_capability(x.data.device_id), precision=precision,
                              sms=launch.sm_count(x.data.device_id))


def _graph_plan(prob, x, w, plan, algorithm, tile, workspace_limit):
    """The plan an "auto" call runs inside a CUDA graph capture in place of `plan`
    (`plan.graph_plan`: where replayed GPU time favours another), or None; never for a forced
    algorithm or tile, a workspace limit or an autotuned winner."""
    from im2win.cuda import launch, plan as planning

    if algorithm != "auto" or tile is not None or workspace_limit is not None:
        return None
    if _tuned_key(prob, x, w, "float32") in _tuned:      # 16-bit types: "float32" always
        return None
    return planning.graph_plan(prob, plan, launch.element_strides(x, prob.layout),
                               plan.options)


def _tuned_key(prob, x, w, precision):
    """The key of autotune's winner for these arrays: keyed by x's alignment too, since a
    winner that copies x by 16 bytes cannot run a shifted x."""
    from im2win.cuda import launch
    return prob, launch.element_strides(x, prob.layout), _aligned(x, w)[0], precision


def _aligned(x, w) -> tuple[bool, bool]:
    """Whether x, and w as the launch reads it, start on a 16-byte boundary (a non-contiguous
    filter is copied into a fresh, aligned buffer before the launch)."""
    return x.data.ptr % 16 == 0, not w.flags.c_contiguous or w.data.ptr % 16 == 0


@functools.cache
def compute_capability(device: int) -> int:
    """The device's compute capability as major*10 + minor (90 on an H100 or H200)."""
    import cupy
    return int(cupy.cuda.Device(device).compute_capability)


def planned(prob, x, w):
    """The Executable of the planner's choice for the checked `prob` on these arrays, on x's
    device (backward data's direct path keeps it; `launch.run` runs it)."""
    import cupy
    from im2win.cuda import launch

    with cupy.cuda.Device(x.data.device_id):
        return launch.executable(prob, _plan(prob, x, w, "auto", None, None))


def conv2d(prob, x, w, bias=None, out=None, *, algorithm="auto", options=None,
           workspace_limit=None, tile=None, key=None, precision="float32"):
    """Run the checked problem `prob` on CuPy arrays; the GPU half of `im2win.conv2d`.

    Args:
        prob: the `Problem` of x, w, bias (already validated).
        x, w, bias: CuPy arrays of prob's shapes and dtype, any strides, on one device.
        out: None or a CuPy array of prob.y_shape (checked by the caller).
        algorithm, options, workspace_limit, precision: as `im2win.conv2d` (precision
            checked: "float32", "tf32" or "3xtf32").
        tile: force a tile by name (autotuning and tests).
        key: the call's `call_key`: remember the planned call under it (None: don't).

    Returns:
        y, a new contiguous array or `out`.
    """
    import cupy
    from im2win.cuda import launch

    with cupy.cuda.Device(x.data.device_id):
        plan = _plan(prob, x, w, algorithm, options, workspace_limit, tile, precision)
        graph = _graph_plan(prob, x, w, plan, algorithm, tile, workspace_limit)
        if graph is not None and not launch.prime_cublas(prob.dtype):
            graph = None        # first seen inside a capture, cuBLAS never run: the kernels
        call = launch.Call(prob, launch.executable(prob, plan), x, w, bias, out,
                           None if graph is None else launch.executable(prob, graph))
    if key is not None and tile is None:
        _remember(_calls, key, call)
    return call(x, w, bias, out)


def autotune(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1, layout="NCHW",
             algorithms=None, tiles=None, repeat=10, precision=None):
    """Time the candidate algorithms and tiles on these arrays; remember the fastest.

    Later `im2win.conv2d` calls with algorithm="auto" and no workspace_limit on the same
    problem (shapes, dtype, hyper-parameters, layout and input strides) and precision use the
    winner. Nothing is tuned implicitly.

    Args:
        x, w, bias, stride, padding, dilation, groups, layout: as `im2win.conv2d` (CuPy).
        algorithms: candidates among "auto" (the planner's own choice with its own tile:
            ("auto", None) in the results; the NHWC twin, window columns and split-K are
            reached this way), "im2win_fused", "im2win", "direct", "im2col_gemm",
            "depthwise" (groups = C, and groups of 2, 4 or 8 channels with K = C; NCHW
            groups on the NHWC twin),
            "narrow" (float16 and bfloat16 NHWC stems and groups of 8, 16 or 32 channels;
            float32 stems of at most 4 channels in either layout),
            "pointwise" (float16 and bfloat16 NHWC 1x1 at
            stride 1, K at most 96), "gemm" (1x1, no padding, one group), "im2win_nhwc",
            "im2win_columns" and "im2win_runs" (as `im2win.conv2d`; "im2win_runs" on the
            planner's tile). Each is planned before any is timed: one
            that cannot run the problem raises first. Default: "auto",
            "im2win_fused" and "im2win", so that the winner is never slower than the
            planner's choice.
        tiles: tile names to try for the im2win algorithms (default: for float16 and
            bfloat16 every Tensor-Core tile, of both kernels on Hopper; otherwise every
            CUDA-core tile with a register micro-kernel whose shared memory fits the dtype,
            and for "im2win_fused" im2win_ffma.cu's tiles that can run the problem).
        repeat: timed calls per candidate (after one warm-up call), median taken.
        precision: float32 only, as `im2win.conv2d`. "tf32" and "3xtf32" time their own
            path (the Hopper kernel; NCHW on the NHWC twin, stems over window columns:
            algorithm "auto") with each Tensor-Core tile that precision takes (`tiles`: some
            of them); `algorithms` is then not used.

    Returns:
        A list of (algorithm, tile, milliseconds), fastest first.

    Example:
        >>> im2win.cuda.autotune(x, w, stride=2)[0]
        ('im2win_fused', '64x128', 1.93)
    """
    import cupy
    from im2win.arrays import checked_problem
    from im2win.cuda import launch
    from im2win.cuda.plan import accumulator_bytes, check_precision, ffma_refusal
    from im2win.cuda.tuning import (FFMA_TILES, MMA_TILES, NO_MICRO_KERNEL, THREE_TF32_TILES,
                                    WGMMA_TILES)
    from im2win.problem import check_int

    prob, x, w, bias = checked_problem(x, w, bias, stride=stride, padding=padding,
                                       dilation=dilation, groups=groups, layout=layout,
                                       gpu_only=True)
    if algorithms is None:
        algorithms = ("auto", "im2win_fused", "im2win")
    unknown = [a for a in algorithms if a not in ALGORITHMS]
    if unknown or not algorithms:
        raise ValueError(f"algorithms must name some of {', '.join(ALGORITHMS)}, got "
                         f"{algorithms!r}")
    repeat = check_int("repeat", repeat)
    if repeat < 1:
        raise ValueError(f"repeat must be a positive int, got {repeat!r}")
    precision = check_precision(precision, prob.dtype)
    if precision != "float32":       # the precision's own path, each tile it takes
        allowed = list(THREE_TF32_TILES if precision == "3xtf32" else WGMMA_TILES)
        if tiles is not None and (not tiles or set(tiles) - set(allowed)):
            raise ValueError(f"tiles for precision={precision!r} must be some of "
                             f"{', '.join(allowed)}, got {tiles!r}")
        algorithms, tiles = ("auto",), list(tiles or allowed)
    if tiles is None and prob.dtype.name in ("float16", "bfloat16"):
        hopper = compute_capability(x.data.device_id) == 90      # both kernels there
        tiles = list(WGMMA_TILES) + list(MMA_TILES) if hopper else list(MMA_TILES)
    if not tiles:
        strides = launch.element_strides(x, prob.layout)
        tiles = [name for name, tile in TILES.items()
                 if name != NO_MICRO_KERNEL and tile.fits(accumulator_bytes(prob))] + \
            [name for name in FFMA_TILES
             if ffma_refusal(prob, Options(), strides, *_aligned(x, w), True, name) is None]
    candidates = []
    with cupy.cuda.Device(x.data.device_id):
        for algorithm in algorithms:
            if algorithm == "auto" and precision == "float32":
                named = [None]                                   # the planner's tile
            elif (algorithm.startswith("im2win") and algorithm != "im2win_runs") or \
                    algorithm == "auto":
                named = [t for t in tiles if algorithm == "im2win_fused" or t not in FFMA_TILES]
            else:
                named = [None]
            for tile in named:      # each planned (pure) before any is timed or forgotten
                _plan(prob, x, w, algorithm, None, None, tile, precision)
                candidates.append((algorithm, tile))
    key = _tuned_key(prob, x, w, precision)
    with _lock:                  # "auto" below is the planner's own choice, not a past winner
        _tuned.pop(key, None)
    _calls.clear()
    results = []
    for algorithm, tile in candidates:
        def call():
            return conv2d(prob, x, w, bias, algorithm=algorithm, tile=tile, precision=precision)
        call()
        times = []
        for _ in range(repeat):
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            call()
            stop.record()
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop))
        results.append((algorithm, tile, sorted(times)[len(times) // 2]))
    results.sort(key=lambda r: r[2])
    if prob.N == 0:
        return results
    _remember(_tuned, key, results[0][:2])
    _calls.clear()          # remembered calls of this problem were planned without the winner
    return results
