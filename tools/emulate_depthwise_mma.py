"""depthwise.cu's Tensor-Core kernels (depthwise_mma_nhwc and depthwise_mma_small_nhwc) run on
the CPU, like tools/emulate_pointwise.py: compiled with g++ against emulate_rows.py's
emulation of the CUDA model with its warp-collective instructions (ldmatrix, mma.sync,
__syncwarp, __byte_perm), on float16 NHWC depthwise layers of 3x3, 5x5 and 7x7 filters at
stride 1, each kernel forced on every problem (the small maps' kernel with CB = 1, 2 and 4),
each result checked against the float64 reference. Checks the kernels' indexing (tiles,
swizzles, the windows' planes and the output gather), not their speed.

``python3 tools/emulate_depthwise_mma.py``. Needs g++ with C++20 and _Float16.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import numpy as np

from im2win import reference
from im2win.cuda import plan as cuda_plan
from im2win.problem import make_problem
from im2win.testing import allowed_error

sys.path.insert(0, str(Path(__file__).resolve().parent))
from emulate_rows import MMA_SHIM, SHIM, emulate, kernel_source, report  # noqa: E402

# x (N, C, H, W), R (= S), padding: groups = C = K
PROBLEMS = [
    ((2, 16, 13, 12), 3, 1),
    ((1, 32, 8, 40), 7, 3),         # ConvNeXt's 7x7: two column tiles
    ((3, 24, 11, 17), 5, 2),        # a channel tile's tail (24 = 16 + 8)
    ((2, 16, 19, 9), 5, (2, 1)),    # padding on the rows only
]

MAIN = r"""
int main(int argc, char** argv) {
  // argv: the kernel's ints (NINTS), xn xc xh xw, block x, grid x y z, then files x w b y
  int a = 1, I[NINTS];
  for (int i = 0; i < NINTS; ++i) I[i] = atoi(argv[a++]);
  i64 xn = atoll(argv[a++]), xc = atoll(argv[a++]), xh = atoll(argv[a++]), xw = atoll(argv[a++]);
  blockDim.x = atoi(argv[a++]);
  gridDim.x = atoi(argv[a++]); gridDim.y = atoi(argv[a++]); gridDim.z = atoi(argv[a++]);
  const int N = I[0], C = I[1], H = I[2], W = I[3], P = I[4], Q = I[5];
  auto load = [](const char* path, size_t n) {
    std::vector<half_t> v(n);
    FILE* f = fopen(path, "rb"); if (fread(v.data(), 2, n, f) != n) abort(); fclose(f);
    return v;
  };
  auto x = load(argv[a++], (size_t)N * H * W * C), w = load(argv[a++], (size_t)C * R_ * R_);
  auto b = load(argv[a++], C);
  std::vector<half_t> y((size_t)N * P * Q * C, half_t{0x7e00});      // NaN
  const char* out = argv[a++];
  for (unsigned bz = 0; bz < gridDim.z; ++bz)
    for (unsigned by = 0; by < gridDim.y; ++by)
      for (unsigned bx = 0; bx < gridDim.x; ++bx)
        run_block(bx, by, bz, depthwise_smem, sizeof depthwise_smem, [&] { CALL; });
  FILE* f = fopen(out, "wb"); fwrite(y.data(), 2, y.size(), f); fclose(f);
  return 0;
}
"""


def source() -> str:
    """depthwise.cu whole, its asm replaced by the emulation's calls (kernel_source's, and the
    Tensor-Core kernels' ldmatrix)."""
    text = kernel_source(whole=True)
    for n in (4, 2):
        text = re.sub(r'const unsigned address = \(unsigned\)__cvta_generic_to_shared\(p\);\s*'
                      rf'asm volatile\("ldmatrix\.sync\.aligned\.m8n8\.x{n}\.shared\.b16.*?\);',
                      f"emu_ldmatrix<{n}>(a, p);", text, flags=re.DOTALL)
    text = re.sub(r"template <typename T>\n__device__ __forceinline__ void mma_m16n8k8\(.*?\n}\n",
                  "", text, flags=re.DOTALL)       # the emulation's own (MMA_SHIM)
    assert "asm" not in text, "an asm statement the emulation does not know"
    return text


def run(x_shape, R, padding, kind: str, cb: int, workdir: Path, halves: bool = True) -> float:
    rng = np.random.default_rng(3)
    N, C, H, W = x_shape
    x = rng.uniform(-1, 1, (N, H, W, C)).astype(np.float16)
    w = rng.uniform(-1, 1, (C, R, R, 1)).astype(np.float16)
    b = rng.uniform(-1, 1, C).astype(np.float16)
    prob = make_problem(x, w, b, layout="NHWC", groups=C, padding=padding)
    strides = (H * W * C, 1, W * C, C)
    saved = (cuda_plan.DEPTHWISE_MMA_FILTERS, cuda_plan.DEPTHWISE_MMA_SMALL_ROWS,
             cuda_plan.DEPTHWISE_MMA_SMALL_CB, cuda_plan.DEPTHWISE_MMA_HALVES)
    try:                                # this kernel on every stride-1 form
        cuda_plan.DEPTHWISE_MMA_FILTERS = cuda_plan.DEPTHWISE_MMA_FORMS
        cuda_plan.DEPTHWISE_MMA_SMALL_ROWS = 1 << 30 if kind == "small" else 0
        cuda_plan.DEPTHWISE_MMA_SMALL_CB = cb
        cuda_plan.DEPTHWISE_MMA_HALVES = halves
        plan = cuda_plan.make_plan(prob, x_strides=strides, w_aligned=True,
                                   algorithm="depthwise", arch=90)
    finally:
        (cuda_plan.DEPTHWISE_MMA_FILTERS, cuda_plan.DEPTHWISE_MMA_SMALL_ROWS,
         cuda_plan.DEPTHWISE_MMA_SMALL_CB, cuda_plan.DEPTHWISE_MMA_HALVES) = saved
    assert plan.kernel.startswith("depthwise_mma"), plan.kernel
    geo = plan.geometry
    ints = len(geo.ints)
    call = (f"{plan.kernel}(x.data(), w.data(), b.data(), y.data(), " +
            ", ".join(f"I[{i}]" for i in range(ints)) + ", xn, xc, xh, xw)")
    ref = reference.conv2d(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64),
                           layout="NHWC", groups=C, padding=padding)
    shim = SHIM + MMA_SHIM
    args = [*geo.ints, *geo.x_strides, geo.block[0], *geo.grid(prob, 132)]
    return emulate(workdir, f"dwmma_{ints}_{R}_" + plan.kernel, lambda: shim + source() +
                   f"\n#define R_ {R}\n#define NINTS {ints}\n#define CALL {call}\n" + MAIN,
                   args, (x, w, b), prob.y_shape, np.float16, ref)


def main(argv=None) -> int:
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for x_shape, R, padding in PROBLEMS:
            for kind, cb, halves in (("tile", 2, True), ("tile", 2, False), ("small", 1, True),
                                     ("small", 2, True), ("small", 4, True)):
                err = run(x_shape, R, padding, kind, cb, Path(tmp), halves)
                label = f"{kind} {'halves' if halves else 'x4s'}" if kind == "tile" else \
                    f"small CB={cb}"
                failures += report(f"{str(x_shape):16s} {R}x{R} pad {str(padding):7s} "
                                   f"{label}", err,
                                   allowed_error(np.dtype(np.float16), R * R))
    print("all correct" if not failures else f"{failures} WRONG")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
