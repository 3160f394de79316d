// docs/wip: window.cu's window_runs as a block walking a strip of output rows, x's rows read
// once into a ring in shared memory (written in the twenty-seventh session without a GPU;
// emulated: `python3 tools/emulate_window.py --kernel docs/wip/window_runs_strip.cu`, also with
// EMULATE_TSAN=1). Time it against the tree's in one process:
// `python3 tools/runs_dev.py --window-from docs/wip/window_runs_strip.cu`.
//
// The same tensor as window.cu's window_runs, launched the same way (grid min(rows, blocks),
// 256 threads), but block b takes the consecutive rows [b*per, (b+1)*per) of x_win (per =
// ceil(rows / gridDim.x)), so that output row p + 1 of an image reuses the x rows of row p:
// its x rows p*sh - pt .. p*sh - pt + (R-1)*dh (the span, every row of it, dilation's unused
// ones too) sit in a ring of RING rows of W*C elements in shared memory, x's row h in slot h %
// RING, as x lays a row out for NHWC (col*C + c) and transposed to that order for NCHW. Per
// output row: the rows the next output row adds are copied (4-byte cp.async, zeros outside x)
// into slots no longer needed while this row is written; a thread writes 4 consecutive
// elements of x_win's row a store, each read from its ring row (one division by R*C and one by
// C a store). The call-4 form (a block a row) reads each x row R/sh times from the L2 (cv1:
// 2.75) and writes each row only after all its copies land; this reads it once and overlaps.
// Needs RING * W*C <= WINDOW_RUN_RING elements (cv1: 15 x 681): plan.runs_refusal would check
// (W*C*((R-1)*dh + 1 + sh) in place of the pitch).

// It stands in for window.cu's window_runs template (the tools splice it there), using that
// file's window_copy4.
constexpr int WINDOW_RUN_RING = 12288;

template <typename T>
__global__ void __launch_bounds__(256)
    window_runs(const T* __restrict__ x, T* __restrict__ x_win, i64 rows, int P, int pitch,
                int H, int W, int C, int R, int sh, int dh, int pt, int pl, i64 xn, i64 xc,
                i64 xh, i64 xw) {
  static_assert(sizeof(T) == 4, "4-byte elements: a cp.async each");
  struct alignas(16) Four {
    T v[4];
  };
  __shared__ __align__(16) T ring[WINDOW_RUN_RING];
  const int WC = W * C, RC = R * C, span = (R - 1) * dh + 1, slots = span + sh;
  const i64 per = (rows + gridDim.x - 1) / gridDim.x, r0 = blockIdx.x * per;
  const i64 r1 = r0 + per < rows ? r0 + per : rows;
  auto slot_of = [&](int h) { return ((h % slots) + slots) % slots * WC; };
  // x's rows [from, to) of image n into their slots, zeros outside x
  auto fetch = [&](i64 n, int from, int to) {
    const T* image = x + n * xn;
    for (int h = from; h < to; ++h) {
      const bool in = h >= 0 && h < H;
      T* slot = ring + slot_of(h);
      const T* src = image + (i64)(in ? h : 0) * xh;
      for (int e = threadIdx.x; e < WC; e += 256) {
        int col, c;
        if (xc == 1) {                    // NHWC: along the row, e = col*C + c
          col = e / C;
          c = e - col * C;
        } else {                          // NCHW: along a channel's row, e = c*W + col
          c = e / W;
          col = e - c * W;
        }
        window_copy4(slot + col * C + c, src + (i64)c * xc + (i64)col * xw, in);
      }
    }
  };
  i64 loaded = -1;                        // the image whose rows the ring holds, up to hi
  int hi = 0;
  for (i64 np = r0; np < r1; ++np) {
    const i64 n = np / P;
    const int p = (int)(np - n * P), lo = p * sh - pt;
    if (np == r0 || n != loaded) {         // a strip's first row, or a new image: all of it
      fetch(n, lo, lo + span);
      asm volatile("cp.async.commit_group;\n" ::);
      loaded = n;
      hi = lo + span;
    }
    // the next row's new x rows, in flight while this one is written (their slots held rows
    // below lo, which no later row of this image reads)
    if (np + 1 < r1 && (np + 1) / P == n) {
      fetch(n, hi, lo + sh + span);
      hi = lo + sh + span;
    }
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 1;\n" ::);        // this row's x rows have landed
    __syncthreads();
    T* out = x_win + np * pitch;
    for (int e = threadIdx.x * 4; e < pitch; e += 256 * 4) {
      int m = e / RC, r = (e - m * RC) / C, c = e - m * RC - r * C;   // then by increments
      Four four;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int col = m - pl;
        four.v[u] = col >= 0 && col < W ? ring[slot_of(lo + r * dh) + col * C + c] : T{};
        if (++c == C) {
          c = 0;
          if (++r == R) {
            r = 0;
            ++m;
          }
        }
      }
      *reinterpret_cast<Four*>(out + e) = four;
    }
    __syncthreads();                                     // its slots are the next rows' to fill
  }
  asm volatile("cp.async.wait_group 0;\n" ::);
}
