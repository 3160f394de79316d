"""The GPU side of im2win (CuPy). Importing it never imports CuPy or touches a GPU."""

from __future__ import annotations

import functools


@functools.cache
def is_available() -> bool:
    """Return whether CuPy imports and sees at least one CUDA device."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, no driver, or no device: all mean "no GPU here"
        return False
