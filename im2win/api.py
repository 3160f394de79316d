"""`im2win.conv2d` (NumPy on the CPU and CuPy on the GPU) and its two gradients."""

from __future__ import annotations

import numpy as np

from im2win import baselines, cpu, cuda, gradients, interop, reference
from im2win.arrays import (SHARES_MEMORY_WORK, array_like, as_native, checked_problem, native,
                           on_gpu, same_device, shares_memory)
from im2win.cuda.plan import (check_algorithm, check_options, check_precision,
                              check_workspace_limit)
from im2win.problem import (check_shape, make_backward_data_problem,
                            make_backward_filter_problem)

CPU_ALGORITHMS = ("auto", "im2win", "im2col_gemm")


def _check_out(out, prob, xp, inputs):
    """Check `out` against the problem and the inputs (x, w, bias); raise if unusable."""
    if not isinstance(out, xp.ndarray):
        raise TypeError(f"out must be a {xp.__name__}.ndarray like the inputs, got "
                        f"{type(out).__name__}")
    if tuple(out.shape) != prob.y_shape:
        raise ValueError(f"out has shape {tuple(out.shape)}, expected {prob.y_shape}")
    if out.dtype != prob.dtype:
        raise TypeError(f"out has dtype {out.dtype}, expected {prob.dtype} (the input's dtype)")
    if xp is np and not out.flags.writeable:
        raise ValueError("out is read-only; expected a writeable array")
    for name, a in zip(("x", "w", "bias"), inputs):
        if a is not None and shares_memory(out, a):
            raise ValueError(f"out overlaps {name} (or their strides are too tangled to tell in "
                             f"{SHARES_MEMORY_WORK} steps); out must not share memory with an "
                             f"input")


