// window.cu: image_to_window on the GPU, bit for bit the reference's tensor; below it
// window_to_image for backward data's window gradients (im2win.cuda.dgrad).
//
//   NCHW: x_win[n, c, p, m*R + r] = xp[n, c, p*sh + r*dh, m]      shape (N, C, P, Wp*R)
//   NHWC: x_win[n, p, m*R + r, c] = xp[n, p*sh + r*dh, m, c]      shape (N, P, Wp*R, C)
//
// xp is x zero-padded by (pt, pl) at the top/left (padding zeros are written, never read).
// x is read through element strides (any view). One thread per x_win element in memory order,
// grid-stride, 64-bit indices; consecutive threads write consecutive elements.

template <typename T, bool kNHWC>
__global__ void image_to_window(const T* __restrict__ x, T* __restrict__ x_win, i64 N, int C,
                                int H, int W, int P, int Wp, int R, int sh, int dh, int pt,
                                int pl, i64 xn, i64 xc, i64 xh, i64 xw) {
  const i64 total = N * C * P * (i64)Wp * R;
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < total;
       i += (i64)gridDim.x * blockDim.x) {
    i64 rest = i;
    int c, mr, p;
    if (kNHWC) {
      c = (int)(rest % C); rest /= C;
      mr = (int)(rest % ((i64)Wp * R)); rest /= (i64)Wp * R;
      p = (int)(rest % P); rest /= P;
    } else {
      mr = (int)(rest % ((i64)Wp * R)); rest /= (i64)Wp * R;
      p = (int)(rest % P); rest /= P;
      c = (int)(rest % C); rest /= C;
    }
    const i64 n = rest;
    const int h = p * sh + (mr % R) * dh - pt;
    const int col = mr / R - pl;
    T v{};  // +0.0 in every element type
    if (h >= 0 && h < H && col >= 0 && col < W) v = x[n * xn + c * xc + h * xh + col * xw];
    x_win[i] = v;
  }
}

// Backward data through window gradients (im2win.cuda.dgrad), window_to_image's GPU form for
// one group, NHWC: g[n, p, q, (r, s, c)] (Acc: float, double for double) is each output pixel's
// gradient times the filter, its window's gradient in w's order (cuBLAS's product of dy and w);
//
//   dx[n, h, v, c] = sum over r, then s, of g[n, p, q, r, s, c]
//                    for h = p*sh + r*dh - pt, v = q*sw + s*dw - pl, p < P, q < Q,
//
// summed in that fixed order in Acc and rounded once. The taps that reach row h are every
// tr-th (tr = sh / gcd(sh, dh)) from the first; likewise columns (ts). One thread per dx
// element of the images g holds, grid-stride, 64-bit offsets.
template <typename T, typename Acc>
__global__ void __launch_bounds__(256)
    window_to_image(const Acc* __restrict__ g, T* __restrict__ dx, i64 total, int H, int W,
                    int C, int P, int Q, int R, int S, int sh, int sw, int dh, int dw, int pt,
                    int pl, int tr, int ts) {
  const int RSC = R * S * C;
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < total;
       i += (i64)gridDim.x * blockDim.x) {
    const int c = (int)(i % C);
    i64 rest = i / C;
    const int v = (int)(rest % W);
    rest /= W;
    const int h = (int)(rest % H);
    const i64 n = rest / H;
    int r0 = -1, s0 = -1;
    for (int r = 0; r < R && r < tr && r0 < 0; ++r)
      if (((h + pt - r * dh) % sh + sh) % sh == 0) r0 = r;
    for (int s = 0; s < S && s < ts && s0 < 0; ++s)
      if (((v + pl - s * dw) % sw + sw) % sw == 0) s0 = s;
    Acc sum = 0;
    if (r0 >= 0 && s0 >= 0) {
      for (int r = r0; r < R; r += tr) {
        const int a = h + pt - r * dh;           // decreases with r: past row 0, no more
        if (a < 0) break;
        const int p = a / sh;
        if (p >= P) continue;
        for (int s = s0; s < S; s += ts) {
          const int b = v + pl - s * dw;
          if (b < 0) break;
          const int q = b / sw;
          if (q >= Q) continue;
          sum = add(sum, g[((n * P + p) * Q + q) * RSC + (r * S + s) * C + c]);
        }
      }
    }
    dx[i] = from_acc<T>(sum);
  }
}

