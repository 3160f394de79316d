// depthwise.cu: depthwise and channel-multiplier convolutions (groups = C, K = m*C, C/G = 1) on
// CUDA cores, and in NHWC grouped convolutions of a few channels per group (K = C, CG = C/G =
// K/G of 2, 4 or 8, within one thread's channel vector). Each output channel k reads one input
// channel, k / m (or the CG channels of its group), so there is little or no reduction over
// channels and nothing for a GEMM to do: the layer is memory-bound, and these kernels aim to
// move each input and output byte about once.
//
//   y[n,k,p,q] = bias[k] + sum_{r<R, s<S} x[n, k/m, p*sh + r*dh - pt, q*sw + s*dw - pl] * w[k,0,r,s]
//   (groups of CG: sum also over u < CG of x[n, (k/CG)*CG + u, ...] * w[k,r,s,u], u innermost)
//
// x is read through element strides (any view); w is contiguous ((K, R, S, 1) in NHWC,
// (K, 1, R, S) in NCHW: w[k*R*S + r*S + s] either way); y is contiguous in the layout's order.
// Offsets are 64-bit.
//
// A thread computes QT consecutive output columns of one output row (and VEC channels in NHWC).
// Where the filter width S_ and the column stride SW are compile-time (S_ > 0: widths 3, 5, 7,
// column dilation 1), the thread reads each input row's span of (QT-1)*SW + S_ columns into
// registers once (in T) and takes every tap from there: the window of the QT outputs, in window order
// (r, then s), loaded once instead of once per tap. S_ = 0 is the general form (any width,
// stride and dilation): each tap read where it is used.
//
// NHWC (depthwise_nhwc): channels across the lanes of a block row (blockDim.x channel vectors
// of VEC channels each; VEC = 16 bytes of T where m = 1 and x's channels are contiguous and
// aligned, else 1; 16-byte stores where y is aligned); the block's rows take the (output row, column group) items of one image,
// so every thread has work however small the image. The block's filters sit in shared memory
// as [r*S + s][channel], read once per block: the grid is sized to a few waves and its blocks
// loop over the rest of the items and images.
//
// NCHW (depthwise_nchw): consecutive threads along the column groups of the (filter, output
// row, column group) items of one image (coalesced row reads; small maps still fill a block);
// the filter's taps are read through the cache.

template <typename T, int VEC> struct Vec {
  T v[VEC];
};

// One load or store of VEC elements: a 16- or 8-byte access where the vector is that wide
// (the caller guarantees the alignment), element by element otherwise.
template <typename T, int VEC>
__device__ __forceinline__ Vec<T, VEC> load_vec(const T* p) {
  Vec<T, VEC> out;
  if constexpr (sizeof(T) * VEC == 16) {
    *reinterpret_cast<uint4*>(out.v) = *reinterpret_cast<const uint4*>(p);
  } else if constexpr (sizeof(T) * VEC == 8) {
    *reinterpret_cast<uint2*>(out.v) = *reinterpret_cast<const uint2*>(p);
  } else {
#pragma unroll
    for (int v = 0; v < VEC; ++v) out.v[v] = p[v];
  }
  return out;
}

template <typename T, int VEC>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, VEC>& a, bool aligned) {
  if (sizeof(T) * VEC == 16 && aligned) {
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(a.v);
  } else if (sizeof(T) * VEC == 8 && aligned) {
    *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(a.v);
  } else {
#pragma unroll
    for (int v = 0; v < VEC; ++v) p[v] = a.v[v];
  }
}

// acc[qi][v] += input vector a's CG channels of output channel v's group times fs[v][u].
template <typename T, typename Acc, int VEC, int CG, int QT>
__device__ __forceinline__ void fma_vector(Acc (&acc)[QT][VEC], int qi, const Vec<T, VEC>& a,
                                           const Acc (&fs)[VEC][CG]) {
  Acc av[VEC];
#pragma unroll
  for (int v = 0; v < VEC; ++v) av[v] = to_acc(a.v[v], Acc());
#pragma unroll
  for (int v = 0; v < VEC; ++v)
#pragma unroll
    for (int u = 0; u < CG; ++u) acc[qi][v] = madd(av[(v / CG) * CG + u], fs[v][u], acc[qi][v]);
}

