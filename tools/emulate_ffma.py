"""im2win_ffma.cu run on the CPU: its CUDA C++ compiled with g++ against the emulation of
tools/emulate_rows.py (a block's threads as OS threads, __syncthreads a barrier, `__shared__`
arrays static, so the threads of the block running share them), every tile of
tuning.FFMA_TILES (the 96-filter ones also with each switch off alone, and writing an NCHW
y in both forms; and the strided form, kStridedX, reading x from an NCHW array with two
channels and three columns more than the problem's, NaN there, as the NCHW twin reads x in
place, its cp.async copies landing when issued and, run again, only at the wait) on float32
NHWC problems with tails of pixels and filters, padding, stride and groups, and kTail on
stems over their window's runs (NaN past each run's row and after the last, where the last
slice reads and must mask), and kExact (no bounds predicates: unpadded problems whose
filters fill the tiles, plan.ffma_exact), and kTaps (the stems' fused runs, runs_plan's
default: TAPS_PROBLEMS read from x itself, NHWC or an NCHW copy with NaN around it, through
the plan's table), each launched on the grid tools/ffma_dev.py gives it (blocks one after
another).
Each result is checked against the float64 reference with y poisoned (NaN) first: an output
not written, or one written from the wrong window, fails. Checks indexing (the partial last
pass of the 96-filter tiles' loads, the swizzle, the tails) and barriers, not speed.

``python3 tools/emulate_ffma.py``. Needs g++ with C++20. EMULATE_TSAN=1: with
ThreadSanitizer (shared-memory races fail it).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from im2win import reference
from im2win.cuda.plan import (GEOMETRY, ffma_exact, ffma_kernel_name, geometry, runs_pitch,
                              runs_plan)
from im2win.cuda.tuning import FFMA_TILES, Options
from im2win.problem import make_problem
from im2win.testing import allowed_error

sys.path.insert(0, str(Path(__file__).resolve().parent))
from emulate_rows import SHIM, cp_async_emulated, emulate, report  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# x (N, H, W, C), w (K, R, S, C/G), keyword arguments: C/G a multiple of 16 or of 8
PROBLEMS = [
    ((2, 9, 7, 16), (100, 3, 2, 16), dict(padding=1)),          # 2 filter tiles of 96, tails
    ((1, 13, 12, 8), (70, 3, 3, 8), dict(padding=1)),           # 156 pixels: 2 pixel tiles
    ((2, 11, 10, 32), (40, 3, 3, 16), dict(groups=2, stride=2, padding=((2, 0), (1, 3)))),
    ((3, 12, 12, 16), (68, 3, 3, 16), dict(padding=1)),         # P*Q = 144: float4 NCHW y
]

# Stems over their window's runs (plan.runs_plan, kTail), NHWC x: 363 products padded to 368
# (the last slice's float4 in part and whole masked; each row's last run ends where the row's
# values do, so its padding reads the NaN past them), 48 (a multiple of 16: never masked).
RUN_PROBLEMS = [
    ((2, 29, 29, 3), (40, 11, 11, 3), dict(stride=4, padding=1)),
    ((3, 21, 19, 3), (70, 4, 4, 3), dict(stride=4, padding=(1, 2))),
]

# kExact: unpadded, K/G a multiple of the tile's filters (every load inside x and w), strides
# and a dilation, C/G of 16 and of 8.
EXACT_PROBLEMS = [
    ((2, 9, 8, 16), (64, 3, 2, 16), dict()),
    ((1, 13, 12, 16), (128, 3, 3, 16), dict(stride=2)),
    ((2, 7, 9, 8), (96, 2, 3, 8), dict(dilation=(2, 1), stride=(1, 2))),
]

# kTaps: stems read through the fused runs' table: RUN_PROBLEMS (padded: the checked form)
# and unpadded ones whose filters fill a tile of 96 or 64 (kExact where the tile has it).
TAPS_PROBLEMS = RUN_PROBLEMS + [
    ((2, 27, 26, 3), (96, 11, 11, 3), dict(stride=4)),
    ((3, 23, 25, 3), (64, 7, 7, 3), dict(stride=4)),
]

# Kernels: (tile, double_buffer, conflict_free, NCHW y form: 0 none, 1 float4, 2 staged,
# x read by the strided form (kTaps: x an NCHW copy), kTail: RUN_PROBLEMS over their
# window's runs[, kExact: EXACT_PROBLEMS[, kTaps: TAPS_PROBLEMS]])
FORMS = [(name, True, True, 0, False, False) for name in FFMA_TILES] + [
    ("f96x128", False, True, 0, False, False), ("f96x128", True, False, 0, False, False),
    ("f96x128k8", False, False, 0, False, False), ("f96x128", True, True, 1, False, False),
    ("f96x128k8", True, True, 2, False, False),
    ("f64x128", True, True, 1, True, False), ("f128x64", True, True, 1, True, False),
    ("f96x128k8", True, True, 2, True, False), ("f64x64k8", True, True, 0, True, False),
    ("f128x128", True, True, 0, True, False),
    ("f96x128", True, True, 0, False, True), ("f64x128", True, True, 2, False, True),
    ("f64x64", True, True, 1, False, True),
    ("f64x128", True, True, 0, False, False, True), ("f64x128", True, True, 1, True, False, True),
    ("f64x128", True, True, 2, True, False, True), ("f64x128k8", True, True, 0, True, False, True),
    ("f96x128k8", True, True, 2, False, False, True),
    ("f96x128", True, True, 0, False, False, False, True),
    ("f96x128", True, True, 2, True, False, False, True),
    ("f64x128", True, True, 1, True, False, True, True),
    ("f64x128", True, True, 0, False, False, True, True),
    ("f96x128", True, True, 0, True, False, True, True),
    ("f64x64", True, True, 2, False, False, False, True)]

# Split-K with its fixup (im2win_ffma_fixup): (tile, splits, NCHW y form, strided, kExact) on
# PROBLEMS' first two (NHWC y) and last (an NCHW y; P*Q = 144) and EXACT_PROBLEMS' second, the
# blocks run forward, with each tile's ranges in reverse and rotated by half (so that the
# tile's last block to finish is its last range, its first and one in the middle).
FIXUP_FORMS = [("f64x128", 2, 0, False, False), ("f96x128", 4, 0, False, False),
               ("f64x128", 8, 1, True, False), ("f96x128k8", 4, 2, True, False),
               ("f64x128", 4, 2, False, True), ("f64x128", 2, 0, True, True)]

EXTRA = r"""
#include <atomic>
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
template <typename T> inline T __ldg(const T* p) { return *p; }
inline float add(float a, float b) { return std::fma(a, 1.f, b); }
template <typename T> inline T __ldcg(const T* p) { return *p; }
inline int atomicAdd(int* p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
#undef __shared__
#define __shared__ static
"""

MAIN = r"""
int main(int argc, char** argv) {
  // argv: form gx gy gz threads late, then files geometry x w bias y
  int a = 1;
  const int form = atoi(argv[a++]);
  gridDim.x = atoi(argv[a++]); gridDim.y = atoi(argv[a++]); gridDim.z = atoi(argv[a++]);
  blockDim.x = atoi(argv[a++]);
  LATE = atoi(argv[a++]);
  const unsigned order = atoi(argv[a++]);   // split-K's ranges: forward, reversed, rotated
  auto load = [](const char* path) {
    FILE* f = fopen(path, "rb"); fseek(f, 0, SEEK_END); const long n = ftell(f);
    std::vector<unsigned char> v(n); fseek(f, 0, SEEK_SET);
    if (fread(v.data(), 1, n, f) != (size_t)n) abort(); fclose(f); return v;
  };
  Geometry geo; { auto g = load(argv[a++]); std::memcpy(&geo, g.data(), sizeof geo); }
  auto tb = load(argv[a++]);
  auto xb = load(argv[a++]), wb = load(argv[a++]), bb = load(argv[a++]), yb = load(argv[a++]);
  const int2* taps = (const int2*)tb.data();
  const char* out = argv[a++];
  const float *x = (const float*)xb.data(), *w = (const float*)wb.data(),
              *bias = (const float*)bb.data();
  float* y = (float*)yb.data();
  static unsigned char unused[16];
  // split-K's partial sums (NaN) and the fixup's counters after them (zeros)
  const size_t sums = (size_t)gridDim.z * geo.npix * geo.K;
  std::vector<float> partial(sums + gridDim.x * gridDim.y + 4, NAN);
  std::memset(partial.data() + sums, 0, (gridDim.x * gridDim.y + 4) * sizeof(float));
  for (unsigned iz = 0; iz < gridDim.z; ++iz)
    for (unsigned by = 0; by < gridDim.y; ++by)
      for (unsigned bx = 0; bx < gridDim.x; ++bx) {
        const unsigned bz = order == 0 ? iz : order == 1 ? gridDim.z - 1 - iz :
                            (iz + gridDim.z / 2) % gridDim.z;
        run_block(bx, by, bz, unused, sizeof unused, [&] {
          switch (form) {
DISPATCH
          }
        });
      }
  FILE* f = fopen(out, "wb"); fwrite(y, 1, yb.size(), f); fclose(f);
  return 0;
}
"""


def kernel_name(tile: str, double: bool, swizzle: bool, nchw_y: int, strided: bool,
                tail: bool, exact: bool = False, taps: bool = False) -> str:
    return ffma_kernel_name(FFMA_TILES[tile], Options(double_buffer=double,
                                                      conflict_free=swizzle),
                            nchw_y=nchw_y, strided=strided and not taps, tail=tail,
                            exact=exact, taps=taps)


def fixup_name(tile: str, splits: int, nchw_y: int, strided: bool, exact: bool) -> str:
    return ffma_kernel_name(FFMA_TILES[tile], Options(), splits, nchw_y=nchw_y,
                            strided=strided, exact=exact, fixup=True)


def source() -> str:
    """The emulation's C++: the shim, what the kernel takes from common.cuh and gemm.cuh
    (outer_8x8, the Geometry struct), im2win_ffma.cu, and a main that runs FORMS[form]."""
    common = (ROOT / "im2win" / "cuda" / "common.cuh").read_text()
    gemm = (ROOT / "im2win" / "cuda" / "gemm.cuh").read_text()
    ffma = (ROOT / "im2win" / "cuda" / "im2win_ffma.cu").read_text()
    outer = common[common.index("template <bool kBlocks = false>"):]
    struct = gemm[gemm.index("struct Geometry {"):gemm.index("struct Pixel {")]
    ffma = cp_async_emulated(ffma)
    for text in (outer, struct, ffma):
        assert "asm" not in text, "an asm statement the emulation does not know"
    dispatch = "\n".join(f"            case {i}: {kernel_name(*form)}(x, w, bias, y, taps, "
                         f"geo, 0); break;" for i, form in enumerate(FORMS))
    dispatch += "\n" + "\n".join(
        f"            case {len(FORMS) + i}: {fixup_name(*form)}(x, w, bias, y, "
        f"partial.data(), geo, 0); break;" for i, form in enumerate(FIXUP_FORMS))
    return SHIM + EXTRA + struct + outer + ffma + MAIN.replace("DISPATCH", dispatch)


def window_runs(prob, x, w, tile: str):
    """(geometry, x_win, w_win) of runs_plan for NHWC x and w: x_win's rows runs_pitch apart
    as window.cu's window_runs writes them, but NaN past each row's Wp*R*C values and in the
    slack after the last row (the kernel must mask what it reads there), w in window order
    with zeros past S*R*C."""
    geo = runs_plan(prob, Options(fused_runs=False), None, tile, None).inner.geometry
    win = reference.image_to_window(x, prob.R, stride=prob.sh, dilation=prob.dh,
                                    padding=((prob.pt, prob.pb), (prob.pl, prob.pr)),
                                    layout="NHWC").reshape(prob.N, prob.P, -1)
    pitch = runs_pitch(prob)
    flat = np.full(prob.N * prob.P * pitch + geo.redp, np.nan, np.float32)
    flat[:prob.N * prob.P * pitch].reshape(prob.N, prob.P, pitch)[..., :win.shape[2]] = win
    w_win = np.zeros((prob.K, geo.redp), np.float32)
    w_win[:, :geo.red] = w.transpose(0, 2, 1, 3).reshape(prob.K, -1)
    return geo, flat, w_win


def run(case: int, form: int, workdir: Path, rng, late: bool = False) -> int:
    tile, double, swizzle, nchw_y, strided, tail, exact, taps = (FORMS[form] + (False,) * 2)[:8]
    x_shape, w_shape, kwargs = (TAPS_PROBLEMS if taps else RUN_PROBLEMS if tail else
                                EXACT_PROBLEMS if exact else PROBLEMS)[case]
    t = FFMA_TILES[tile]
    if w_shape[3] % t.BK and not (tail or taps):
        return 0
    x = rng.uniform(-1, 1, x_shape).astype(np.float32)
    w = rng.uniform(-1, 1, w_shape).astype(np.float32)
    b = rng.uniform(-1, 1, w_shape[0]).astype(np.float32)
    prob = make_problem(x, w, layout="NHWC", **kwargs)
    if nchw_y and prob.G != 1:
        return 0                     # the NCHW y forms take one group (an NCHW twin's)
    if exact and not ffma_exact(geometry(prob, True, prob.N, (1, 1, 1, 1)), t, Options(),
                                whole=not taps):
        return 0                     # (a case kExact may not run: the planner's rule)
    n, h, wd, c = (s // 4 for s in x.strides)
    table = np.zeros(4, np.int32)
    geo = geometry(prob, True, prob.N, (n, c, h, wd))._replace(y_nchw=int(bool(nchw_y)))
    x_in = x
    if strided:                      # x[n, h, w, c] at x_in[n, c + 1, h, w + 2]: NCHW rows
        N, H, W, C = x.shape         # of W + 3, two channels more
        x_in = np.full((N, C + 2, H, W + 3), np.nan, np.float32)
        x_in[:, 1:C + 1, :, 2:W + 2] = x.transpose(0, 3, 1, 2)
        n, c, h, wd = (s // 4 for s in x_in.strides)
        geo = geometry(prob, True, prob.N, (n, c, h, wd))._replace(y_nchw=int(bool(nchw_y)))
        geo = geo._replace(base0=geo.base0 + c + 2)
    w_in = w
    if taps:                         # x itself (strided: an NCHW copy) through the table
        x_strides = (n, c, h, wd)
        if strided:
            x_in = x_in[:, 1:-1, :, 2:-1]                     # an NCHW view inside the NaN
            x_strides = tuple(s // 4 for s in x_in.strides)
        inner = runs_plan(prob, Options(fused_runs=True), None, tile, x_strides).inner
        geo = inner.geometry._replace(y_nchw=int(bool(nchw_y)))
        if strided:                  # the view's offset inside the array the kernel reads
            geo = geo._replace(base0=geo.base0 + x_strides[1] + 2)
            x_in = x_in.base if x_in.base is not None else x_in
        table = np.frombuffer(inner.taps, np.int32)
        w_in = np.zeros((prob.K, geo.redp), np.float32)
        w_in[:, :geo.red] = w.transpose(0, 2, 1, 3).reshape(prob.K, -1)
    if tail:                         # the 1 x 1 problem over the runs (runs_stage)
        geo, x_in, w_in = window_runs(prob, x, w, tile)
        geo = geo._replace(y_nchw=int(bool(nchw_y)))
    ref = reference.conv2d(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64),
                           layout="NHWC", **kwargs)
    if nchw_y:
        ref = ref.transpose(0, 3, 1, 2)
    grid = (-(-geo.npix // t.BN), -(-prob.Kg // t.BM), prob.G)
    args = [form, *grid, t.BM * t.BN // 64, int(late), 0]
    err = emulate(workdir, "ffma", source, args,
                  [np.array([tuple(geo)], GEOMETRY), table, x_in, w_in, b,
                   np.full(ref.shape, np.nan, np.float32)], ref.shape, np.float32, ref,
                  tsan_key=(form, late))
    label = (f"{kernel_name(*FORMS[form])} x {x_shape} w {w_shape} "
             f"{kwargs} grid {grid}{' (copies late)' if late else ''}")
    return report(label, err, allowed_error(np.float32, prob.reduction))


def run_fixup(problem, form: int, order: int, workdir: Path, rng) -> int:
    """FIXUP_FORMS[form] on `problem` (x, w, kwargs), its blocks in `order`."""
    tile, splits, nchw_y, strided, exact = FIXUP_FORMS[form]
    x_shape, w_shape, kwargs = problem
    t = FFMA_TILES[tile]
    x = rng.uniform(-1, 1, x_shape).astype(np.float32)
    w = rng.uniform(-1, 1, w_shape).astype(np.float32)
    b = rng.uniform(-1, 1, w_shape[0]).astype(np.float32)
    prob = make_problem(x, w, layout="NHWC", **kwargs)
    if w_shape[3] % t.BK or prob.G != 1:
        return 0
    n, h, wd, c = (s // 4 for s in x.strides)
    x_in, x_strides = x, (n, c, h, wd)
    if strided:                      # x[n, h, w, c] at x_in[n, c + 1, h, w + 2], NaN around
        N, H, W, C = x.shape
        x_in = np.full((N, C + 2, H, W + 3), np.nan, np.float32)
        x_in[:, 1:C + 1, :, 2:W + 2] = x.transpose(0, 3, 1, 2)
        n, c, h, wd = (s // 4 for s in x_in.strides)
        x_strides = (n, c, h, wd)
    geo = geometry(prob, True, prob.N, x_strides)._replace(y_nchw=int(bool(nchw_y)))
    if strided:
        geo = geo._replace(base0=geo.base0 + x_strides[1] + 2)
    if exact != ffma_exact(geo, t, Options()):
        return 0                     # (the planner's rule: kExact exactly where it may run)
    ref = reference.conv2d(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64),
                           layout="NHWC", **kwargs)
    if nchw_y:
        ref = ref.transpose(0, 3, 1, 2)
    grid = (-(-geo.npix // t.BN), -(-prob.Kg // t.BM), splits)
    args = [len(FORMS) + form, *grid, t.BM * t.BN // 64, 0, order]
    err = emulate(workdir, "ffma", source, args,
                  [np.array([tuple(geo)], GEOMETRY), np.zeros(4, np.int32), x_in, w, b,
                   np.full(ref.shape, np.nan, np.float32)], ref.shape, np.float32, ref,
                  tsan_key=(len(FORMS) + form, order))
    label = (f"{fixup_name(*FIXUP_FORMS[form])} x {x_shape} w {w_shape} {kwargs} grid "
             f"{grid} ranges {('forward', 'reversed', 'rotated')[order]}")
    return report(label, err, allowed_error(np.float32, prob.reduction))


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    rng = np.random.default_rng(0)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for form in range(len(FORMS)):
            problems = TAPS_PROBLEMS if FORMS[form][7:] == (True,) else \
                RUN_PROBLEMS if FORMS[form][5] else \
                EXACT_PROBLEMS if FORMS[form][6:] == (True,) else PROBLEMS
            for case in range(len(problems)):
                failures += run(case, form, Path(tmp), rng)
                if FORMS[form][4]:     # the strided form's cp.async copies landing at the wait
                    failures += run(case, form, Path(tmp), rng, late=True)
        for form in range(len(FIXUP_FORMS)):
            problems = [EXACT_PROBLEMS[1]] if FIXUP_FORMS[form][4] else \
                [PROBLEMS[0], PROBLEMS[1], PROBLEMS[3]]
            for problem in problems:
                for order in range(3):
                    failures += run_fixup(problem, form, order, Path(tmp), rng)
    print("all correct" if not failures else f"{failures} WRONG")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