// The NHWC window tensor for a GEMM over each pixel's whole run (plan.runs_plan):
// x_win[n, p, m*R*C + r*C + c] = xp[n, p*sh + r*dh, m, c], each of the N*P rows `pitch`
// elements apart (Wp*R*C rounded up to 16 bytes, the rest zeros, as more padding columns), so
// that pixel q's S*R*C-long run starts at q*sw*R*C, 16-byte aligned where sw*R*C*sizeof(T) is
// a multiple of 16 (plan.runs_refusal: sw*R*C % 4 == 0). A block a row (grid-stride over the
// rows) builds it in shared memory, then writes it out 16 bytes a store: a thread takes x's
// columns col = threadIdx.x + 256*i and for each of the R rows under the output row copies the
// column's C elements by 4-byte cp.async straight to their places (col + pl)*R*C + r*C + c
// (consecutive lanes read consecutive columns, along x's unit stride in NCHW and C apart in
// NHWC, and write R*C words apart: no bank conflict for odd R*C), zeros (the copy's) where the
// row is padding; no division in the loop. The positions no row writes (the padding columns
// and the pitch's tail) are zeroed once. 32-bit arithmetic in a row, 64-bit row offsets.
// WINDOW_RUN_ROW: the most elements of an output row (pitch <= it; plan checks): 32 KB, six
// blocks an SM. (Chunks of 4096 elements in two buffers, the next chunk's copies in flight
// while one is written, ran slower: H100, cv1, 174 us against 155; hopper.md step 25.)
constexpr int WINDOW_RUN_ROW = 8192;

// One element of x into the shared row by a 4-byte cp.async through L1 (x's rows are read
// again under the next output rows), zeros where !valid (nothing read from src).
__device__ __forceinline__ void window_copy4(void* dst, const void* src, bool valid) {
  constexpr int TB = 4;
  const unsigned to = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(to), "l"(src), "n"(TB),
               "r"(valid ? TB : 0));
}

template <typename T>
__global__ void __launch_bounds__(256)
    window_runs(const T* __restrict__ x, T* __restrict__ x_win, i64 rows, int P, int pitch,
                int H, int W, int C, int R, int sh, int dh, int pt, int pl, i64 xn, i64 xc,
                i64 xh, i64 xw) {
  static_assert(sizeof(T) == 4, "4-byte elements: a cp.async each");
  constexpr int VEC = 16 / (int)sizeof(T);
  __shared__ __align__(16) T row[WINDOW_RUN_ROW];
  const int RC = R * C;
  for (int e = threadIdx.x; e < pitch; e += 256) {         // never written by a row's copy
    const int m = e / RC;
    if (m < pl || m >= pl + W) row[e] = T{};
  }
  for (i64 np = blockIdx.x; np < rows; np += gridDim.x) {
    const i64 n = np / P;
    const int p = (int)(np - n * P);
    for (int r = 0; r < R; ++r) {
      const int h = p * sh + r * dh - pt;
      const bool in = h >= 0 && h < H;                     // block-uniform
      const T* src = x + n * xn + (i64)(in ? h : 0) * xh;
      for (int col = threadIdx.x; col < W; col += 256) {
        T* to = row + (col + pl) * RC + r * C;
        const T* from = src + (i64)col * xw;
        for (int c = 0; c < C; ++c) window_copy4(to + c, from + c * xc, in);
      }
    }
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();
    T* out = x_win + np * pitch;
    for (int e = threadIdx.x * VEC; e < pitch; e += 256 * VEC)
      *reinterpret_cast<uint4*>(out + e) = *reinterpret_cast<const uint4*>(row + e);
    __syncthreads();                                       // the row is reused by the next
  }
}
