"""narrow_ffma.cu run on the CPU: its CUDA C++ compiled with g++ against the emulation of
tools/emulate_rows.py (a block's threads as OS threads, __syncthreads a barrier, cp.async a
per-thread queue of copies, shared memory poisoned before each block), on float32 stems of 1 to 4
channels in NCHW and NHWC: filter tails (K not a multiple of the block's KB), padding on every side,
strides and dilations that differ by axis, x a strided view, without bias, each with the tile and
filters planner.narrow_ffma_plan gives it (on either count of pixels a thread, NARROW_FFMA_PIXELS,
where the tile fits its slots, and on small tiles), on a grid of fewer blocks than tiles (each block
loops over several), in NCHW with the y written directly and through each warp's stage, with the
filters resident (the next tile's window copied while one is computed) and a filter row at a time,
with the window as planned (packed for the 147- and 363-product stems) and for 2 and 4 channels
packed too, and with the copies done when issued ("early": a buffer overwritten while still read shows) and as
late as the waits allow ("late": a row read before its copy was waited for shows). Each result is
checked against the float64 reference with y poisoned (NaN) first. Checks indexing and barriers, not
speed.

``python3 tools/emulate_narrow_ffma.py``. Needs g++ with C++20. EMULATE_TSAN=1: with
ThreadSanitizer (shared-memory races fail it).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from pathlib import Path

import numpy as np

from im2win import reference
from im2win.cuda.plan import NARROW_FFMA_PIXELS, check_options, narrow_ffma_plan, narrow_ffma_smem
from im2win.problem import make_problem
from im2win.testing import allowed_error

sys.path.insert(0, str(Path(__file__).resolve().parent))
from emulate_rows import SHIM, cp_async_emulated, emulate, report  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# layout, x (N, C, H, W), w (K, C, R, S), keyword arguments, bias, x a view (every other
# column of a wider array)
PROBLEMS = [
    ("NCHW", (2, 3, 13, 11), (40, 3, 3, 3), dict(padding=1), True, False),
    ("NHWC", (2, 3, 13, 11), (40, 3, 3, 3), dict(padding=1), True, False),
    ("NHWC", (1, 3, 27, 25), (96, 3, 11, 11), dict(stride=4, padding=2), True, False),
    ("NCHW", (2, 3, 19, 17), (64, 3, 7, 7), dict(stride=2, padding=3), False, True),
    ("NHWC", (1, 1, 12, 14), (30, 1, 3, 5), dict(stride=(2, 1), padding=((2, 0), (1, 3)),
                                                 dilation=(1, 2)), True, True),
    ("NCHW", (2, 2, 10, 9), (70, 2, 4, 4), dict(stride=(1, 3), dilation=(2, 1)), True, False),
    ("NHWC", (2, 4, 9, 12), (200, 4, 2, 3), dict(padding=((0, 1), (2, 0))), True, False),
]
GRID_X = 3          # blocks over the tiles, at most: each block loops over several
SMALL_TILE = (3, 5)  # each problem again on tiles of 3 x 5 outputs (rows split by a warp's 8)

EXTRA = r"""
struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
struct alignas(8) float2 { float x, y; };
inline float add(float a, float b) { return std::fma(a, 1.f, b); }
alignas(16) unsigned char narrow_ffma_smem[1 << 20];
"""

MAIN = r"""
int main(int argc, char** argv) {
  // argv: form late gx gy threads smem x_offset has_bias, 18 ints, 4 strides, then files x w
  // bias y and the output's path
  int a = 1;
  const int form = atoi(argv[a++]);
  LATE = atoi(argv[a++]);
  gridDim.x = atoi(argv[a++]); gridDim.y = atoi(argv[a++]);
  blockDim.x = atoi(argv[a++]);
  const size_t smem = atol(argv[a++]);
  const long x_offset = atol(argv[a++]);
  const int has_bias = atoi(argv[a++]);
  int v[18];
  for (int i = 0; i < 18; ++i) v[i] = atoi(argv[a++]);
  long long st[4];
  for (int i = 0; i < 4; ++i) st[i] = atoll(argv[a++]);
  auto load = [](const char* path) {
    FILE* f = fopen(path, "rb"); fseek(f, 0, SEEK_END); const long n = ftell(f);
    std::vector<unsigned char> b(n + 16); fseek(f, 0, SEEK_SET);
    if (fread(b.data(), 1, n, f) != (size_t)n) abort(); fclose(f); return b;
  };
  auto xb = load(argv[a++]), wb = load(argv[a++]), bb = load(argv[a++]), yb = load(argv[a++]);
  const char* out = argv[a++];
  const float *x = (const float*)xb.data() + x_offset, *w = (const float*)wb.data(),
              *bias = has_bias ? (const float*)bb.data() : nullptr;
  float* y = (float*)yb.data();
  for (unsigned by = 0; by < gridDim.y; ++by)
    for (unsigned bx = 0; bx < gridDim.x; ++bx)
      run_block(bx, by, 0, narrow_ffma_smem, smem, [&] {
        switch (form) {
DISPATCH
        }
      });
  FILE* f = fopen(out, "wb"); fwrite(y, 1, yb.size() - 16, f); fclose(f);
  return 0;
}
"""


def problem_plan(case: int, rng):
    """(prob, plan, x as passed (a view where the case says), its buffer, w, bias)."""
    layout, x_shape, w_shape, kwargs, with_bias, view = PROBLEMS[case]
    wide = x_shape[:3] + (2 * x_shape[3],) if view else x_shape
    buffer = rng.uniform(-1, 1, wide).astype(np.float32)
    x = buffer[..., ::2] if view else buffer
    w = rng.uniform(-1, 1, w_shape).astype(np.float32)
    if layout == "NHWC":
        buffer = np.ascontiguousarray(buffer.transpose(0, 2, 3, 1))
        x = buffer[:, :, ::2] if view else buffer
        w = np.ascontiguousarray(w.transpose(0, 2, 3, 1))
    b = rng.uniform(-1, 1, w_shape[0]).astype(np.float32) if with_bias else None
    prob = make_problem(x, w, layout=layout, **kwargs)
    letters = {"NCHW": "NCHW", "NHWC": "NHWC"}[layout]
    by_letter = dict(zip(letters, (s // 4 for s in x.strides)))
    strides = tuple(by_letter[c] for c in "NCHW")
    plan = narrow_ffma_plan(prob, check_options(None), strides, 90)
    return prob, plan, x, buffer, w, b


def form_of(kernel: str, tn: int, resident: bool, stage: bool, packed: bool) -> str:
    """The kernel's name with TN pixels a thread, its filters resident or not, its NCHW y staged
    or not, its window packed or not."""
    head = kernel.split(", ")[:5]
    nchw = head[4] == "true"
    return ", ".join(head[:3] + [str(tn), head[4], str(resident).lower(),
                                 str(nchw and stage).lower(), str(packed).lower()]) + ">"


def packings(prob, plan) -> tuple[bool, ...]:
    """The window forms a case runs: the plan's, and packed too for 2 and 4 channels (the
    planner packs only long reductions: the 3-channel cases of 147 and 363 products)."""
    planned = plan.kernel.rstrip(">").split(", ")[7] == "true"
    return tuple(sorted({planned} | ({True} if prob.C in (2, 4) else set())))


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    rng = np.random.default_rng(0)
    cases = [problem_plan(case, rng) for case in range(len(PROBLEMS))]
    kernels = sorted({form_of(plan.kernel, tn, resident, stage, packed)
                      for prob, plan, *_ in cases for tn in NARROW_FFMA_PIXELS
                      for resident in (False, True) for stage in (False, True)
                      for packed in packings(prob, plan)})
    dispatch = "\n".join(
        f"          case {i}: {name}(x, w, bias, y, {', '.join(f'v[{j}]' for j in range(18))}, "
        f"st[0], st[1], st[2], st[3]); break;" for i, name in enumerate(kernels))
    text = cp_async_emulated((ROOT / "im2win" / "cuda" / "narrow_ffma.cu").read_text())
    assert "asm" not in text, "an asm statement the emulation does not know"

    def source() -> str:
        return SHIM + EXTRA + text + MAIN.replace("DISPATCH", dispatch)

    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for (prob, plan, x, buffer, w, b), (layout, _, _, kwargs, _, _) in zip(cases, PROBLEMS):
            args = plan.geometry
            ref = reference.conv2d(x.astype(np.float64), w.astype(np.float64),
                                   None if b is None else b.astype(np.float64), layout=layout,
                                   **kwargs)
            offset = (x.__array_interface__["data"][0] -
                      buffer.__array_interface__["data"][0]) // 4
            for tn, tile, resident, stage, packed in itertools.product(
                    NARROW_FFMA_PIXELS, (args.ints[-2:], SMALL_TILE), (False, True),
                    (False, True) if layout == "NCHW" else (False,), packings(prob, plan)):
                tp, tq = tile
                kb = int(plan.kernel.split(", ")[1])
                if tp * tq > args.block[0] // kb * tn * 8:
                    continue            # the planner's tile for one TN on the other's fewer slots
                tiles = prob.N * -(-prob.P // tp) * -(-prob.Q // tq)
                kernel = form_of(plan.kernel, tn, resident, stage, packed)
                smem = narrow_ffma_smem(prob, kb, tp, tq, resident, stage, packed)
                grid = (min(tiles, GRID_X), args.channel_blocks)
                for late in (0, 1):
                    err = emulate(Path(tmp), "narrow_ffma", source,
                                  [kernels.index(kernel), late, *grid, args.block[0], smem,
                                   offset, int(b is not None), *args.ints[:-2], tp, tq,
                                   *args.x_strides],
                                  [buffer, w, np.zeros(1, np.float32) if b is None else b,
                                   np.full(ref.shape, np.nan, np.float32)],
                                  ref.shape, np.float32, ref,
                                  tsan_key=(kernel, tile == SMALL_TILE, late))
                    label = (f"{kernel} {layout} x {x.shape} w {w.shape} {kwargs} tile "
                             f"{tp} x {tq} grid {grid} {'late' if late else 'early'}")
                    failures += report(label, err, allowed_error(np.float32, prob.reduction))
    print("all correct" if not failures else f"{failures} WRONG")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
