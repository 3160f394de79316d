"""depthwise_rows run on the CPU: its CUDA C++ compiled with g++ against a small emulation of
the CUDA model (every thread of a block an OS thread, __syncthreads a barrier, shared memory a
block's own buffer, cp.async a per-thread queue of copies), on float32 problems (and, for
depthwise_rows_vec's words of 16-bit and 64-bit elements, DTYPE_PROBLEMS on small integers,
exact in every dtype), each result checked against the float64 reference. For kernel logic
written or changed without a GPU: it checks indexing, the copies-ahead ring's slots and zero
fill, not speed, and not the hardware's memory model.

``python3 tools/emulate_rows.py [--prefetch 0,1,2,4] [--strip 3]``: every problem below in
NHWC (rows copied ahead by cp.async) and in NCHW on scalars (no copies ahead) and, where
depthwise_rows_vec takes it, on vectors (--prefetch rows loaded ahead into registers; warp
shuffles as warp-wide exchanges; VECTOR_PROBLEMS must take it), with cp.async done both when
it is issued ("early": a slot overwritten before its row was read shows) and as late as the
waits allow ("late": a row read before its copy was waited for shows); every kernel the runs
take in one g++ build (`program`). Needs g++ with C++20. With EMULATE_TSAN=1 (every
emulate_* tool) built with ThreadSanitizer: shared-memory races fail it.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np

from im2win import reference
from im2win.cuda import plan as cuda_plan
from im2win.problem import make_problem

ROOT = Path(__file__).resolve().parent.parent

# x (N, C, H, W), filter R (= S), keyword arguments; groups = C = K
PROBLEMS = [
    ((2, 16, 17, 13), 3, dict(stride=2, padding=((2, 0), (0, 1)))),
    ((1, 24, 12, 11), 3, dict()),
    ((2, 32, 19, 21), 5, dict(stride=2, padding=(1, 2))),
    ((2, 8, 9, 30), 3, dict(padding=1)),
    ((1, 20, 14, 9), 5, dict(padding=2)),
]
# NCHW on vectors (depthwise_rows_vec): rows of 4, 6, 5, 7, 5, 32, 7 and 7 lanes (vectors of
# 4, 2 and 1 columns), idle lanes, channels past C in a warp, more outputs than W (and Q not
# a multiple of QT)
VECTOR_PROBLEMS = [
    ((2, 12, 16, 16), 3, dict(padding=1)),
    ((2, 6, 11, 24), 3, dict(stride=2, padding=1)),
    ((1, 10, 13, 20), 5, dict(padding=2)),
    ((2, 5, 9, 28), 5, dict(stride=2, padding=(1, 2))),
    ((1, 4, 8, 16), 3, dict(padding=((1, 1), (1, 3)))),
    ((1, 3, 6, 128), 3, dict(padding=(0, 1))),
    ((2, 10, 14, 14), 5, dict(padding=2)),
    ((2, 12, 7, 7), 3, dict(padding=1)),
    ((2, 5, 12, 24), 7, dict(padding=3)),                  # 7x7
    # halos past the next lane's vector: 7x7 on vectors of 2 and 1 columns (2 and 3 lanes a
    # side), rows of 3 lanes (the halo past both ends), 5x5 on vectors of one column with
    # more outputs than columns
    ((2, 6, 14, 14), 7, dict(padding=3)),
    ((2, 9, 7, 7), 7, dict(padding=3)),
    ((1, 4, 8, 6), 7, dict(padding=3)),
    ((1, 6, 9, 7), 5, dict(padding=2)),
    ((1, 3, 6, 9), 5, dict(padding=((2, 2), (2, 4)))),
]
# ... in the other dtypes, whose 32-bit words hold two columns (16-bit) or half of one
# (float64): exact on small integers (NCHW on vectors): 7x7 on 2 columns (2 lanes a side; 2
# and 3 lanes a row, Q > W), on 4 (the left columns from the word of element 1), 5x5 at
# stride 2 on 8 (a word on the right), 3x3 on 8 (the left one the high half of the last
# word), float64's word pairs
DTYPE_PROBLEMS = [
    (np.float16, (2, 5, 8, 14), 7, dict(padding=3)),
    (ml_dtypes.bfloat16, (1, 6, 8, 6), 7, dict(padding=((3, 3), (3, 6)))),
    (np.float16, (2, 8, 9, 28), 7, dict(padding=3)),
    (ml_dtypes.bfloat16, (1, 4, 9, 24), 5, dict(stride=2, padding=2)),
    (np.float16, (2, 6, 8, 16), 3, dict(padding=1)),
    (np.float64, (2, 5, 8, 14), 5, dict(padding=2)),
    (np.float64, (1, 4, 7, 9), 3, dict(padding=((1, 1), (1, 3)))),
]

SHIM = r"""
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
typedef long long i64;
struct dim3 { unsigned x = 1, y = 1, z = 1; };
thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
using std::min;
using std::max;
inline float to_acc(float v, float) { return v; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline double __hiloint2double(int hi, int lo) {
  const unsigned long long b = (unsigned long long)(unsigned)hi << 32 | (unsigned)lo;
  double d; std::memcpy(&d, &b, 8); return d;
}
inline float madd(float a, float b, float c) { return std::fma(a, b, c); }
template <typename T> T from_acc(float v);
template <> float from_acc<float>(float v) { return v; }
alignas(16) unsigned char depthwise_smem[1 << 20];
static std::barrier<>* block_barrier;
inline void __syncthreads() { block_barrier->arrive_and_wait(); }
inline unsigned long long __cvta_generic_to_shared(const void* p) {
  return (unsigned long long)p;
}
// cp.async: a thread's copies, in commit groups; LATE: done only when a wait needs them
static bool LATE = false;
struct Copy { void* dst; const void* src; int bytes, valid; };
thread_local std::deque<std::vector<Copy>> groups;
thread_local std::vector<Copy> open_group;
inline void do_copy(const Copy& c) {
  if (c.valid) std::memcpy(c.dst, c.src, c.bytes); else std::memset(c.dst, 0, c.bytes);
}
inline void emu_cp_async(void* dst, const void* src, int bytes, int valid) {
  Copy c{dst, src, bytes, valid};
  if (LATE) open_group.push_back(c); else do_copy(c);
}
inline void emu_commit() { groups.push_back(open_group); open_group.clear(); }
inline void emu_wait(int pending) {
  while ((int)groups.size() > pending) {
    for (auto& c : groups.front()) do_copy(c);
    groups.pop_front();
  }
}
struct Warp {
  std::barrier<>* bar;
  const unsigned char* addr[32];
  unsigned a[32][4], b[32][2], s[32];
};
static Warp warps[64];
thread_local int warp_id, lane_id;
inline void warp_sync() { warps[warp_id].bar->arrive_and_wait(); }
inline void __syncwarp() { warp_sync(); }
// __shfl_up_sync / __shfl_down_sync by 1 or more lanes (every lane of the warp takes part)
inline unsigned shfl_by(unsigned v, int by) {
  Warp& w = warps[warp_id];
  w.s[lane_id] = v;
  warp_sync();
  const int from = lane_id + by;
  const unsigned r = from >= 0 && from < 32 ? w.s[from] : v;
  warp_sync();
  return r;
}
inline unsigned __shfl_up_sync(unsigned, unsigned v, int d) { return shfl_by(v, -d); }
inline unsigned __shfl_down_sync(unsigned, unsigned v, int d) { return shfl_by(v, d); }
// The block's threads: OS threads made once for a block size and reused by every block that
// follows (making and joining 256 threads cost about 1 s a block under ThreadSanitizer, 40 ms
// without). The main thread hands each block over through `start` and takes it back through
// `done`, so everything a block does happens before the next block's poisoning and launch.
struct BlockThreads {
  std::vector<std::thread> pool;
  std::unique_ptr<std::barrier<>> start, done;
  void (*step)(void*, int) = nullptr;
  void* work = nullptr;
  bool stop = false;
  void resize(int threads) {
    close();
    start.reset(new std::barrier<>(threads + 1));
    done.reset(new std::barrier<>(threads + 1));
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([this, t] {
        for (start->arrive_and_wait(); !stop; start->arrive_and_wait()) {
          step(work, t);
          done->arrive_and_wait();
        }
      });
  }
  void close() {
    if (pool.empty()) return;
    stop = true;
    start->arrive_and_wait();
    for (auto& th : pool) th.join();
    pool.clear();
    stop = false;
  }
  ~BlockThreads() { close(); }
};
static BlockThreads block_threads;
// One block of the grid: its threads (threadIdx from t and blockDim.x), a barrier for the block
// and one for each warp, its shared memory poisoned first; `body` is a thread's kernel call; a
// thread's copies still queued are done when it returns (uncommitted ones dropped).
template <typename F>
void run_block(unsigned bx, unsigned by, unsigned bz, unsigned char* smem, size_t bytes,
               F body) {
  const int threads = blockDim.x * blockDim.y;
  std::memset(smem, 0xff, bytes);
  std::barrier<> bar(threads);
  block_barrier = &bar;
  std::vector<std::unique_ptr<std::barrier<>>> wb;
  for (int i = 0; i < (threads + 31) / 32; ++i) {
    wb.emplace_back(new std::barrier<>(std::min(32, threads - 32 * i)));
    warps[i].bar = wb.back().get();
  }
  auto thread = [&](int t) {
    blockIdx.x = bx; blockIdx.y = by; blockIdx.z = bz;
    threadIdx.x = t % blockDim.x; threadIdx.y = t / blockDim.x;
    warp_id = t / 32; lane_id = t % 32;
    body();
    emu_wait(0);
    open_group.clear();
    bar.arrive_and_drop();
  };
  if ((int)block_threads.pool.size() != threads) block_threads.resize(threads);
  block_threads.work = &thread;
  block_threads.step = [](void* f, int t) { (*static_cast<decltype(thread)*>(f))(t); };
  block_threads.start->arrive_and_wait();
  block_threads.done->arrive_and_wait();
}
"""

# The 16-bit types and the warp-collective instructions (ldmatrix, mma.sync m16n8k16 and m16n8k8
# of float16 into FP32, __byte_perm), for kernels on Tensor Cores: appended to SHIM.
MMA_SHIM = r"""
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
struct half_t { unsigned short bits; };
struct bf16_t { unsigned short bits; };
inline float h2f(unsigned short b) { _Float16 h; std::memcpy(&h, &b, 2); return (float)h; }
inline float to_acc(half_t v, float) { return h2f(v.bits); }
template <> half_t from_acc<half_t>(float v) {
  _Float16 h = (_Float16)v; half_t r; std::memcpy(&r.bits, &h, 2); return r;
}
template <typename T> unsigned pack2(float lo, float hi);
template <> unsigned pack2<half_t>(float lo, float hi) {
  return from_acc<half_t>(lo).bits | (unsigned)from_acc<half_t>(hi).bits << 16;
}
// a warp's exchange: its 32 lanes' operands, between two barriers of the warp
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {   // PTX prmt, default mode
  const unsigned long long b = (unsigned long long)y << 32 | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= (unsigned)(b >> (8 * ((s >> (4 * i)) & 7)) & 0xff) << (8 * i);
  return r;
}
inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
// ldmatrix .x{N}: lanes 8m .. 8m+7 give matrix m's row addresses; lane l gets, of matrix m,
// row l/4's two 16-bit elements 2(l%4), 2(l%4)+1
template <int NM> inline void emu_ldmatrix(unsigned* r, const void* p) {
  Warp& w = warps[warp_id];
  w.addr[lane_id] = (const unsigned char*)p;
  warp_sync();
  for (int m = 0; m < NM; ++m)
    std::memcpy(&r[m], w.addr[8 * m + lane_id / 4] + 4 * (lane_id % 4), 4);
  warp_sync();
}
// mma.sync m16n8k16 row.col f32 += f16 * f16: A's fragment a0 (row g, k 2t..), a1 (row g+8),
// a2 (row g, k 2t+8..), a3 (row g+8, k 2t+8..); B's b0 (k 2t.., col g), b1 (k 2t+8.., col g);
// D's d0, d1 (row g, cols 2t, 2t+1), d2, d3 (row g+8); g = lane/4, t = lane%4
template <typename T> inline void mma_m16n8k16(float (&d)[4], const unsigned (&a)[4],
                                                const unsigned (&b)[2]) {
  Warp& w = warps[warp_id];
  for (int i = 0; i < 4; ++i) w.a[lane_id][i] = a[i];
  for (int i = 0; i < 2; ++i) w.b[lane_id][i] = b[i];
  warp_sync();
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i % 2), k = 2 * t + 8 * (i / 2);
      A[row][k] = h2f(w.a[l][i] & 0xffff); A[row][k + 1] = h2f(w.a[l][i] >> 16);
    }
    for (int i = 0; i < 2; ++i) {
      const int k = 2 * t + 8 * i;
      B[k][g] = h2f(w.b[l][i] & 0xffff); B[k + 1][g] = h2f(w.b[l][i] >> 16);
    }
  }
  warp_sync();
  const int g = lane_id / 4, t = lane_id % 4;
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
    float s = d[i];
    for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
    d[i] = s;
  }
}
// mma.sync m16n8k8: the m16n8k16 with A's columns and B's rows 8..15 zero
template <typename T> inline void mma_m16n8k8(float (&d)[4], unsigned a0, unsigned a1,
                                               unsigned b) {
  const unsigned a[4] = {a0, a1, 0, 0}, bb[2] = {b, 0};
  mma_m16n8k16<T>(d, a, bb);
}
"""

MAIN = r"""
#ifndef ELEM
#define ELEM float
#endif
int main(int argc, char** argv) {
  // argv: late N C H W P Q pt pl PS xn xc xh xw bx by bz gx gy gz, then files x w b y
  int a = 1;
  LATE = atoi(argv[a++]);
  int N = atoi(argv[a++]), C = atoi(argv[a++]), H = atoi(argv[a++]), W = atoi(argv[a++]);
  int P = atoi(argv[a++]), Q = atoi(argv[a++]), pt = atoi(argv[a++]), pl = atoi(argv[a++]);
  int PS = atoi(argv[a++]);
  i64 xn = atoll(argv[a++]), xc = atoll(argv[a++]), xh = atoll(argv[a++]), xw = atoll(argv[a++]);
  blockDim.x = atoi(argv[a++]); blockDim.y = atoi(argv[a++]); blockDim.z = atoi(argv[a++]);
  gridDim.x = atoi(argv[a++]); gridDim.y = atoi(argv[a++]); gridDim.z = atoi(argv[a++]);
  auto load = [](const char* path, size_t n) {
    std::vector<ELEM> v(n);
    FILE* f = fopen(path, "rb");
    if (fread(v.data(), sizeof(ELEM), n, f) != n) abort();
    fclose(f);
    return v;
  };
  size_t xs = (size_t)N * C * H * W;
  auto x = load(argv[a++], xs), w = load(argv[a++], (size_t)C * R_ * R_);
  auto b = load(argv[a++], C);
  std::vector<ELEM> y((size_t)N * C * P * Q);
  std::memset(y.data(), 0xff, y.size() * sizeof(ELEM));         // NaN in every float type
  const char* out = argv[a++];
  for (unsigned bz = 0; bz < gridDim.z; ++bz)
    for (unsigned by = 0; by < gridDim.y; ++by)
      for (unsigned bx = 0; bx < gridDim.x; ++bx)
        run_block(bx, by, bz, depthwise_smem, sizeof depthwise_smem, [&] {
          KERNEL(x.data(), w.data(), b.data(), y.data(), N, C, H, W, P, Q, pt, pl, PS, xn, xc,
                 xh, xw);
        });
  FILE* f = fopen(out, "wb"); fwrite(y.data(), sizeof(ELEM), y.size(), f); fclose(f);
  return 0;
}
"""

# bfloat16 and float64 for the rows kernels (with MMA_SHIM's 16-bit types): DTYPE_PROBLEMS.
DTYPE_SHIM = r"""
inline double to_acc(double v, double) { return v; }
inline double madd(double a, double b, double c) { return std::fma(a, b, c); }
template <typename T> T from_acc(double v);
template <> double from_acc<double>(double v) { return v; }
inline float to_acc(bf16_t v, float) {
  const unsigned u = (unsigned)v.bits << 16; float f; std::memcpy(&f, &u, 4); return f;
}
template <> bf16_t from_acc<bf16_t>(float v) {                  // round to nearest even
  unsigned u; std::memcpy(&u, &v, 4); u += 0x7fff + ((u >> 16) & 1);
  bf16_t r; r.bits = (unsigned short)(u >> 16); return r;
}
"""


# EMULATE_TSAN=1 builds the emulations with ThreadSanitizer: a block's threads are OS threads
# and its barriers std::barrier, so shared memory one thread writes and another reads or writes
# with no barrier (or wait) between them, the hazards compute-sanitizer's racecheck finds on a
# GPU, is a data race it reports; the run then fails.
def build(src: Path, exe: Path) -> None:
    """Compile an emulation's C++ (with ThreadSanitizer under EMULATE_TSAN)."""
    tsan = ["-fsanitize=thread", "-g"] if os.environ.get("EMULATE_TSAN") else []
    subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", "-w", *tsan, "-o", str(exe),
                    str(src)], check=True)


