"""Check the TMA im2col copy against a NumPy gather, on the GPU (sm_90), before the wgmma
producer relies on it: ``python3 tools/tma_probe.py``.

Each case encodes x's descriptor (`im2win.cuda.tma`), runs one copy of `pixels` output pixels
by `channels` channels for one tap (`tools/tma_probe.cu`), and compares the shared
memory it filled, as it landed, with x gathered the window way (zeros outside x), un-swizzling
the 128-byte swizzle (16-byte chunk j of row i sits at chunk j ^ (i % 8)). Prints one line per
case and a summary; exit status 1 on any mismatch.
"""

from __future__ import annotations

import pathlib
import sys
import traceback

import ml_dtypes
import numpy as np

from im2win.cuda import tma
from im2win.problem import make_problem

CASES = [  # x NHWC shape, (R, S), conv2d keyword arguments, dtype, (pixel, r, s, c0), channels, pixels
    ((2, 7, 9, 64), (3, 3), dict(padding=1), np.float16, (0, 0, 0, 0), 64, 64),
    ((2, 7, 9, 64), (3, 3), dict(padding=1), np.float16, (5, 1, 2, 0), 64, 64),
    ((2, 7, 9, 64), (3, 3), dict(padding=1), np.float16, (40, 2, 1, 0), 64, 128),   # two images
    ((3, 11, 10, 128), (3, 2), dict(stride=2, dilation=2, padding=((2, 0), (1, 3))),
     np.float16, (7, 2, 1, 64), 64, 64),
    ((2, 9, 9, 64), (5, 5), dict(stride=(2, 1), padding=2), ml_dtypes.bfloat16, (3, 4, 0, 0),
     64, 256),
    ((1, 6, 6, 32), (3, 3), {}, np.float16, (0, 1, 1, 0), 32, 16),                  # 64-byte rows
]


def expected(prob, x, pixel, r, s, c0, channels, pixels):
    """The tile as a (pixels, channels) array: row i is output pixel pixel + i's tap (r, s)."""
    tile = np.zeros((pixels, channels), x.dtype)
    for i in range(pixels):
        m = pixel + i
        if m >= prob.N * prob.P * prob.Q:
            break
        n, pq = divmod(m, prob.P * prob.Q)
        p, q = divmod(pq, prob.Q)
        h, w = p * prob.sh - prob.pt + r * prob.dh, q * prob.sw - prob.pl + s * prob.dw
        if 0 <= h < prob.H and 0 <= w < prob.W:
            tile[i] = x[n, h, w, c0:c0 + channels]
    return tile


def unswizzle(raw: np.ndarray, row_bytes: int) -> np.ndarray:
    rows = raw.reshape(-1, row_bytes // 16, 16)
    out = np.empty_like(rows)
    for i in range(rows.shape[0]):
        for j in range(rows.shape[1]):
            out[i, j] = rows[i, j ^ (i % 8)]
    return out.reshape(-1)


def run_case(cupy, function, case, swizzle):
    x_shape, (R, S), kwargs, dtype, (pixel, r, s, c0), channels, pixels = case
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, x_shape).astype(dtype)
    w = np.zeros((1, R, S, x_shape[3]), dtype)
    prob = make_problem(x, w, layout="NHWC", **kwargs)
    xg = cupy.asarray(x)
    strides = tuple(st // x.itemsize for st in xg.strides)           # (n, h, w, c)
    args = tma.im2col_args(prob, (strides[0], strides[3], strides[1], strides[2]), channels,
                           pixels)
    tensor_map = tma.encode_im2col(xg, args, swizzle)
    coords, offsets = tma.tap_coordinates(prob, pixel, r, s, c0)
    nbytes = channels * pixels * x.itemsize
    out = cupy.zeros(nbytes, cupy.uint8)
    scalars = [np.array(v, np.int32) for v in (*coords, *offsets, nbytes)]
    pointer = np.array(out.data.ptr, np.uint64)
    params = np.array([tensor_map.getPtr()] + [a.ctypes.data for a in scalars] +
                      [pointer.ctypes.data], np.uint64)
    cupy.cuda.driver.launchKernel(function.kernel.ptr, 1, 1, 1, 128, 1, 1, nbytes + 1024,
                                  cupy.cuda.get_current_stream().ptr, params.ctypes.data, 0)
    cupy.cuda.Device().synchronize()
    raw = cupy.asnumpy(out)
    row_bytes = channels * x.itemsize
    if swizzle:
        raw = unswizzle(raw, row_bytes)
    got = raw.view(x.dtype).reshape(pixels, channels)
    want = expected(prob, x, pixel, r, s, c0, channels, pixels)
    bad = np.argwhere(got.view(np.uint16) != want.view(np.uint16))
    return prob, args, bad


def main() -> int:
    import cupy
    source = (pathlib.Path(__file__).resolve().parent / "tma_probe.cu").read_text()
    module = cupy.RawModule(code=source, options=("-std=c++17", "-arch=sm_90a"),
                            name_expressions=("tma_im2col_probe",))
    function = module.get_function("tma_im2col_probe")
    failures = 0
    for case in CASES:
        for swizzle in (False, True):
            if swizzle and case[5] * np.dtype(case[3]).itemsize != 128:
                continue                              # the 128-byte swizzle needs 128-byte rows
            label = f"x {case[0]} RxS {case[1]} {case[2]} {np.dtype(case[3]).name} " \
                    f"(pixel, r, s, c0) {case[4]} {case[5]}x{case[6]} swizzle {swizzle}"
            try:
                prob, args, bad = run_case(cupy, function, case, swizzle)
            except Exception:
                failures += 1
                print(f"ERROR {label}\n{traceback.format_exc(limit=3)}")
                continue
            failures += len(bad) > 0
            print(f"{'ok  ' if len(bad) == 0 else 'FAIL'} {label}" +
                  (f": {len(bad)} wrong, first at (row, channel) {tuple(bad[0])}; {args}"
                   if len(bad) else ""), flush=True)
    print(f"tma im2col probe: {failures} failing case(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