def conv2d(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1, layout="NCHW",
           out=None, algorithm="auto", options=None, workspace_limit=None, precision=None):
    """Convolve (cross-correlate, as deep-learning frameworks do) a batch of images with filters.

    ``y[n,k,p,q] = bias[k] + sum_{c<C/G, r<R, s<S} xp[n, g*C/G + c, p*sh + r*dh, q*sw + s*dw] *
    w[k,c,r,s]`` with xp the zero-padded input and g = k // (K/G), as `im2win.reference.conv2d`
    computes it.
    NumPy arrays (or array-likes) run on the CPU, CuPy arrays on their GPU. CUDA arrays of
    another library (PyTorch, JAX, Numba, or anything with `__dlpack__` or
    `__cuda_array_interface__`) run there too, zero-copy, on the caller's current stream
    (PyTorch's `torch.cuda.current_stream()`), and y comes back in their type (`out` itself
    when given); all arrays of a call must be of one kind.

    Args:
        x: input, (N, C, H, W) for layout "NCHW" or (N, H, W, C) for "NHWC".
        w: filter, (K, C/G, R, S) for "NCHW" or (K, R, S, C/G) for "NHWC".
        bias: None or (K,).
        stride: int or pair (sh, sw).
        padding: int, pair (ph, pw), ((top, bottom), (left, right)), "valid", or "same"
            (stride 1 only; the odd extra goes to the bottom/right).
        dilation: int or pair (dh, dw).
        groups: G; C and K must be multiples of it.
        layout: "NCHW" or "NHWC", for x, w and y alike.
        out: optional array of y's shape, dtype and device to write the result into; it may
            be a view of the inputs' buffer (a channel slice of a concatenation) but must share
            no element with x, w or bias.
        algorithm: "auto" (the planner's choice, or `im2win.cuda.autotune`'s winner),
            "im2win_fused" (window tiles built in shared memory from x, no extra memory),
            "im2win" (the window tensor materialised, then convolved), "direct",
            "im2col_gemm", "depthwise" (groups = C, one input channel per filter, and in NHWC
            groups of 2, 4 or 8 channels with K = C), "narrow" (float16 and bfloat16 NHWC
            on Tensor Cores: stems of at most 8 channels, and groups of 8, 16 or 32 channels
            with K = C; float32 stems of one group of at most 4 channels, NCHW or NHWC, on
            CUDA cores), "pointwise" (float16 and bfloat16 NHWC 1x1 convolutions at stride 1,
            no padding, one group, C and K multiples of 8, K at most 96, x's pixels evenly
            strided by a multiple of 8 elements and x 16-byte aligned: the filter resident in
            shared memory, which must hold it: 99 KB a block on sm_86 and sm_89, 163 KB on
            sm_80, 227 KB on sm_90; x streamed through once) or "gemm" (a 1x1 convolution, no
            padding, one group, as one cuBLAS GEMM: at stride 1 on x and w in place, at a
            larger stride on the pixels it reads gathered into workspace first); "auto" takes
            "depthwise" where it applies (groups of 2 or 4 channels, not 8), "pointwise" where
            it runs with C at most 240, and "gemm" for float32 and float64 problems of at
            least 16 channels, and float16 and bfloat16 ones of at most 32 channels over at
            least 65536 pixels (plan.gemm_pays), where the gathered pixels fit
            `workspace_limit`; inside a CUDA graph capture also float16 and bfloat16 NHWC
            ones at stride 1 that it gives "pointwise" or the Tensor-Core kernels eagerly
            (plan.graph_plan: only GPU time is replayed there).
            "im2win_nhwc": a float16, bfloat16 or float32 NCHW problem run on its NHWC twin
            (x, w and y copied through channels-last workspace; the kernel writes the NCHW y
            itself where it can, and float32's im2win_ffma.cu reads x in place wherever its
            strided form runs: no copy of x); "auto" takes it on Hopper
            where the twin runs the wgmma kernel, and for float32 where it runs im2win_ffma.cu
            and the copies are small against the work (plan.TWIN_BYTES_PER_FLOP).
            "im2win_columns": a float16, bfloat16 or float32 stem (one group, S*C at most 64)
            run as an R x 1 problem over x's window columns (x2[n, h, q, s*C + c] = x[n, h,
            q*sw + s*dw - pl, c] in workspace, the S*C values of a filter row one run of
            channels); "auto" takes it for C not a multiple of 8 where that problem runs the
            wgmma kernel (16-bit types, on Hopper) or im2win_ffma.cu (float32: NHWC, and NCHW
            of at most 160 products an output, the kernel writing the NCHW y).
            "im2win_runs": a float32 stem (one group, dw = 1, sw*R*C a multiple of 4) as the
            im2win papers run it: the window tensor materialised in workspace (rows padded to
            16 bytes), then one GEMM over each output pixel's whole run of S*R*C values (the
            reduction padded once to 16, not each filter row's S*C to 8 as the window columns
            pad it); "auto" takes it for such stems of at least 160 products that it pads
            less than the columns (cv1, cv2). On the CPU: "auto" or "im2win" (the window
            path) or "im2col_gemm".
        options: GPU only: an `im2win.cuda.Options` switching the kernels' optimisations.
        workspace_limit: GPU only: bytes the materialised window tensor may use (the batch is
            processed in chunks of whole images to respect it), and the most the channels-last
            copies of "im2win_nhwc" (float32 on im2win_ffma.cu reads x in place where its
            strided form runs), the window columns of "im2win_columns", the window of
            "im2win_runs" and the gathered pixels of a strided "gemm" may take ("auto" runs
            the general kernels past it); None: no limit.
        precision: float32 inputs only: None or "float32" (IEEE FP32 fused multiply-adds, the
            default), "3xtf32" (Tensor Cores, each operand split into two TF32 parts and
            three products accumulated in FP32: FP32-accurate) or "tf32" (one TF32 product:
            lower precision, what PyTorch's convolutions give by default). The Tensor-Core
            forms run on the Hopper kernel with TMA copies (compute capability 9.0, NHWC or
            NCHW through channels-last copies, C/groups a multiple of 32 or stems of one
            group over their window columns padded to 32, x and w 16-byte aligned) and
            raise ValueError elsewhere; never silently at lower precision. Other dtypes take
            None or "float32" only.

    Returns:
        y: (N, K, P, Q) for "NCHW" or (N, P, Q, K) for "NHWC", with x's dtype (float16,
        bfloat16, float32 or float64; float16 and bfloat16 accumulate in float32).

    Raises:
        TypeError: x, w or bias not an array of numbers, non-integer hyper-parameters,
            unsupported or mismatched dtypes, a dtype the forced `algorithm` does not take on
            the GPU (the message names those it takes), arrays on different devices, a bad
            `out` type or dtype.
        ValueError: bad values or shapes (the message names the argument, what it got and
            what was expected), an unknown algorithm, an option the chosen device does not
            take, or a forced algorithm that cannot run the problem (it says why).

    Example:
        >>> import numpy as np, im2win
        >>> x = np.ones((2, 3, 8, 8), np.float32); w = np.ones((4, 3, 3, 3), np.float32)
        >>> im2win.conv2d(x, w, padding=1).shape
        (2, 4, 8, 8)
        >>> im2win.conv2d(x.transpose(0, 2, 3, 1), w.transpose(0, 2, 3, 1), layout="NHWC").shape
        (2, 6, 6, 4)
    """
    key = None
    if not on_gpu(x):
        torch_key = None if out is not None else cuda.torch_call_key(
            x, w, bias, stride, padding, dilation, groups, layout, algorithm, options,
            workspace_limit, precision)
        call = cuda.cached_call(torch_key)
        if call is not None:        # PyTorch tensors of a call seen before: run on them
            return call(x, w, bias)
        family = interop.gpu_family({"x": x, "w": w, "bias": bias, "out": out})
        if family is not None:      # PyTorch, JAX, Numba ... CUDA arrays: CuPy views of them
            return interop.call(conv2d, family, x, w, bias, out, torch_key=torch_key,
                                stride=stride, padding=padding, dilation=dilation,
                                groups=groups, layout=layout, algorithm=algorithm,
                                options=options, workspace_limit=workspace_limit,
                                precision=precision)
    else:
        # A call seen before (same shapes, strides, dtypes, devices and arguments) was
        # validated and planned then: only the overlap of `out` depends on this call's pointers.
        key = cuda.call_key(x, w, bias, out, stride, padding, dilation, groups, layout,
                            algorithm, options, workspace_limit, precision)
        call = cuda.cached_call(key)
        if call is not None and (out is None or not call.overlaps(out, x, w, bias) or not any(
                shares_memory(out, a) for a in (x, w, bias) if a is not None)):
            return call(x, w, bias, out)
    prob, x, w, bias = checked_problem(x, w, bias, stride=stride, padding=padding,
                                       dilation=dilation, groups=groups, layout=layout,
                                       out=out)
    algorithm = check_algorithm(algorithm)
    options = None if options is None else check_options(options)
    workspace_limit = check_workspace_limit(workspace_limit)
    precision = check_precision(precision, prob.dtype)
    if on_gpu(x):
        import cupy
        if out is not None:
            _check_out(out, prob, cupy, (x, w, bias))
        return cuda.conv2d(prob, x, w, bias, out, algorithm=algorithm, options=options,
                           workspace_limit=workspace_limit, key=key, precision=precision)
    if algorithm not in CPU_ALGORITHMS:
        raise ValueError(f"algorithm {algorithm!r} runs on the GPU only; with NumPy arrays use "
                         f"one of {', '.join(map(repr, CPU_ALGORITHMS))}")
    if precision != "float32":
        raise ValueError(f"precision={precision!r} runs on the GPU's Tensor Cores only; with "
                         f"NumPy arrays float32 is computed in FP32 (precision None or "
                         f"'float32')")
    if options is not None or workspace_limit is not None:
        raise ValueError("options and workspace_limit apply to the GPU kernels only; pass "
                         "CuPy arrays to use them")
    if out is not None:
        _check_out(out, prob, np, (x, w, bias))
    if algorithm == "im2col_gemm":
        y = baselines.im2col_gemm(x, w, bias, stride=stride, padding=padding,
                                  dilation=dilation, groups=groups, layout=layout)
        if out is None:
            return y
        out[...] = y
        return out
    y = np.empty(prob.y_shape, prob.dtype) if out is None else out
    if prob.N == 0:
        return y
    return cpu.conv2d(prob, x, w, bias, y)