def execute(command: list) -> None:
    """Run a built emulation; a race ThreadSanitizer reports fails it (CalledProcessError)."""
    subprocess.run(list(map(str, command)), check=True,
                   env=dict(os.environ, TSAN_OPTIONS="halt_on_error=1 exitcode=66"))


# Under EMULATE_TSAN a run given a `tsan_key` already run is left out (emulate returns None):
# a tool whose plain runs check many problems on each kernel form checks each form for races
# on the first problem that takes it, in each copy timing (ThreadSanitizer costs 5-10x).
TSAN_RAN: set = set()


def emulate(workdir: Path, name: str, source, args: list, arrays, y_shape, y_dtype,
            ref, tsan_key=None) -> float | None:
    """Build `name` from `source()` (once per workdir) with g++, run it with `args`, then the
    paths of `arrays` (written as raw bytes) and of y, and return y's largest error against
    `ref` relative to ref's largest magnitude (inf where y has a NaN: an output not written);
    None where EMULATE_TSAN leaves the run out (`tsan_key` already run)."""
    if tsan_key is not None and os.environ.get("EMULATE_TSAN"):
        key = (str(workdir), name, tsan_key)        # one tool run's workdir: a rerun checks again
        if key in TSAN_RAN:
            return None
        TSAN_RAN.add(key)
    exe = workdir / re.sub(r"\W+", "_", name)
    if not exe.exists():
        src = workdir / f"{exe.name}.cpp"
        src.write_text(source())
        build(src, exe)
    files = []
    for i, arr in enumerate(arrays):
        files.append(str(workdir / f"in{i}.bin"))
        np.ascontiguousarray(arr).tofile(files[-1])
    out = workdir / "y.bin"
    execute([exe, *args, *files, out])
    y = np.fromfile(out, y_dtype).reshape(y_shape).astype(np.float64)
    if not np.all(np.isfinite(y)):
        return float("inf")
    return float(np.abs(y - ref).max() / np.abs(ref).max())


