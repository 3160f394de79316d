"""`im2win.conv2d`: the one public entry point, NumPy on the CPU and CuPy on the GPU."""

from __future__ import annotations

import sys

import numpy as np

from im2win import cpu
from im2win.problem import make_problem


def _on_gpu(a) -> bool:
    cupy = sys.modules.get("cupy")          # a CuPy array implies CuPy is already imported
    return cupy is not None and isinstance(a, cupy.ndarray)


def _same_device(x, w, bias, out) -> bool:
    """Return whether the arrays are CuPy arrays; raise unless all live on one device."""
    named = {"x": x, "w": w, "bias": bias, "out": out}
    named = {k: a for k, a in named.items() if a is not None}
    gpu = {k for k, a in named.items() if _on_gpu(a)}
    if gpu and gpu != set(named):
        where = ", ".join(f"{k} on {'the GPU (CuPy)' if k in gpu else 'the CPU'}" for k in named)
        raise TypeError(f"all arrays must be on one device, got {where}")
    if gpu:
        devices = {k: a.device.id for k, a in named.items()}
        if len(set(devices.values())) > 1:
            raise ValueError(f"all arrays must be on one device, got GPU ids {devices}")
    return bool(gpu)


def _check_out(out, prob, xp, inputs):
    if not isinstance(out, xp.ndarray):
        raise TypeError(f"out must be a {xp.__name__}.ndarray like the inputs, got "
                        f"{type(out).__name__}")
    if tuple(out.shape) != prob.y_shape:
        raise ValueError(f"out has shape {tuple(out.shape)}, expected {prob.y_shape}")
    if out.dtype != prob.dtype:
        raise TypeError(f"out has dtype {out.dtype}, expected {prob.dtype} (the input's dtype)")
    if xp is np and not out.flags.writeable:
        raise ValueError("out is read-only")
    if any(a is not None and xp.may_share_memory(out, a) for a in inputs):
        raise ValueError("out must not overlap x, w or bias")


def conv2d(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1, layout="NCHW",
           out=None):
    """Convolve (cross-correlate, as deep-learning frameworks do) a batch of images with filters.

    ``y[n,k,p,q] = bias[k] + sum_{c<C/G, r<R, s<S} xp[n, g*C/G + c, p*sh + r*dh, q*sw + s*dw] *
    w[k,c,r,s]`` with xp the zero-padded input and g = k // (K/G), as in ``spec/im2win.md``.
    NumPy arrays (or array-likes) run on the CPU, CuPy arrays on their GPU.

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
        out: optional array of y's shape, dtype and device to write the result into.

    Returns:
        y: (N, K, P, Q) for "NCHW" or (N, P, Q, K) for "NHWC", with x's dtype (float16, float32
        or float64; float16 accumulates in float32).

    Raises:
        TypeError: non-integer hyper-parameters, unsupported or mismatched dtypes, arrays on
            different devices, a bad `out` type or dtype.
        ValueError: bad values or shapes (see INPUTS.md for the full list).
        NotImplementedError: CuPy arrays, until the GPU path lands.

    Example:
        >>> import numpy as np, im2win
        >>> x = np.ones((2, 3, 8, 8), np.float32); w = np.ones((4, 3, 3, 3), np.float32)
        >>> im2win.conv2d(x, w, padding=1).shape
        (2, 4, 8, 8)
        >>> im2win.conv2d(x.transpose(0, 2, 3, 1), w.transpose(0, 2, 3, 1), layout="NHWC").shape
        (2, 6, 6, 4)
    """
    on_gpu = _same_device(x, w, bias, out)
    if not on_gpu:
        x, w = np.asarray(x), np.asarray(w)
        bias = None if bias is None else np.asarray(bias)
    prob = make_problem(x, w, bias, stride=stride, padding=padding, dilation=dilation,
                        groups=groups, layout=layout)
    if on_gpu:
        import cupy
        if out is not None:
            _check_out(out, prob, cupy, (x, w, bias))
        raise NotImplementedError("the GPU path of im2win.conv2d is not implemented yet; "
                                  "pass NumPy arrays to run on the CPU")
    if out is not None:
        _check_out(out, prob, np, (x, w, bias))
    y = np.empty(prob.y_shape, prob.dtype) if out is None else out
    if prob.N == 0:
        return y
    return cpu.conv2d(prob, x, w, bias, y)