def _backward(make, compute, through_forward, a, b, shape, kwargs, direct=None,
              names=("a", "b")):
    """Check a backward call (`make`: its problem's checks) and run it: `compute` (the
    reference's float64 sums) on NumPy arrays, `through_forward` (im2win.gradients: forward
    convolutions on views; the Hopper backward-filter kernel) on CuPy arrays, and on CUDA
    arrays of another library through CuPy views of them, on the caller's stream, the result
    in their type. A CuPy call seen before (same shapes, strides, dtypes, devices, 16-byte
    alignment and arguments) was checked then: its problem is remembered
    (`cuda.backward_key`), with what `direct(prob, a, b)` gave then, a callable that writes
    the result from a and b with nothing else to do (None: `through_forward` each time).
    `names`: what the messages call a and b."""
    key = cuda.backward_key(make, a, b, shape, kwargs) if on_gpu(a) and on_gpu(b) else None
    checked = cuda.cached_backward(key)
    if checked is None:
        if not (on_gpu(a) or on_gpu(b)):
            family = interop.gpu_family(dict(zip(names, (a, b))))
            if family is not None:
                door = interop.Door(family)
                ca, cb = door.enter(a), door.enter(b)
                with ca.device, door.stream(a):
                    result = _backward(make, compute, through_forward, ca, cb, shape, kwargs,
                                       direct, names)
                return door.leave(result)
        gpu = same_device(a, b, None, None, names=(*names, "", ""))
        if not gpu:             # every check before any work (a byte-swapped array's copy)
            a, b = array_like(names[0], a), array_like(names[1], b)
            make(as_native(a), as_native(b), shape, **kwargs)
            return compute(native(a), native(b), shape, **kwargs)
        prob = make(a, b, shape, **kwargs)                      # every check, before any work
        shape = check_shape("shape", shape)
        ready = None
        if direct is not None and prob.N and 0 not in shape:
            with a.device:
                ready = direct(prob, a, b)
        checked = prob, shape, ready
        cuda.remember_backward(key, checked)
    prob, shape, ready = checked
    import cupy
    if ready is not None and cupy.cuda.runtime.getDevice() == a.data.device_id:
        result = cupy.empty(shape, prob.dtype)
        ready(a, b, result)
        return result
    with a.device:                      # the result and the re-ordered filter on a's GPU
        result = cupy.empty(shape, prob.dtype)
        if result.size == 0:
            return result
        return through_forward(conv2d, prob, a, b, result)


