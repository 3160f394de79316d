"""window.cu's window_runs run on the CPU: its CUDA C++ compiled with g++ against the emulation
of tools/emulate_rows.py (a block's threads as OS threads, __syncthreads a barrier, the
`__shared__` row static, so the threads of the block running share it; cp.async copies done
when issued and, run again, only at the wait), launched as Executable.through_runs launches it
on x and on w (K images of R x S, one output row each, rows the padded reduction long), and
again on a grid of one and of three blocks, so that the blocks' loop over the rows runs too:
x_win must equal the reference's window tensor (im2win.reference.image_to_window, NHWC) in
each row's first Wp*R*C elements and be zero in the rest of the row's pitch, bit for bit, with
guards after it: nothing else written. Checks indexing and barriers, not speed.

``python3 tools/emulate_window.py [--kernel FILE]``. Needs g++ with C++20. EMULATE_TSAN=1:
with ThreadSanitizer (shared-memory races fail it).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from emulate_rows import SHIM, build, cp_async_emulated, execute  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from im2win import reference  # noqa: E402
from im2win.cuda.plan import runs_pitch  # noqa: E402
from im2win.problem import make_problem  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# x (N, C, H, W), w (K, C, R, S), keyword arguments, layout; x a view with its rows reversed
# where `flip`
CASES = [
    ((2, 3, 29, 30), (8, 3, 11, 11), dict(stride=4, padding=1), "NCHW", False),
    ((2, 3, 29, 30), (8, 3, 11, 11), dict(stride=4, padding=(2, 1)), "NHWC", True),
    ((3, 1, 17, 23), (4, 1, 5, 8), dict(stride=(2, 4), padding=3), "NCHW", True),
    ((2, 2, 13, 70), (5, 2, 3, 6), dict(stride=2, dilation=(2, 1)), "NHWC", False),
    ((1, 3, 9, 300), (4, 3, 4, 4), dict(stride=4, padding=(0, 1)), "NHWC", False),  # W > 256
]

MAIN = r"""
int main(int argc, char** argv) {
  // argv: blocks late base rows P pitch H W C R sh dh pt pl xn xc xh xw, files x, x_win (out)
  int a = 1;
  gridDim.x = atoi(argv[a++]);
  blockDim.x = 256;
  LATE = atoi(argv[a++]);
  const i64 base = atoll(argv[a++]), rows = atoll(argv[a++]);
  int v[10];
  for (int i = 0; i < 10; ++i) v[i] = atoi(argv[a++]);
  i64 s[4];
  for (int i = 0; i < 4; ++i) s[i] = atoll(argv[a++]);
  FILE* f = fopen(argv[a++], "rb"); fseek(f, 0, SEEK_END); const long n = ftell(f);
  std::vector<float> x(n / 4); fseek(f, 0, SEEK_SET);
  if (fread(x.data(), 1, n, f) != (size_t)n) abort(); fclose(f);
  const i64 size = rows * v[1] + GUARD;
  std::vector<float> x_win(size, POISON);
  static unsigned char unused[16];
  for (unsigned bx = 0; bx < gridDim.x; ++bx)
    run_block(bx, 0, 0, unused, sizeof unused, [&] {
      window_runs<float>(x.data() + base, x_win.data(), rows, v[0], v[1], v[2], v[3], v[4],
                         v[5], v[6], v[7], v[8], v[9], s[0], s[1], s[2], s[3]);
    });
  FILE* o = fopen(argv[a++], "wb"); fwrite(x_win.data(), 4, size, o); fclose(o);
  return 0;
}
"""
GUARD, POISON = 16, -7.0                 # elements after x_win; never a window's value


RUNS_KERNEL = "template <typename T>\n__global__ void __launch_bounds__(256)\n    window_runs("


def with_runs(text: str, kernel: Path | None) -> str:
    """window.cu's `text` with its window_runs template (the file's last) replaced by the
    file `kernel`'s (a form of it and its own constants, using window.cu's window_copy4, as
    tools/runs_dev.py --window-from takes it); `text` itself where kernel is None."""
    return text if kernel is None else text[:text.index(RUNS_KERNEL)] + kernel.read_text()


def source(kernel: Path | None = None) -> str:
    """The emulation's C++: the shim, window.cu's window_runs (or `kernel`'s, with_runs) with
    its cp.async as the emulation's calls, and a main that runs window_runs<float>."""
    window = with_runs((ROOT / "im2win" / "cuda" / "window.cu").read_text(), kernel)
    window = cp_async_emulated(window[window.index("constexpr int WINDOW_RUN_ROW"):])
    assert "asm" not in window, "an asm statement the emulation does not know"
    return (SHIM + "#undef __shared__\n#define __shared__ static\n" + window +
            MAIN.replace("GUARD", str(GUARD)).replace("POISON", f"{POISON}f"))


def launch(exe: Path, workdir: Path, blocks: int, late: bool, view, rows: int, P: int,
           pitch: int, H: int, W: int, C: int, R: int, sh: int, dh: int, pt: int, pl: int,
           *strides) -> tuple[np.ndarray, np.ndarray]:
    """x_win (rows x pitch) that window_runs writes from `view` (NCHW-lettered element
    `strides`, any signs, into the array it views), and the guard after it."""
    owner = view.base if view.base is not None else view
    flat = np.ascontiguousarray(owner).reshape(-1)
    base = (view.__array_interface__["data"][0] - owner.__array_interface__["data"][0]) // 4
    src, out = workdir / "x.bin", workdir / "x_win.bin"
    flat.astype(np.float32).tofile(src)
    execute([exe, blocks, int(late), base, rows, P, pitch, H, W, C, R, sh, dh, pt, pl,
             *strides, src, out])
    got = np.fromfile(out, np.float32)
    return got[:rows * pitch].reshape(rows, pitch), got[rows * pitch:]


def expected(x_nhwc, R, sh, dh, pt, pb, pl, pr, pitch) -> np.ndarray:
    """The reference's NHWC window tensor, each row padded with zeros to `pitch`."""
    win = reference.image_to_window(x_nhwc.astype(np.float64), R, stride=sh, dilation=dh,
                                    padding=((pt, pb), (pl, pr)), layout="NHWC")
    win = win.reshape(win.shape[0] * win.shape[1], -1)
    rows = np.zeros((win.shape[0], pitch))
    rows[:, :win.shape[1]] = win
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", type=Path, help="emulate this file's window_runs (as "
                    "tools/runs_dev.py --window-from takes it) in place of window.cu's")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        exe = workdir / "window"
        (workdir / "window.cpp").write_text(source(args.kernel))
        build(workdir / "window.cpp", exe)
        for x_shape, w_shape, kwargs, layout, flip in CASES:
            x = rng.uniform(-1, 1, x_shape).astype(np.float32)
            w = rng.uniform(-1, 1, w_shape).astype(np.float32)
            xl = x if layout == "NCHW" else x.transpose(0, 2, 3, 1).copy()
            wl = w if layout == "NCHW" else w.transpose(0, 2, 3, 1).copy()
            if flip:               # x's rows reversed: a negative H stride into its array
                xl = xl[:, :, ::-1] if layout == "NCHW" else xl[:, ::-1]
            prob = make_problem(xl, wl, layout=layout, **kwargs)
            pitch, red = runs_pitch(prob), -(-prob.S * prob.R * prob.C // 16) * 16
            letters = dict(zip(layout, (st // 4 for st in xl.strides)))
            xs = [letters[k] for k in "NCHW"]
            wletters = dict(zip(layout, (st // 4 for st in wl.strides)))
            ws = [wletters[k] for k in "NCHW"]
            x_nhwc = xl if layout == "NHWC" else xl.transpose(0, 2, 3, 1)
            w_nhwc = wl if layout == "NHWC" else wl.transpose(0, 2, 3, 1)
            jobs = [(what, view, rows, dims, ref)
                    for what, view, rows, dims, ref in [
                        ("x", xl, prob.N * prob.P,
                         (prob.P, pitch, prob.H, prob.W, prob.C, prob.R, prob.sh, prob.dh,
                          prob.pt, prob.pl, *xs),
                         expected(x_nhwc, prob.R, prob.sh, prob.dh, prob.pt, prob.pb,
                                  prob.pl, prob.pr, pitch)),
                        ("w", wl, prob.K,
                         (1, red, prob.R, prob.S, prob.C, prob.R, 1, 1, 0, 0, *ws),
                         expected(w_nhwc, prob.R, 1, 1, 0, 0, 0, 0, red))]]
            for what, view, rows, dims, ref in jobs:
                for blocks, late in ((min(rows, 6 * 132), False), (1, False), (3, True)):
                    got, guard = launch(exe, workdir, blocks, late, view, rows, *dims)
                    ok = np.array_equal(got, ref) and (guard == POISON).all()
                    failures += not ok
                    print(f"window_runs<float> {what} of {layout} x {x_shape} w {w_shape} "
                          f"{kwargs}{' rows reversed' if flip else ''}: {blocks} blocks"
                          f"{', copies late' if late else ''}: {'ok' if ok else 'WRONG'}",
                          flush=True)
    print("all correct" if not failures else f"{failures} WRONG")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
