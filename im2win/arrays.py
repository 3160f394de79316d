"""Arrays at the door: which device they live on, NumPy conversion, and the checked problem.

Below both paths (api, cuda): it never imports CuPy, only recognises its arrays when CuPy is
already imported.
"""

from __future__ import annotations

import sys

import numpy as np

from im2win import interop
from im2win.problem import Given, make_problem


def on_gpu(a) -> bool:
    cupy = sys.modules.get("cupy")          # a CuPy array implies CuPy is already imported
    return cupy is not None and isinstance(a, cupy.ndarray)


def same_device(x, w, bias, out, names=("x", "w", "bias", "out")) -> bool:
    """Return whether the arrays are CuPy arrays; raise unless all live on one device, or if
    one of the first two (required) is None (the messages call them by `names`)."""
    for name, a in zip(names[:2], (x, w)):
        if a is None:
            raise TypeError(f"{name} must be an array of numbers, got NoneType")
    named = dict(zip(names, (x, w, bias, out)))
    interop.gpu_family(named)           # CUDA arrays of another library mixed in: TypeError
    named = {k: a for k, a in named.items() if a is not None}
    gpu = {k for k, a in named.items() if on_gpu(a)}
    if gpu and gpu != set(named):
        where = ", ".join(f"{k} on {'the GPU (CuPy)' if k in gpu else 'the CPU'}" for k in named)
        raise TypeError(f"all arrays must be on one device, got {where}")
    if gpu:
        devices = {k: a.device.id for k, a in named.items()}
        if len(set(devices.values())) > 1:
            raise ValueError(f"all arrays must be on one device, got GPU ids {devices}")
    return bool(gpu)


def shares_memory(a, b) -> bool:
    """Whether arrays a and b (both NumPy or both CuPy) have an element in common: NumPy's exact
    test on the host, from their pointers, shapes and strides alone (for CuPy arrays on
    stand-ins at their device addresses, which it never reads); where that takes more than
    SHARES_MEMORY_WORK steps, True. So `out` may lie between an input's elements (channels of
    one buffer), never on one."""
    if on_gpu(a):
        a, b = _stand_in(a), _stand_in(b)
    try:
        return bool(np.shares_memory(a, b, max_work=SHARES_MEMORY_WORK))
    except getattr(np, "exceptions", np).TooHardError:       # np.TooHardError before 1.25
        return True


SHARES_MEMORY_WORK = 1 << 16


class _Interface:
    """A CuPy array's memory as NumPy's array interface describes it (never dereferenced)."""

    def __init__(self, a):
        self.__array_interface__ = {"data": (a.data.ptr, True), "shape": tuple(a.shape),
                                    "strides": tuple(a.strides),
                                    "typestr": f"|V{a.dtype.itemsize}", "version": 3}


def _stand_in(a) -> np.ndarray:
    return np.asarray(_Interface(a))


def array_like(name: str, a) -> np.ndarray:
    """`a` as a NumPy array (an array itself, not a copy); TypeError where it holds no numbers
    (None, strings, objects)."""
    given = a
    a = np.asarray(a)
    if a.dtype.kind in "OSU":
        raise TypeError(f"{name} must be an array of numbers, got {type(given).__name__}"
                        f"{'' if a.dtype.kind == 'O' else f' of dtype {a.dtype}'}")
    return a


def native(a: np.ndarray) -> np.ndarray:
    """a in native byte order (a copy only if it was byte-swapped)."""
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def as_native(a):
    """What the checks read of NumPy array `a` (its shape, its dtype in native byte order),
    so that a byte-swapped array is checked before it is copied."""
    return a if a.dtype.isnative else Given(a.shape, a.dtype.newbyteorder("="))


def checked_problem(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1,
                    layout="NCHW", out=None, gpu_only=False):
    """Check a call's arrays and arguments; return (problem, x, w, bias) ready for a path.

    Array-likes become NumPy arrays unless an argument is a CuPy array, in which case all
    (`out` included) must be, on one device (`gpu_only` requires that). Byte-swapped NumPy
    arrays are copied into native order once every check has passed. `out` is checked
    against the problem by the caller.
    """
    gpu = same_device(x, w, bias, out)
    if gpu_only and not gpu:
        raise TypeError("expected CuPy arrays (this function runs on the GPU), got NumPy "
                        "arrays or array-likes")
    if gpu:
        prob = make_problem(x, w, bias, stride=stride, padding=padding, dilation=dilation,
                            groups=groups, layout=layout)
        return prob, x, w, bias
    x, w = array_like("x", x), array_like("w", w)
    bias = None if bias is None else array_like("bias", bias)
    prob = make_problem(as_native(x), as_native(w), None if bias is None else as_native(bias),
                        stride=stride, padding=padding, dilation=dilation, groups=groups,
                        layout=layout)
    return prob, native(x), native(w), None if bias is None else native(bias)
