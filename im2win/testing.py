"""How results are judged against the float64 reference: one rule for tests and benchmarks."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np


def allowed_error(dtype, reduction: int, precision: str = "float32") -> float:
    """Largest accepted `relative_error` of a result in `dtype` with `reduction`-long sums.

    One rounding of the output to `dtype`, plus the accumulation error of the sum in the
    accumulator (float32 for float16, bfloat16 and float32, float64 for float64), which grows
    like sqrt(reduction) for random data; 8 is the margin over that growth. precision "tf32"
    (float32 operands multiplied as TF32, 10 fraction bits, truncated) adds four TF32 units
    for the operands' rounding; "3xtf32" is held to float32's bound.
    """
    dtype = np.dtype(dtype)
    acc = np.float64 if dtype == np.float64 else np.float32
    operands = 4 * 2.0 ** -10 if precision == "tf32" else 0.0
    return float(ml_dtypes.finfo(dtype).eps + operands +
                 8 * np.finfo(acc).eps * math.sqrt(max(reduction, 1)))


def relative_error(y, ref) -> float:
    """max|y - ref| / max|ref| over finite entries, in float64.

    Non-finite entries must match exactly (Inf for Inf of the same sign, NaN for NaN); any other
    NaN or Inf in either array makes the error infinite.
    """
    y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
    if y.shape != ref.shape:
        raise ValueError(f"result has shape {y.shape}, the reference {ref.shape}")
    finite = np.isfinite(y) & np.isfinite(ref)
    same = (y == ref) | (np.isnan(y) & np.isnan(ref))
    if not np.all(finite | same):
        return math.inf
    scale = max(float(np.max(np.abs(ref[finite]), initial=0.0)), np.finfo(np.float64).tiny)
    return float(np.max(np.abs(y[finite] - ref[finite]), initial=0.0)) / scale


def assert_close(y, ref, dtype, reduction: int) -> None:
    """Raise AssertionError, quoting both numbers, unless y is within `allowed_error` of ref."""
    err, allowed = relative_error(y, ref), allowed_error(dtype, reduction)
    if not err <= allowed:
        raise AssertionError(f"relative error {err:.3e} exceeds the allowed {allowed:.3e} "
                             f"({np.dtype(dtype)}, reduction length {reduction})")