// acc[qi][v] += the taps of input row `row` (a pointer to its column 0, channel kv) for output
// columns q0 + qi; taps outside [0, W) read as zero. `f(s, fs)` sets fs to tap s's filters of
// the thread's VEC output channels (CG each).
template <typename T, typename Acc, int VEC, int CG, int QT, int S_, int SW, typename Filter>
__device__ __forceinline__ void accumulate_row(Acc (&acc)[QT][VEC], const T* row, i64 xw, int W,
                                               int q0, int S, int sw, int dw, int pl,
                                               const Filter& f) {
  if constexpr (S_ > 0) {                  // the row's span once, in registers
    constexpr int J = (QT - 1) * SW + S_;
    Vec<T, VEC> win[J];                    // kept in T (half the registers of Acc for 16-bit T)
    const int c0 = q0 * SW - pl;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int col = c0 + j;
      if (col >= 0 && col < W) {
        win[j] = load_vec<T, VEC>(row + col * xw);
      } else {
#pragma unroll
        for (int v = 0; v < VEC; ++v) win[j].v[v] = from_acc<T>(Acc(0));
      }
    }
#pragma unroll
    for (int s = 0; s < S_; ++s) {
      Acc fs[VEC][CG];
      f(s, fs);
#pragma unroll
      for (int qi = 0; qi < QT; ++qi) fma_vector<T, Acc, VEC, CG, QT>(acc, qi, win[qi * SW + s], fs);
    }
  } else {                                 // any width, stride and dilation: tap by tap
    for (int s = 0; s < S; ++s) {
      Acc fs[VEC][CG];
      f(s, fs);
#pragma unroll
      for (int qi = 0; qi < QT; ++qi) {
        const int col = (q0 + qi) * sw + s * dw - pl;
        if (col < 0 || col >= W) continue;
        fma_vector<T, Acc, VEC, CG, QT>(acc, qi, load_vec<T, VEC>(row + col * xw), fs);
      }
    }
  }
}