def report(label: str, err: float | None, tolerance: float) -> int:
    """Print one emulated run's line; 1 where its error passes `tolerance`, else 0 (and 0 for
    a run EMULATE_TSAN left out: err None)."""
    if err is None:
        print(f"{label} not run again under ThreadSanitizer (its kernel form was)", flush=True)
        return 0
    wrong = not err <= tolerance
    print(f"{label} error {err:.2e} {'WRONG' if wrong else 'ok'}", flush=True)
    return int(wrong)


def kernel_source(whole: bool = False) -> str:
    """depthwise.cu from its first line to the end of depthwise_rows_vec (`whole`: all of it), with
    the cp.async asm statements replaced by the emulation's calls."""
    text = (ROOT / "im2win" / "cuda" / "depthwise.cu").read_text()
    if not whole:
        text = text[:text.index("\n}\n", text.index("    depthwise_rows_vec(")) + 3]
    text = cp_async_emulated(text)
    assert whole or "asm" not in text, "an asm statement the emulation does not know"
    return text


def cp_async_emulated(text: str) -> str:
    """A kernel file's cp.async statements (a copy helper's `to`, `src`, `TB` and `valid`,
    commits and waits) as the emulation's calls."""
    text = text.replace("const unsigned to = (unsigned)__cvta_generic_to_shared(dst);",
                        "void* to = dst;")
    text = re.sub(r'asm volatile\("cp\.async\.(?:ca|cg)\.shared\.global.*?\);',
                  "emu_cp_async(to, src, TB, valid);", text, flags=re.DOTALL)
    text = text.replace('asm volatile("cp.async.commit_group;\\n" ::);', "emu_commit();")
    text = re.sub(r'asm volatile\("cp\.async\.wait_group %0;\\n" ::"n"\((.*?)\)\);',
                  r"emu_wait(\1);", text)
    text = re.sub(r'asm volatile\("cp\.async\.wait_group (\d+);\\n" ::\);', r"emu_wait(\1);",
                  text)
    return text


