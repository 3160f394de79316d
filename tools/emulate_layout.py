"""layout.cu's transposes run on the CPU: their CUDA C++ compiled with g++ against the emulation of
tools/emulate_rows.py (a block's threads as OS threads, __syncthreads a barrier; a kernel's
`__shared__` arrays static, so the threads of the block running share them), each launched as
Executable._transpose launches it (the kernel and grid im2win.cuda.plan.transpose_launch picks)
and again on a grid of one block along the dimension its blocks loop over (images for the tiled
kernels, elements for the others), so that the loops run too. dst[b, c, r] = src[b*sb + r*sr +
c*sc], compared bit for bit, with guards on both sides of dst: nothing else written. Checks
indexing and barriers, not speed.

``python3 tools/emulate_layout.py``. Needs g++ with C++20. EMULATE_TSAN=1: with
ThreadSanitizer (shared-memory races fail it).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from emulate_rows import SHIM, build, execute  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from im2win.cuda.plan import transpose_launch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# (element bytes, batch, rows, cols, row padding, column step, offset in elements); src rows
# sr = (cols - 1) * step + 1 + padding apart, items rows * sr apart
CASES = [
    (4, 3, 70, 100, 0, 1, 0),       # 32 x 128 tiles with tails on both sides
    (4, 2, 64, 130, 0, 1, 0),       # 64 x 64 tiles, a tail of 2 columns
    (4, 3, 32, 300, 0, 1, 0),       # 32 rows (NCHW x of 32 channels): 32 x 128 tiles
    (2, 2, 20, 150, 3, 1, 0),       # 2-byte elements, rows not whole words: 32 x 128 tiles
    (2, 3, 64, 136, 0, 1, 0),       # 2-byte elements, rows of whole 16-byte words
    (2, 3, 40, 200, 8, 1, 1),       # src off a 16-byte boundary: element by element
    (2, 2, 36, 49, 0, 1, 0),        # rows and columns not whole words (cv12's x)
    (8, 2, 33, 65, 0, 1, 0),        # 8-byte elements
    (4, 2, 40, 9, 3, 1, 0),         # a filter's taps, rows padded: one element a thread
    (4, 3, 20, 5, 0, 2, 0),         # columns 2 apart (an x of one column: sc = xh)
    (2, 5, 7, 3, 0, 1, 0),          # narrow and tiny, rows contiguous: still one a thread
    (4, 60, 600, 9, 0, 1, 0),       # a 3 x 3 filter's taps (transpose_taps), 2 passes an item
    (2, 11, 1000, 25, 0, 1, 1),     # 5 x 5 taps, off a 16-byte boundary, 4 passes an item
    (8, 30, 300, 31, 0, 1, 0),      # 8-byte elements, 31 columns (pitch 31), 5 passes
    (4, 100, 2700, 1, 0, 1, 0),     # 1 x 1 taps of 2700 channels, one pass an item
]

MAIN = r"""
template <typename T>
int run(int kernel, int argc, char** argv, int a) {
  i64 batch = atoll(argv[a++]), rows = atoll(argv[a++]), cols = atoll(argv[a++]);
  i64 sb = atoll(argv[a++]), sr = atoll(argv[a++]), sc = atoll(argv[a++]);
  i64 src_n = atoll(argv[a++]), dst_n = atoll(argv[a++]), offset = atoll(argv[a++]);
  gridDim.x = atoi(argv[a++]); gridDim.y = atoi(argv[a++]);
  blockDim.x = atoi(argv[a++]); blockDim.y = atoi(argv[a++]);
  std::vector<T> src(src_n), dst(dst_n);
  FILE* f = fopen(argv[a++], "rb");
  if (fread(src.data(), sizeof(T), src_n, f) != (size_t)src_n) abort();
  fclose(f);
  f = fopen(argv[a++], "rb");                       // dst as it starts: guards and poison
  if (fread(dst.data(), sizeof(T), dst_n, f) != (size_t)dst_n) abort();
  fclose(f);
  const T* s = src.data() + offset;
  T* d = dst.data() + GUARD;
  for (unsigned by = 0; by < gridDim.y; ++by)
    for (unsigned bx = 0; bx < gridDim.x; ++bx)
      run_block(bx, by, 0, depthwise_smem, 0, [&] {
        if (kernel == 0) transpose_batched<T, 64>(s, d, batch, rows, cols, sb, sr, sc);
        if (kernel == 4) transpose_batched<T, 32>(s, d, batch, rows, cols, sb, sr, sc);
        if (kernel == 1) transpose_narrow<T>(s, d, batch, rows, cols, sb, sr, sc);
        if constexpr (sizeof(T) == 2)
          if (kernel == 2) transpose_words<T>(s, d, batch, rows, cols, sb, sr);
        EXTRA
      });
  f = fopen(argv[a++], "wb");
  fwrite(dst.data(), sizeof(T), dst_n, f);
  fclose(f);
  return 0;
}

