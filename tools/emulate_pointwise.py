"""pointwise.cu's pointwise_nhwc run on the CPU: its CUDA C++ compiled with g++ against the
emulation of tools/emulate_rows.py (a block's threads as OS threads, __syncthreads a barrier,
cp.async queued copies), with the warp-collective instructions emulated too: ldmatrix (x2,
x4) and mma.sync m16n8k16 (float16 into FP32) exchange their lanes' operands through a
warp's own buffer between two warp barriers, with the PTX manual's fragment layouts. float16
problems, each result checked against the float64 reference: one block, copies done when
issued, then three blocks looping over the tiles, copies done as late as the waits allow.
Checks the kernel's indexing and fragment bookkeeping, not its speed.

``python3 tools/emulate_pointwise.py``. Needs g++ with C++20 and _Float16.
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
from emulate_rows import MMA_SHIM, SHIM, emulate, report  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# x (N, H, W, C), K
PROBLEMS = [
    ((2, 9, 7, 16), 24),          # 126 pixels: a full tile and a tail
    ((3, 11, 13, 24), 96),        # C = 16 + 8 (zero columns), 12 filter tiles
    ((1, 7, 9, 240), 40),         # C = 240: 15 steps of 16
    ((2, 3, 5, 104), 56),         # K = 8 * 7
    ((1, 5, 3, 8), 8),            # C = K = 8, fewer pixels than a tile
]

NAMESPACE = r"""
namespace pointwise {
CONSTANTS
inline unsigned long long smem_u32(const void* p) { return (unsigned long long)p; }
inline void copy16(void* dst, const void* src, bool valid) {
  emu_cp_async(dst, src, 16, valid);
}
inline void ldmatrix_x4(unsigned (&r)[4], const void* p) { emu_ldmatrix<4>(r, p); }
inline void ldmatrix_x2(unsigned (&r)[2], const void* p) { emu_ldmatrix<2>(r, p); }
}  // namespace pointwise
"""

MAIN = r"""
alignas(16) unsigned char smem_raw[1 << 21];
int main(int argc, char** argv) {
  // argv: late N H W C step xn xc xh xw bx by bz gx K, then files x w b y
  int a = 1;
  LATE = atoi(argv[a++]);
  int N = atoi(argv[a++]), H = atoi(argv[a++]), W = atoi(argv[a++]), C = atoi(argv[a++]);
  int step = atoi(argv[a++]);
  i64 xn = atoll(argv[a++]), xc = atoll(argv[a++]), xh = atoll(argv[a++]), xw = atoll(argv[a++]);
  blockDim.x = atoi(argv[a++]); blockDim.y = atoi(argv[a++]); blockDim.z = atoi(argv[a++]);
  gridDim.x = atoi(argv[a++]);
  int K = atoi(argv[a++]);
  auto load = [](const char* path, size_t n) {
    std::vector<half_t> v(n);
    FILE* f = fopen(path, "rb"); if (fread(v.data(), 2, n, f) != n) abort(); fclose(f);
    return v;
  };
  size_t pixels = (size_t)N * H * W;
  auto x = load(argv[a++], pixels * C), w = load(argv[a++], (size_t)K * C);
  auto b = load(argv[a++], K);
  std::vector<half_t> y(pixels * K, half_t{0x7e00});                 // NaN
  const char* out = argv[a++];
  for (unsigned bx = 0; bx < gridDim.x; ++bx)
    run_block(bx, 0, 0, smem_raw, sizeof smem_raw, [&] {
      KERNEL(x.data(), w.data(), b.data(), y.data(), N, H, W, C, step, xn, xc, xh, xw);
    });
  FILE* f = fopen(out, "wb"); fwrite(y.data(), 2, y.size(), f); fclose(f);
  return 0;
}
"""


def kernel_source() -> str:
    """pointwise.cu with its namespace of helpers replaced by the emulation's."""
    text = (ROOT / "im2win" / "cuda" / "pointwise.cu").read_text()
    start, end = text.index("namespace pointwise {"), text.index("}  // namespace pointwise")
    block = text[start:end]
    constants = "\n".join(re.findall(r"constexpr int \w+ = [^;]*;", block))
    text = text[:start] + NAMESPACE.replace("CONSTANTS", constants) + \
        text[end + len("}  // namespace pointwise"):]
    text = text.replace("extern __shared__ __align__(16) unsigned char smem_raw[];",
                        "extern unsigned char smem_raw[];")
    text = text.replace('asm volatile("cp.async.commit_group;\\n");', "emu_commit();")
    text = re.sub(r'asm volatile\("cp\.async\.wait_group (\d+);\\n"\);', r"emu_wait(\1);", text)
    assert "asm" not in text, "an asm statement the emulation does not know"
    return text


def run(x_shape, K, workdir: Path, blocks: int, late: bool) -> float:
    rng = np.random.default_rng(2)
    N, H, W, C = x_shape
    x = rng.uniform(-1, 1, x_shape).astype(np.float16)
    w = rng.uniform(-1, 1, (K, 1, 1, C)).astype(np.float16)
    b = rng.uniform(-1, 1, K).astype(np.float16)
    prob = make_problem(x, w, b, layout="NHWC")
    strides = (H * W * C, 1, W * C, C)
    plan = cuda_plan.make_plan(prob, x_strides=strides, w_aligned=True, algorithm="pointwise",
                               arch=90)
    geo = plan.geometry
    ref = reference.conv2d(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64),
                           layout="NHWC")
    shim = SHIM + MMA_SHIM
    args = [int(late), *geo.ints, *geo.x_strides, *geo.block, min(blocks, geo.tiles), K]
    return emulate(workdir, "pw_" + plan.kernel, lambda: shim + kernel_source() +
                   f"\n#define KERNEL {plan.kernel}\n" + MAIN,
                   args, (x, w, b), prob.y_shape, np.float16, ref)


def main(argv=None) -> int:
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for x_shape, K in PROBLEMS:
            for blocks, late in ((1, False), (3, True)):
                err = run(x_shape, K, Path(tmp), blocks, late)
                failures += report(f"{str(x_shape):16s} K={K:<4d} {blocks} blocks, copies "
                                   f"{'late ' if late else 'early'}", err,
                                   allowed_error(np.dtype(np.float16), x_shape[3]))
    print("all correct" if not failures else f"{failures} WRONG")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