def conv2d_backward_data(dy, w, x_shape, *, stride=1, padding=0, dilation=1, groups=1,
                         layout="NCHW"):
    """Compute the gradient of `conv2d` with respect to x (a transposed convolution).

    ``dx[n, g*C/G + c, h, v] = sum of dy[n, g*K/G + k, p, q] * w[g*K/G + k, c, r, s] over the
    (k, p, q, r, s) with p*sh + r*dh - pt == h and q*sw + s*dw - pl == v``; it is the adjoint of
    conv2d in x: ``<conv2d(x, w), dy> == <x, conv2d_backward_data(dy, w, x.shape)>``.

    Args:
        dy: the output's gradient, (N, K, P, Q) for "NCHW" or (N, P, Q, K) for "NHWC".
        w: (K, C/G, R, S) for "NCHW" or (K, R, S, C/G) for "NHWC", dy's dtype.
        x_shape: x's shape, (N, C, H, W) or (N, H, W, C).
        stride, padding, dilation, groups, layout: those of the forward `conv2d`.

    Returns:
        dx of `x_shape`, dy's dtype, on dy's device and in its array type. NumPy arrays: by
        the reference's window formulation (`im2win.reference.conv2d_backward_data`), float64
        sums rounded once. GPU arrays: as sh*sw forward convolutions of views of dy, one per
        phase of dx's rows and columns (`im2win.gradients.backward_data`), each element one
        sum of the forward kernels (float32 accumulation for float16 and bfloat16), rounded
        once. Memory beyond dx: the re-ordered filter, and what those forward calls take (a
        phase's output when stride > 1, a strided view of dx, goes through a buffer of its
        size; float16 and bfloat16 NCHW on Hopper run the NHWC twin's copies). One group of
        fewer than 8 channels in NHWC (at a stride, or float32 and float64) goes through
        window gradients instead (`im2win.cuda.dgrad`: dy times w by cuBLAS in float32, or
        float64, then each entry added back onto its pixel, rounded once), workspace of at
        most 256 MB (`dgrad.WORKSPACE`; one image's when that is more); float32 NHWC at
        stride 1 too, where the phase's full padding would do 1.3 times the work or more
        (`dgrad.pays`).

    Raises:
        TypeError, ValueError: as `conv2d`; dy not of the forward output's shape or dtype, a
            bad x_shape.

    Example:
        >>> import numpy as np, im2win
        >>> im2win.conv2d_backward_data(np.ones((1, 1, 2, 2)), np.ones((1, 1, 2, 2)),
        ...                             (1, 1, 3, 3))[0, 0]
        array([[1., 2., 1.],
               [2., 4., 2.],
               [1., 2., 1.]])
    """
    return _backward(make_backward_data_problem, reference.conv2d_backward_data,
                     gradients.backward_data, dy, w, x_shape,
                     dict(stride=stride, padding=padding, dilation=dilation, groups=groups,
                          layout=layout), _data_direct, ("dy", "w"))