int main(int argc, char** argv) {
  // argv: kernel, element bytes, batch rows cols sb sr sc, src and dst sizes, src offset,
  // grid x y, block x y, then files src, dst (as it starts), out
  const int kernel = atoi(argv[1]), bytes = atoi(argv[2]);
  if (bytes == 2) return run<half_t>(kernel, argc, argv, 3);
  if (bytes == 4) return run<float>(kernel, argc, argv, 3);
  return run<double>(kernel, argc, argv, 3);
}
"""

GUARD = 8                                   # dst elements kept on each side
KERNELS = {"batched": 0, "narrow": 1, "words": 2, "taps": 3, "batched32": 4}
TILED = ("batched", "batched32", "words")   # a block a tile: gridDim.x is the tile count
EXTRA = "if (kernel == 3) transpose_taps<T>(s, d, batch, rows, cols, sb);"


def kernel_source() -> str:
    """layout.cu's transposes: from TRANSPOSE_TILE to the window columns' comment."""
    text = (ROOT / "im2win" / "cuda" / "layout.cu").read_text()
    text = text[text.index("constexpr int TRANSPOSE_TILE"):text.index("// Window columns:")]
    assert "asm" not in text, "an asm statement the emulation does not know"
    return text


def source() -> str:
    """The emulation's C++: the shim, the 16-bit type, the kernels, MAIN."""
    return (SHIM + "#undef __shared__\n#define __shared__ static\n"
            "struct half_t { unsigned short bits; };\n"
            "inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) "
            "{ return {a, b, c, d}; }\n" + f"constexpr int GUARD = {GUARD};\n" +
            kernel_source() + MAIN.replace("EXTRA", EXTRA))


def launch(item: int, batch: int, rows: int, cols: int, sb: int, sr: int, sc: int,
           src_aligned: bool) -> tuple[str, tuple[int, int], tuple[int, int]]:
    """(kernel, grid, block) as Executable._transpose launches them: plan.transpose_launch's
    choice (dst 16-byte aligned, as CuPy's allocations are), two dimensions of each."""
    kernel, grid, block = transpose_launch(item, batch, rows, cols, sb, sr, sc, src_aligned)
    return kernel.removeprefix("transpose_"), grid[:2], block[:2]


def check(case, small_grid: bool, workdir: Path) -> tuple[str, bool]:
    """(label, right) of one case on its launch grid, or on a grid of 2 blocks."""
    item, batch, rows, cols, pad, step, offset = case
    sr = (cols - 1) * step + 1 + pad
    sb = rows * sr
    bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[item]
    rng = np.random.default_rng(0)
    src = rng.integers(1, 1 << 15, batch * sb + offset + 16).astype(bits)
    size = batch * rows * cols
    dst = np.full(size + 2 * GUARD, 7, bits)
    dst[GUARD:GUARD + size] = (1 << 15) + 1              # poison: never a source value
    kernel, grid, block = launch(item, batch, rows, cols, sb, sr, step,
                                 (offset * item) % 16 == 0)
    if small_grid:          # the tiled kernels take a tile a block, looping over images
        grid = (grid[0], 1) if kernel in TILED else (1, 1)
    exe = workdir / "layout"
    if not exe.exists():
        (workdir / "layout.cpp").write_text(source())
        build(workdir / "layout.cpp", exe)
    files = [workdir / "src.bin", workdir / "dst.bin", workdir / "out.bin"]
    src.tofile(files[0])
    dst.tofile(files[1])
    execute([exe, KERNELS[kernel], item, batch, rows, cols, sb, sr, step, src.size, dst.size,
             offset, *grid, *block, *files])
    out = np.fromfile(files[2], bits)
    items = src[offset:offset + batch * sb].reshape(batch, rows, sr)
    items = items[:, :, :(cols - 1) * step + 1:step]
    want = dst.copy()
    want[GUARD:GUARD + size] = items.transpose(0, 2, 1).ravel()
    label = (f"{kernel:8s} {item}-byte batch {batch} rows {rows} cols {cols} sr {sr} sc {step} "
             f"offset {offset} grid {grid}")
    return label, bool(np.array_equal(out, want))


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    failures = runs = 0
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            for small_grid in (False, True):
                label, right = check(case, small_grid, Path(tmp))
                runs += 1
                failures += not right
                print(f"{label} {'ok' if right else 'WRONG'}", flush=True)
    print(f"all {runs} correct" if not failures else f"{failures} of {runs} WRONG")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