def job(x_shape, R, kwargs, layout, prefetch, strip, late, vec, dtype=np.float32):
    """One run of the rows kernel on one problem (NCHW: on vectors where `vec` and
    depthwise_rows_vec takes it), as (kernel, R, element type, arguments, inputs, y's shape,
    dtype, reference), or None where neither form takes it. float32: uniform values; other
    dtypes: small integers, whose results every dtype holds exactly."""
    rng = np.random.default_rng(0)
    N, C, H, W = x_shape
    if dtype == np.float32:
        x, w, b = (rng.uniform(-1, 1, shape).astype(dtype)               # NCHW values
                   for shape in (x_shape, (C, 1, R, R), C))
    else:
        x, w, b = (rng.integers(-2, 3, shape).astype(dtype)
                   for shape in (x_shape, (C, 1, R, R), C))
    xl = x if layout == "NCHW" else x.transpose(0, 2, 3, 1).copy()
    wl = w if layout == "NCHW" else w.transpose(0, 2, 3, 1).copy()
    prob = make_problem(xl, wl, b, layout=layout, groups=C, **kwargs)
    strides = tuple(s // xl.itemsize for s in (xl.strides if layout == "NCHW" else
                                               (xl.strides[0], xl.strides[3], xl.strides[1],
                                                xl.strides[2])))
    saved = (cuda_plan.DEPTHWISE_ROWS_MIN_ROWS, cuda_plan.DEPTHWISE_ROWS_STRIP,
             cuda_plan.DEPTHWISE_ROWS_PREFETCH, cuda_plan.DEPTHWISE_ROWS_VEC,
             cuda_plan.DEPTHWISE_ROWS_VEC_AHEAD)
    try:              # the rows kernel on any map, in strips of `strip`, `prefetch` rows ahead
        cuda_plan.DEPTHWISE_ROWS_MIN_ROWS, cuda_plan.DEPTHWISE_ROWS_STRIP = 0, strip
        cuda_plan.DEPTHWISE_ROWS_PREFETCH = prefetch
        cuda_plan.DEPTHWISE_ROWS_VEC, cuda_plan.DEPTHWISE_ROWS_VEC_AHEAD = vec, prefetch
        plan = cuda_plan.make_plan(prob, x_strides=strides, w_aligned=True,
                                   algorithm="depthwise")
    finally:
        (cuda_plan.DEPTHWISE_ROWS_MIN_ROWS, cuda_plan.DEPTHWISE_ROWS_STRIP,
         cuda_plan.DEPTHWISE_ROWS_PREFETCH, cuda_plan.DEPTHWISE_ROWS_VEC,
         cuda_plan.DEPTHWISE_ROWS_VEC_AHEAD) = saved
    name = plan.kernel          # depthwise_rows<float, float, TV, R, S, SH, SW, QT, nchw(, PF)>
                                # or depthwise_rows_vec<float, float, V, R, S, SH, SW, PF>
    if not name.startswith("depthwise_rows_vec<" if vec else "depthwise_rows<"):
        return None
    geo = plan.geometry
    ref = reference.conv2d(xl.astype(np.float64), wl.astype(np.float64), b.astype(np.float64),
                           layout=layout, groups=C, **kwargs)
    args = [int(late), *geo.ints, *geo.x_strides, *geo.block, *geo.grid(prob, 132)]
    elem = name[name.index("<") + 1:name.index(",")]
    return name, R, elem, args, (xl, wl, b), prob.y_shape, dtype, ref