template <typename T, typename Acc, int VEC, int CG, int QT, int S_, int SW>
__global__ void __launch_bounds__(256)
    depthwise_nhwc(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                   T* __restrict__ y, int N, int C, int H, int W, int K, int m, int R, int S,
                   int P, int Q, int sh, int sw, int dh, int dw, int pt, int pl,
                   i64 xn, i64 xc, i64 xh, i64 xw) {
  extern __shared__ __align__(16) unsigned char depthwise_smem[];
  T* wsm = reinterpret_cast<T*>(depthwise_smem);   // [R*S][KT][CG]
  const int KT = blockDim.x * VEC, RS = R * S;      // channels of this block
  const int k0 = blockIdx.x * KT;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x, threads = blockDim.x * blockDim.y;
  for (int i = tid; i < RS * KT * CG; i += threads) {   // w (K, R, S, CG) in its own order
    const int kk = i / (RS * CG), rest = i - kk * RS * CG;
    const int rs = rest / CG, u = rest - rs * CG;
    const int k = k0 + kk;
    wsm[(rs * KT + kk) * CG + u] = k < K ? w[(i64)k * RS * CG + rest] : from_acc<T>(Acc(0));
  }
  __syncthreads();
  const int kv = k0 + threadIdx.x * VEC;            // this thread's first output channel
  if (kv >= K) return;
  const int nv = min(VEC, K - kv);                  // VEC > 1 only where K % VEC == 0
  Acc b[VEC];
#pragma unroll
  for (int v = 0; v < VEC; ++v) b[v] = bias && v < nv ? to_acc(bias[kv + v], Acc()) : Acc(0);
  const int QG = (Q + QT - 1) / QT, items = P * QG; // (output row, column group) per image
  const T* wk = wsm + threadIdx.x * VEC * CG;
  // An out= one element off a vector's width: scalar stores (every vector's offset is a
  // multiple of VEC elements, so y's alignment is each store's).
  const bool y_aligned = reinterpret_cast<unsigned long long>(y) % (sizeof(T) * VEC) == 0;

  for (i64 n = blockIdx.z; n < N; n += gridDim.z) {
    for (int item = blockIdx.y * blockDim.y + threadIdx.y; item < items;
         item += gridDim.y * blockDim.y) {
      const int p = item / QG, q0 = (item - p * QG) * QT;
      Acc acc[QT][VEC];
#pragma unroll
      for (int qi = 0; qi < QT; ++qi)
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc[qi][v] = b[v];
      for (int r = 0; r < R; ++r) {
        const int h = p * sh + r * dh - pt;
        if (h < 0 || h >= H) continue;
        const T* row = x + n * xn + h * xh + (i64)(kv / m) * xc;
        const T* taps = wk + r * S * KT * CG;
        auto f = [&](int s, Acc (&fs)[VEC][CG]) {   // the tap's VEC*CG filters: CG vector loads
#pragma unroll
          for (int j = 0; j < CG; ++j) {
            const Vec<T, VEC> t = load_vec<T, VEC>(taps + s * KT * CG + j * VEC);
#pragma unroll
            for (int i = 0; i < VEC; ++i) fs[(j * VEC + i) / CG][(j * VEC + i) % CG] = to_acc(t.v[i], Acc());
          }
        };
        accumulate_row<T, Acc, VEC, CG, QT, S_, SW>(acc, row, xw, W, q0, S, sw, dw, pl, f);
      }
#pragma unroll
      for (int qi = 0; qi < QT; ++qi) {
        if (q0 + qi >= Q) continue;
        T* out = y + ((n * P + p) * Q + q0 + qi) * K + kv;
        Vec<T, VEC> o;
#pragma unroll
        for (int v = 0; v < VEC; ++v) o.v[v] = from_acc<T>(acc[qi][v]);
        store_vec<T, VEC>(out, o, y_aligned);
      }
    }
  }
}

template <typename T, typename Acc, int QT, int S_, int SW>
__global__ void __launch_bounds__(256)
    depthwise_nchw(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                   T* __restrict__ y, int N, int C, int H, int W, int K, int m, int R, int S,
                   int P, int Q, int sh, int sw, int dh, int dw, int pt, int pl,
                   i64 xn, i64 xc, i64 xh, i64 xw) {
  const int QG = (Q + QT - 1) / QT, per_filter = P * QG;
  const int items = K * per_filter;                 // < 2^31: checked by the planner
  for (i64 n = blockIdx.y; n < N; n += gridDim.y) {
    for (int item = blockIdx.x * blockDim.x + threadIdx.x; item < items;
         item += gridDim.x * blockDim.x) {
      const int k = item / per_filter, pq = item - k * per_filter;
      const int p = pq / QG, q0 = (pq - p * QG) * QT;
      const T* plane = x + n * xn + (i64)(k / m) * xc;
      const T* filter = w + (i64)k * R * S;
      Acc acc[QT][1];
      const Acc b = bias ? to_acc(bias[k], Acc()) : Acc(0);
#pragma unroll
      for (int qi = 0; qi < QT; ++qi) acc[qi][0] = b;
      for (int r = 0; r < R; ++r) {
        const int h = p * sh + r * dh - pt;
        if (h < 0 || h >= H) continue;
        const T* taps = filter + r * S;
        auto f = [&](int s, Acc (&fs)[1][1]) { fs[0][0] = to_acc(taps[s], Acc()); };
        accumulate_row<T, Acc, 1, 1, QT, S_, SW>(acc, plane + h * xh, xw, W, q0, S, sw, dw, pl, f);
      }
      T* out = y + ((n * K + k) * P + p) * Q + q0;
#pragma unroll
      for (int qi = 0; qi < QT; ++qi)
        if (q0 + qi < Q) out[qi] = from_acc<T>(acc[qi][0]);
    }
  }
}
