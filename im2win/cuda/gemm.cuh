// gemm.cuh: what the two im2win GEMM kernels (im2win_conv.cu, im2win_mma.cu) share: the
// launch geometry, the reduction table, and the operand addressing
//   B[t, pixel] = src[base(pixel) + off(t)]
// with base(pixel) 64-bit and computed once per thread, and off(t) and the taps (r*dh, s*dw)
// from the table (or computed, where offsets do not fit 32 bits or the table is switched off).
//
// The table is a device buffer owned by the launch's plan, passed as a kernel argument
// (`taps`: taps[t] = {off(t), (r*dh) << 16 | s*dw}, zero past the reduction up to a multiple of
// 32 entries) and read through the read-only data cache.
// Nothing here is module-global state, so launches of different problems never wait for each
// other and a captured CUDA graph replays with its own tables.

// Passed by value; Python builds the same layout as a NumPy structured scalar
// (im2win/cuda/launch.py, GEOMETRY): the 64-bit fields first, so there is no inner padding.
struct Geometry {
  i64 npix;                   // N*P*Q pixels in this launch
  i64 sn, sg, sp, sq, base0;  // base(n, g, p, q) = n*sn + g*sg + p*sp + q*sq + base0
  i64 sc, sr, ss;             // off(t) = c*sc + r*sr + s*ss (table-free path)
  int K, Kg, red, redp;       // filters, filters per group, reduction length, and its padded
                              // length (the Tensor-Core kernel's filter row length)
  int PQ, Q;
  int sh, sw, pt, pl, H, W;   // fused: h0 = p*sh - pt, w0 = q*sw - pl, bounds H x W
  int Cg, R, S, dh, dw;       // table-free decomposition of t
  int y_nchw;                 // 1: y written (n, k, p, q) by the wgmma or ffma kernel from
                              // NHWC x (an NCHW problem's NHWC twin writes the NCHW y itself)
};

struct Pixel {
  i64 base;
  int h0, w0;
  bool valid;
};

__device__ __forceinline__ Pixel pixel_at(i64 j, int g, const Geometry& geo) {
  Pixel px;
  px.valid = j < geo.npix;
  if (!px.valid) j = 0;
  const i64 n = j / geo.PQ;
  const int pq = (int)(j - n * geo.PQ);
  const int p = pq / geo.Q, q = pq - p * geo.Q;
  px.base = n * geo.sn + g * geo.sg + p * geo.sp + q * geo.sq + geo.base0;
  px.h0 = p * geo.sh - geo.pt;
  px.w0 = q * geo.sw - geo.pl;
  return px;
}

struct Tap {
  i64 off;
  int dr, ds;
};

__device__ __forceinline__ Tap tap_of(int2 entry) {
  Tap tap;
  tap.off = entry.x;
  tap.dr = entry.y >> 16;
  tap.ds = entry.y & 0xffff;
  return tap;
}

// The N table entries of t0 .. t0 + N - 1 in 16-byte loads (N even, t0 even); the table is
// padded with zeros to whole 32-entry slices, so loads within a slice never leave it.
template <int N>
__device__ __forceinline__ void taps_of(const int2* __restrict__ taps, int t0, int2 (&out)[N]) {
  static_assert(N % 2 == 0, "entries come in pairs");
  const int4* p = reinterpret_cast<const int4*>(taps + t0);
#pragma unroll
  for (int q = 0; q < N / 2; ++q) {
    const int4 v = __ldg(p + q);
    out[2 * q] = make_int2(v.x, v.y);
    out[2 * q + 1] = make_int2(v.z, v.w);
  }
}

template <bool kNHWC, bool kWindowOrder, bool kTable>
__device__ __forceinline__ Tap tap_at(int t, const int2* __restrict__ taps, const Geometry& geo) {
  Tap tap;
  if (kTable) {
    tap = tap_of(__ldg(taps + t));
  } else {
    int c, rs, r, s;
    if (kNHWC) {
      rs = t / geo.Cg;
      c = t - rs * geo.Cg;
    } else {
      c = t / (geo.R * geo.S);
      rs = t - c * geo.R * geo.S;
    }
    if (kWindowOrder) {  // rs = s*R + r
      s = rs / geo.R;
      r = rs - s * geo.R;
    } else {             // rs = r*S + s
      r = rs / geo.S;
      s = rs - r * geo.S;
    }
    tap.off = c * geo.sc + r * geo.sr + s * geo.ss;
    tap.dr = r * geo.dh;
    tap.ds = s * geo.dw;
  }
  return tap;
}

// Split-K's second launch (im2win_wgmma.cu's and im2win_ffma.cu's split forms): y[i] = the
// sum over the splits, in order, of partial[split][i], plus bias[i % K]; y (N*P*Q, K). The
// same bits every run (no atomics).
template <typename T>
__global__ void split_reduce(const float* __restrict__ partial, const T* __restrict__ bias,
                             T* __restrict__ y, i64 total, int K, int splits) {
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < total;
       i += (i64)gridDim.x * blockDim.x) {
    float v = 0.f;
    for (int s = 0; s < splits; ++s) v = add(v, partial[s * total + i]);
    if (bias) v = add(v, to_acc(bias[i % K], 0.f));
    y[i] = from_acc<T>(v);
  }
}

// split_reduce into an NCHW y (the NHWC twin of an NCHW problem: Geometry.y_nchw): the same
// sums, y[n, k, pq] for pixel n*PQ + pq. A block of 32 x 8 threads sums a tile of 32 pixels x
// 32 filters with reads along k (coalesced in the partial sums' [pixel][filter] order),
// passes it through shared memory, and writes along the pixels (coalesced in y's rows): no
// channels-last y and no transpose after the sum. Grid: (ceil(pixels / 32), ceil(K / 32)).
template <typename T>
__global__ void __launch_bounds__(256) split_reduce_nchw(
    const float* __restrict__ partial, const T* __restrict__ bias, T* __restrict__ y,
    i64 total, int K, int splits, i64 PQ) {
  __shared__ float tile[32][33];
  const i64 pixels = total / K, p0 = blockIdx.x * (i64)32;
  const int k0 = blockIdx.y * 32, tx = threadIdx.x, ty = threadIdx.y;
  const int k = k0 + tx;
  float v[4] = {0.f, 0.f, 0.f, 0.f};
  for (int s = 0; s < splits; ++s)               // the four pixels' loads in flight together
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const i64 pix = p0 + ty + 8 * i;
      if (pix < pixels && k < K) v[i] = add(v[i], partial[s * total + pix * K + k]);
    }
  const float b = bias && k < K ? to_acc(bias[k], 0.f) : 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) tile[ty + 8 * i][tx] = bias ? add(v[i], b) : v[i];
  __syncthreads();
  const i64 pix = p0 + tx;
  if (pix >= pixels) return;
  const i64 n = pix / PQ, pq = pix - n * PQ;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int k = k0 + ty + 8 * i;
    if (k < K) y[(n * K + k) * PQ + pq] = from_acc<T>(tile[tx][ty + 8 * i]);
  }
}
