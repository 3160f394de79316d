"""Whether a wgmma operand may start a few rows into a swizzled shared-memory tile, and with
which base-offset field (tools/offset_probe.cu), on the GPU (sm_90a):
``python3 tools/offset_probe.py``. For rows of 128 and 64 bytes (128- and 64-byte swizzle),
starts 0..7 rows in, the descriptor's base offset 0 or the start's row in the pattern: prints
which agree with X[s:s+64] @ W^T; exit status 1 if no variant agrees at every start."""

from __future__ import annotations

import pathlib
import sys

import numpy as np


def main() -> int:
    import cupy
    source = (pathlib.Path(__file__).with_name("offset_probe.cu")).read_text()
    names = ["offset_probe<128>", "offset_probe<64>"]
    module = cupy.RawModule(code=source, options=("-std=c++17", "-arch=sm_90a"),
                            name_expressions=names)
    rng = np.random.default_rng(0)
    works = {}
    for row, name in zip((128, 64), names):
        K = row // 2
        x = rng.integers(-4, 5, (72, K)).astype(np.float16)     # exact in FP32 sums
        w = rng.integers(-4, 5, (64, K)).astype(np.float16)
        d = cupy.full((2, 8, 64, 64), np.nan, np.float32)
        module.get_function(name)((8, 2), (128,), (cupy.asarray(x).view(np.uint16),
                                                   cupy.asarray(w).view(np.uint16), d))
        got = cupy.asnumpy(d)
        for variant in (0, 1):
            ok = [bool(np.array_equal(got[variant, s], x[s:s + 64].astype(np.float32) @
                                      w.T.astype(np.float32))) for s in range(8)]
            works[(row, variant)] = all(ok)
            print(f"rows of {row} bytes, base offset {'0' if variant == 0 else 'row'}: "
                  f"starts agreeing {[s for s in range(8) if ok[s]]}")
    return 0 if any(works[(128, v)] for v in (0, 1)) and any(works[(64, v)] for v in (0, 1)) \
        else 1


if __name__ == "__main__":
    sys.exit(main())