def program(kernels: list) -> str:
    """One emulation holding every (kernel, R, element type) of `kernels`: MAIN once for
    each, the first argument picking which (one g++ build for all of a run's kernels, not
    one each: 92 builds had been most of the tool's time)."""
    parts = [SHIM + MMA_SHIM + DTYPE_SHIM + kernel_source()]
    for i, (name, R, elem) in enumerate(kernels):
        parts.append(f"#define R_ {R}\n#define ELEM {elem}\n#define KERNEL {name}\n" +
                     MAIN.replace("int main(", f"static int main_{i}(") +
                     "#undef R_\n#undef ELEM\n#undef KERNEL\n")
    cases = "".join(f"    case {i}: return main_{i}(argc - 1, argv + 1);\n"
                    for i in range(len(kernels)))
    parts.append("int main(int argc, char** argv) {\n  switch (atoi(argv[1])) {\n" + cases +
                 "  }\n  return 2;\n}\n")
    return "".join(parts)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prefetch", default="0,1,2,4")
    parser.add_argument("--strip", type=int, default=3)
    args = parser.parse_args(argv)
    failures, jobs = 0, []                 # (label, tolerance, job)
    prefetches = list(map(int, args.prefetch.split(",")))
    for x_shape, R, kwargs in PROBLEMS + VECTOR_PROBLEMS:
        # NHWC (rows copied ahead by cp.async), NCHW on scalars, NCHW on vectors (rows
        # loaded ahead into registers; cp.async's "late" does not apply)
        for layout, vec in (("NHWC", False), ("NCHW", False), ("NCHW", True)):
            for prefetch in prefetches:
                if layout == "NCHW" and prefetch and not vec:
                    continue
                for late in (False, True) if not vec else (False,):
                    one = job(x_shape, R, kwargs, layout, prefetch, args.strip, late, vec)
                    if one is None:
                        if vec and (x_shape, R, kwargs) in VECTOR_PROBLEMS:
                            print(f"{x_shape} {R}x{R} {kwargs}: not on vectors WRONG")
                            failures += 1
                        continue
                    jobs.append((f"{str(x_shape):18s} {R}x{R} {str(kwargs):40s} "
                                 f"{layout}{' vec' if vec else ''} PF={prefetch} "
                                 f"{'late ' if late else 'early'}", 1e-5, one))
    for dtype, x_shape, R, kwargs in DTYPE_PROBLEMS:
        for prefetch in prefetches:
            one = job(x_shape, R, kwargs, "NCHW", prefetch, args.strip, False, True, dtype)
            if one is None:
                print(f"{np.dtype(dtype).name} {x_shape} {R}x{R} {kwargs}: not on vectors "
                      f"WRONG")
                failures += 1
                continue
            jobs.append((f"{str(x_shape):18s} {R}x{R} {str(kwargs):40s} NCHW vec "
                         f"PF={prefetch} {np.dtype(dtype).name}", 0.0, one))
    kernels = sorted({one[:3] for _, _, one in jobs})
    with tempfile.TemporaryDirectory() as tmp:
        for label, tolerance, (name, R, elem, run_args, arrays, shape, dtype, ref) in jobs:
            err = emulate(Path(tmp), "rows", lambda: program(kernels),
                          [kernels.index((name, R, elem)), *run_args], arrays, shape, dtype,
                          ref)
            failures += report(label, err, tolerance)
    print(f"all {len(jobs)} correct" if not failures else f"{failures} of {len(jobs)} WRONG")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
