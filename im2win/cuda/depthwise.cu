// depthwise.cu: depthwise and channel-multiplier convolutions (groups = C, K = m*C, C/G = 1) on
// CUDA cores. Each output channel k reads one input channel, k / m, so there is no reduction
// over channels and nothing for a GEMM to do: the layer is memory-bound, and these kernels aim
// to move each input and output byte about once.
//
//   y[n,k,p,q] = bias[k] + sum_{r<R, s<S} x[n, k/m, p*sh + r*dh - pt, q*sw + s*dw - pl] * w[k,0,r,s]
//
// x is read through element strides (any view); w is contiguous ((K, R, S, 1) in NHWC,
// (K, 1, R, S) in NCHW: w[k*R*S + r*S + s] either way); y is contiguous in the layout's order.
// Offsets are 64-bit.
//
// NHWC (depthwise_nhwc): channels across the lanes of a block row (blockDim.x channel vectors
// of VEC channels each; VEC = 16 bytes of T where m = 1 and x's channels are contiguous and
// aligned, else 1), output columns down its rows, QT consecutive columns per thread (their
// accumulators in registers). The block's filters sit in shared memory as [r*S + s][channel],
// so a thread reads its VEC filter values of a tap in one vector. Taps outside x read as zero.
//
// NCHW (depthwise_nchw): one output per thread, consecutive threads along p*Q + q (coalesced
// reads of each tap's row), the (image, filter) pair per block, so the filter's taps are
// uniform across the block.

template <typename T, int VEC> struct Vec {
  T v[VEC];
};

template <typename T, int VEC>
__device__ __forceinline__ Vec<T, VEC> load_vec(const T* p) {
  Vec<T, VEC> out;
  if constexpr (sizeof(T) * VEC == 16) {
    *reinterpret_cast<uint4*>(out.v) = *reinterpret_cast<const uint4*>(p);
  } else {
#pragma unroll
    for (int v = 0; v < VEC; ++v) out.v[v] = p[v];
  }
  return out;
}

template <typename T, typename Acc, int VEC, int QT>
__global__ void __launch_bounds__(256)
    depthwise_nhwc(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                   T* __restrict__ y, int N, int C, int H, int W, int K, int m, int R, int S,
                   int P, int Q, int sh, int sw, int dh, int dw, int pt, int pl,
                   i64 xn, i64 xc, i64 xh, i64 xw) {
  extern __shared__ __align__(16) unsigned char depthwise_smem[];
  T* wsm = reinterpret_cast<T*>(depthwise_smem);   // [R*S][KT]
  const int KT = blockDim.x * VEC, RS = R * S;      // channels of this block
  const int k0 = blockIdx.x * KT;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x, threads = blockDim.x * blockDim.y;
  for (int i = tid; i < RS * KT; i += threads) {    // w read in its own order (coalesced)
    const int kk = i / RS, rs = i - kk * RS;
    const int k = k0 + kk;
    wsm[rs * KT + kk] = k < K ? w[(i64)k * RS + rs] : from_acc<T>(Acc(0));
  }
  __syncthreads();
  const int kv = k0 + threadIdx.x * VEC;            // this thread's first output channel
  const int q0 = (blockIdx.y * blockDim.y + threadIdx.y) * QT;
  if (kv >= K || q0 >= Q) return;
  const int nv = min(VEC, K - kv);                  // VEC > 1 only where K % VEC == 0
  Acc b[VEC];
#pragma unroll
  for (int v = 0; v < VEC; ++v) b[v] = bias && v < nv ? to_acc(bias[kv + v], Acc()) : Acc(0);

  for (i64 np = blockIdx.z; np < (i64)N * P; np += gridDim.z) {
    const i64 n = np / P;
    const int p = (int)(np - n * P);
    Acc acc[QT][VEC];
#pragma unroll
    for (int qi = 0; qi < QT; ++qi)
#pragma unroll
      for (int v = 0; v < VEC; ++v) acc[qi][v] = b[v];
    for (int r = 0; r < R; ++r) {
      const int h = p * sh + r * dh - pt;
      if (h < 0 || h >= H) continue;
      const T* row = x + n * xn + h * xh + (i64)(kv / m) * xc;
      for (int s = 0; s < S; ++s) {
        const Vec<T, VEC> f = load_vec<T, VEC>(wsm + (r * S + s) * KT + threadIdx.x * VEC);
#pragma unroll
        for (int qi = 0; qi < QT; ++qi) {
          const int col = (q0 + qi) * sw + s * dw - pl;
          if (q0 + qi >= Q || col < 0 || col >= W) continue;
          if (VEC > 1) {
            const Vec<T, VEC> a = load_vec<T, VEC>(row + col * xw);
#pragma unroll
            for (int v = 0; v < VEC; ++v) acc[qi][v] += to_acc(a.v[v], Acc()) * to_acc(f.v[v], Acc());
          } else {
            acc[qi][0] += to_acc(row[col * xw], Acc()) * to_acc(f.v[0], Acc());
          }
        }
      }
    }
#pragma unroll
    for (int qi = 0; qi < QT; ++qi) {
      if (q0 + qi >= Q) continue;
      T* out = y + ((np * Q) + q0 + qi) * K + kv;
      if (VEC > 1) {
        Vec<T, VEC> o;
#pragma unroll
        for (int v = 0; v < VEC; ++v) o.v[v] = from_acc<T>(acc[qi][v]);
        if constexpr (sizeof(T) * VEC == 16) *reinterpret_cast<uint4*>(out) = *reinterpret_cast<uint4*>(o.v);
        else
#pragma unroll
          for (int v = 0; v < VEC; ++v) out[v] = o.v[v];
      } else {
        out[0] = from_acc<T>(acc[qi][0]);
      }
    }
  }
}

template <typename T, typename Acc>
__global__ void __launch_bounds__(256)
    depthwise_nchw(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                   T* __restrict__ y, int N, int C, int H, int W, int K, int m, int R, int S,
                   int P, int Q, int sh, int sw, int dh, int dw, int pt, int pl,
                   i64 xn, i64 xc, i64 xh, i64 xw) {
  const int PQ = P * Q, blocks = (PQ + 255) / 256;   // blocks per (image, filter) pair
  for (i64 b = blockIdx.x; b < (i64)N * K * blocks; b += gridDim.x) {
    const i64 nk = b / blocks;
    const int pq = (int)(b - nk * blocks) * 256 + threadIdx.x;
    if (pq >= PQ) continue;
    const i64 n = nk / K;
    const int k = (int)(nk - n * K), p = pq / Q, q = pq - p * Q;
    const T* plane = x + n * xn + (i64)(k / m) * xc;
    const T* filter = w + (i64)k * R * S;
    Acc acc = bias ? to_acc(bias[k], Acc()) : Acc(0);
    for (int r = 0; r < R; ++r) {
      const int h = p * sh + r * dh - pt;
      if (h < 0 || h >= H) continue;
      for (int s = 0; s < S; ++s) {
        const int col = q * sw + s * dw - pl;
        if (col < 0 || col >= W) continue;
        acc += to_acc(plane[h * xh + col * xw], Acc()) * to_acc(filter[r * S + s], Acc());
      }
    }
    y[nk * PQ + pq] = from_acc<T>(acc);
  }
}