def _data_direct(prob, dy, w):
    """Backward data in two launches where it is one phase that reads all of dy (stride 1, the
    padding no wider than the filter reaches): the phase's filter gathered from w by one
    kernel (`gradients.phase_filter_gather`), then the phase's forward Executable, planned
    here once, into dx. Where `dgrad.pays` (one group of few channels in NHWC; float32 NHWC
    whose full padding would waste work) through window gradients instead
    (`im2win.cuda.dgrad`: a GEMM and window_to_image a chunk of images). None elsewhere
    (`gradients.backward_data` each call)."""
    import cupy
    from im2win.cuda import dgrad, launch
    from im2win.cuda.plan import CUDA_TYPES
    if dgrad.pays(prob):
        if not (dy.flags.c_contiguous and w.flags.c_contiguous):
            return None
        return dgrad.Runner(prob)
    phases = gradients._phases(prob)
    if prob.sh != 1 or prob.sw != 1 or len(phases) != 1:
        return None
    (J, r_taps, eh, r_slice, r_pad, _), (L, s_taps, ew, s_slice, s_pad, _) = phases[0][2:]
    if not J or not L or r_slice.indices(prob.P)[:2] != (0, prob.P) or \
            s_slice.indices(prob.Q)[:2] != (0, prob.Q):
        return None
    dims, along, offset = gradients.phase_filter_gather(prob, r_taps, s_taps,
                                                        launch.element_strides(w, prob.layout))
    wt_shape = (dims[0] * dims[1],) + dims[2:]            # phase_filter's, without its copy
    wt = cupy.empty(wt_shape, prob.dtype)
    phase, _, _, _ = checked_problem(dy, wt, padding=(r_pad, s_pad), dilation=(eh, ew),
                                     groups=prob.G, layout=prob.layout)
    if phase.y_shape != prob.x_shape:
        return None
    exe = cuda.planned(phase, dy, wt)
    gather = launch.kernel("layout", f"gather5<{CUDA_TYPES[prob.dtype.name][0]}>")
    total = wt.size
    grid = (min(-(-total // 256), 65535), 1, 1)
    args = (np.int64(total), *map(np.int32, dims[1:]), *map(np.int64, along))
    offset *= prob.dtype.itemsize

    def ready(dy, w, dx):
        scratch = launch.Scratch()
        wt = scratch.empty(wt_shape, prob.dtype)
        gather(grid, (256, 1, 1), (np.uint64(w.data.ptr + offset), wt, *args))
        launch.run(exe, dy, wt, dx, scratch)
    return ready


def _filter_on_gpu(conv2d, prob, x, dy, dw):
    """The w-gradient of CuPy arrays: float32 NHWC on CUDA cores (`im2win.cuda.wgrad_ffma`;
    dy copied where it is not contiguous and 16-byte aligned), float16 and bfloat16 on the
    Hopper kernel (`im2win.cuda.wgrad`) where it takes the problem, else forward convolutions
    (`im2win.gradients`)."""
    from im2win.cuda import launch, wgrad, wgrad_ffma
    if wgrad_ffma.refusal(prob, 0) is None:
        if not dy.flags.c_contiguous or dy.data.ptr % 16:
            dy = dy.copy()
        strides = launch.element_strides(x, "NHWC")
        wgrad_ffma.runner(prob, strides, wgrad_ffma.vector_x(prob, strides, x.data.ptr))(
            x, dy, dw)
        return dw
    ready = wgrad.staged(prob, x, dy)
    if ready is None:
        return gradients.backward_filter(conv2d, prob, x, dy, dw)
    inner, x, dy, buffer, finish = ready
    wgrad.run(inner, x, dy, dw if buffer is None else buffer, launch.element_strides(x, "NHWC"))
    if finish is not None:
        finish(buffer, dw)
    return dw


def _filter_direct(prob, x, dy):
    """The float32 kernel's Runner (`wgrad_ffma`) where it takes x and dy as they lie; the
    Hopper kernel's where it does (`wgrad.staged` makes no copy); for few channels in NHWC
    through window columns `wgrad.columns_direct`; else None."""
    from im2win.cuda import launch, wgrad, wgrad_ffma
    if wgrad_ffma.refusal(prob, dy.data.ptr) is None:
        if not dy.flags.c_contiguous:
            return None
        strides = launch.element_strides(x, "NHWC")
        return wgrad_ffma.runner(prob, strides, wgrad_ffma.vector_x(prob, strides, x.data.ptr))
    ready = wgrad.staged(prob, x, dy)
    if ready is None or not dy.flags.c_contiguous:
        return None
    if ready[3] is None:
        return wgrad.runner(prob, launch.element_strides(x, "NHWC"))
    if prob.layout == "NHWC" and wgrad.columns_pay(prob):
        return wgrad.columns_direct(prob)
    return None


def conv2d_backward_filter(x, dy, w_shape, *, stride=1, padding=0, dilation=1, groups=1,
                           layout="NCHW"):
    """Compute the gradient of `conv2d` with respect to w.

    ``dw[g*K/G + k, c, r, s] = sum_{n, p, q} dy[n, g*K/G + k, p, q] * xp[n, g*C/G + c,
    p*sh + r*dh, q*sw + s*dw]`` (xp: x zero-padded); the adjoint of conv2d in w:
    ``<conv2d(x, w), dy> == <w, conv2d_backward_filter(x, dy, w.shape)>``. The gradient of the
    bias is dy summed over N, P and Q (``dy.sum(axis=(0, 2, 3))`` in NCHW, ``(0, 1, 2)`` in
    NHWC).

    Args:
        x: (N, C, H, W) for "NCHW" or (N, H, W, C) for "NHWC".
        dy: the output's gradient, (N, K, P, Q) or (N, P, Q, K), x's dtype.
        w_shape: w's shape, (K, C/G, R, S) or (K, R, S, C/G).
        stride, padding, dilation, groups, layout: those of the forward `conv2d`.

    Returns:
        dw of `w_shape`, x's dtype, on x's device and in its array type, deterministic (the
        same bits every run). NumPy arrays: by the reference's window formulation
        (`im2win.reference.conv2d_backward_filter`), float64 sums rounded once. GPU arrays of
        float32 in NHWC with K/groups a multiple of 4: on CUDA cores (`im2win.cuda.wgrad_ffma`:
        FP32 sums over ranges of pixels, added in a fixed order; workspace of up to 256 MB of
        those partial sums; dy copied where not contiguous and 16-byte aligned). Of
        float16 and bfloat16 on Hopper: a kernel of its own (`im2win.cuda.wgrad`: the window
        operand with the pixels as the reduction, split-K added in a fixed order), on x and dy
        as they lie for NHWC with C/groups and K multiples of 8, else on channels-last copies of
        them (NCHW; one group with C not a multiple of 8: x's window columns side by side as
        channels where S*C <= 64, else C padded to a multiple of 8): workspace of about x's and
        dy's size (window columns: N*H*Q*S*C elements, rounded up). The others: one forward
        convolution per group of x seen as C/G images of N channels with dy as K/G filters of
        P x Q taps, views of both (`im2win.gradients.backward_filter`), a sum over N*P*Q per
        element in a fixed order, no atomics; memory beyond dw is what those calls take (a
        buffer of dw's size for its strided view). That form is slow: long reductions into few
        outputs.

    Raises:
        TypeError, ValueError: as `conv2d`; dy not of the forward output's shape or dtype, a
            bad w_shape.

    Example:
        >>> im2win.conv2d_backward_filter(np.ones((1, 1, 3, 3)), np.ones((1, 1, 2, 2)),
        ...                               (1, 1, 2, 2))[0, 0]
        array([[4., 4.],
               [4., 4.]])
    """
    return _backward(make_backward_filter_problem, reference.conv2d_backward_filter,
                     _filter_on_gpu, x, dy, w_shape,
                     dict(stride=stride, padding=padding, dilation=dilation, groups=groups,
                          layout=layout), _filter_direct, ("x", "dy"))
