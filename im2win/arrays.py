"""Arrays at the door: which device they live on, NumPy conversion, and the checked problem.

Below both paths (api, cuda): it never imports CuPy, only recognises its arrays when CuPy is
already imported.
"""

from __future__ import annotations

import sys

import numpy as np

from im2win import interop
from im2win.problem import make_problem


def on_gpu(a) -> bool:
    cupy = sys.modules.get("cupy")          # a CuPy array implies CuPy is already imported
    return cupy is not None and isinstance(a, cupy.ndarray)


def same_device(x, w, bias, out) -> bool:
    """Return whether the arrays are CuPy arrays; raise unless all live on one device."""
    named = {"x": x, "w": w, "bias": bias, "out": out}
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


def native(a) -> np.ndarray:
    """a as a NumPy array in native byte order (a copy only if it was byte-swapped)."""
    a = np.asarray(a)
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def checked_problem(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1,
                    layout="NCHW", out=None, gpu_only=False):
    """Check a call's arrays and arguments; return (problem, x, w, bias) ready for a path.

    Array-likes become NumPy arrays unless an argument is a CuPy array, in which case all
    (`out` included) must be, on one device (`gpu_only` requires that). `out` is checked
    against the problem by the caller.
    """
    gpu = same_device(x, w, bias, out)
    if gpu_only and not gpu:
        raise TypeError("expected CuPy arrays (this function runs on the GPU), got NumPy "
                        "arrays or array-likes")
    if not gpu:
        x, w = native(x), native(w)
        bias = None if bias is None else native(bias)
    prob = make_problem(x, w, bias, stride=stride, padding=padding, dilation=dilation,
                        groups=groups, layout=layout)
    return prob, x, w, bias
