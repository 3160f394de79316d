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
//
// Rows in order (depthwise_rows, below depthwise_nchw; NHWC and NCHW): each thread walks the
// input rows under a strip of output rows once, top to bottom, adding each row to every
// output row of the strip it lies under; x is read once per strip instead of once per output
// row and filter row.
//
// NHWC small maps (depthwise_tile_nhwc, after depthwise_rows: K = C, 16-byte channel vectors,
// no dilation): a block copies its output tile's input window into shared memory and its
// threads take their register windows from there.
//
// NHWC 16-bit types at stride 1 on Tensor Cores (depthwise_mma_nhwc and, for small maps,
// depthwise_mma_small_nhwc, at the end of this file): a channel's filter row as a banded
// matrix, one mma.sync per filter row and 16 x 8 outputs.

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
  } else if constexpr (sizeof(T) * VEC == 4 && VEC > 1) {
    *reinterpret_cast<unsigned*>(out.v) = *reinterpret_cast<const unsigned*>(p);
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
  } else if (sizeof(T) * VEC == 4 && VEC > 1 && aligned) {
    *reinterpret_cast<unsigned*>(p) = *reinterpret_cast<const unsigned*>(a.v);
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

// depthwise_rows: groups = C = K for filters of R_ x S_ at strides SH x SW (no dilation), in
// NHWC where x's channels are contiguous and its vectors of TV channels aligned (the planner
// checks), and in NCHW (TV = 1, kNCHW). A block owns a tile of channels of a strip of PS
// output rows of image blockIdx.z (and + gridDim.z, ...); each thread takes TV channels of
// QT consecutive output columns. NHWC: threadIdx.x the channels, threadIdx.y the column
// groups (then + blockDim.y, ...): a warp reads consecutive channels of a pixel. NCHW:
// threadIdx.x the column groups (then + blockDim.x, ...), threadIdx.y the channel: a warp
// reads consecutive columns of a row.
//
// A thread reads the strip's input rows in order, each once: the row's span of (QT-1)*SW +
// S_ columns (zeros outside [0, W)), converted to Acc, is added to each output row p of the
// strip that lies over it, with filter row r = h + pt - p*SH, into that output row's
// accumulators. Within an output row the products run in window order (r, then s). An output
// row is open in NS = ceil(R_ / SH) slots at most, p % NS its slot (the rows' loop unrolled
// over NS*SH rows, so that every slot is a register); when its last input row (r = R_-1) is
// added it is stored and its slot starts again at the bias; output rows outside the strip
// take no products. The filters sit in shared memory as Acc, [r*S_ + s][channel]: one vector
// load a tap.
//
// PF > 0 (NHWC): each thread copies its rows' spans PF rows ahead of the row it adds, by
// cp.async (zeros outside [0, W)) into a ring of PF slots of its own in shared memory after
// the filters, [slot][j][thread] (a warp's accesses consecutive), so PF rows' loads are in
// flight while it computes; it waits for its own copies only (cp.async.wait_group), and a
// slot is copied into again only after the row read from it has been used.

template <int TB> struct RawBytes;
template <> struct RawBytes<16> { typedef uint4 type; };
template <> struct RawBytes<8> { typedef uint2 type; };
template <> struct RawBytes<4> { typedef unsigned type; };

// One cp.async of TB bytes (4, 8 or 16) from global to shared memory, through L1 where kL1
// (cached for neighbours that read the same bytes; else 16 bytes, L2 only); zeros where !valid
// (nothing read from src).
template <int TB, bool kL1>
__device__ __forceinline__ void depthwise_copy(void* dst, const void* src, bool valid) {
  const unsigned to = (unsigned)__cvta_generic_to_shared(dst);
  if constexpr (kL1) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(to), "l"(src),
                 "n"(TB), "r"(valid ? TB : 0));
  } else {
    static_assert(TB == 16, "cp.async.cg copies 16 bytes");
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(src),
                 "r"(valid ? 16 : 0));
  }
}

// depthwise_rows's copies ahead: input row h's span of J pixels of TV channels into `to`,
// `step` bytes apart, where h is a row of x at most h_last (nothing else); `spans` points at
// row 0's span (column c0, perhaps outside x), pixels `xw` elements apart, pixel j copied only
// where bit j of `inside` is set (its column in [0, W)), zeros elsewhere; one commit group
// either way.
template <typename T, int TV, int J>
__device__ __forceinline__ void depthwise_rows_copy(unsigned char* to, int step, const T* spans,
                                                    int h, int h_last, int H, i64 xh, i64 xw,
                                                    unsigned inside) {
  if (h <= h_last && h >= 0 && h < H) {
    const T* span = spans + h * xh;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const bool valid = (inside >> j) & 1;
      depthwise_copy<TV * sizeof(T), true>(to + j * step, span + (valid ? j * xw : 0), valid);
    }
  }
  asm volatile("cp.async.commit_group;\n" ::);
}

template <typename T, typename Acc, int TV, int R_, int S_, int SH, int SW, int QT, bool kNCHW,
          int PF = 0>
__global__ void __launch_bounds__(256)
    depthwise_rows(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                   T* __restrict__ y, int N, int C, int H, int W, int P, int Q, int pt, int pl,
                   int PS, i64 xn, i64 xc, i64 xh, i64 xw) {
  constexpr int RS = R_ * S_, NS = (R_ + SH - 1) / SH, PERIOD = NS * SH;
  constexpr int J = (QT - 1) * SW + S_, LIFT = R_ * SH;
  constexpr int TB = TV * sizeof(T);                          // a thread's bytes a pixel
  extern __shared__ __align__(16) unsigned char depthwise_smem[];
  Acc* wsm = reinterpret_cast<Acc*>(depthwise_smem);          // [RS][KT]
  static_assert(!kNCHW || TV == 1, "NCHW: a channel a thread");
  static_assert(PF == 0 || (!kNCHW && (TB == 4 || TB == 8 || TB == 16)),
                "the copies ahead: NHWC vectors of 4, 8 or 16 bytes");
  const int lane = kNCHW ? threadIdx.y : threadIdx.x;         // the thread's channels
  const int group = kNCHW ? threadIdx.x : threadIdx.y, groups = kNCHW ? blockDim.x : blockDim.y;
  const int KT = (kNCHW ? blockDim.y : blockDim.x) * TV, k0 = blockIdx.x * KT;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x, threads = blockDim.x * blockDim.y;
  for (int i = tid; i < RS * KT; i += threads) {              // w's block in order
    const int kk = i / RS, rs = i - kk * RS, k = k0 + kk;
    wsm[rs * KT + kk] = k < C ? to_acc(w[(i64)k * RS + rs], Acc()) : Acc(0);
  }
  __syncthreads();
  const int kt = lane * TV, k = k0 + kt;
  if (k >= C) return;                                         // C is a multiple of TV
  Acc b[TV];
#pragma unroll
  for (int v = 0; v < TV; ++v) b[v] = bias ? to_acc(bias[k + v], Acc()) : Acc(0);
  const int p0 = blockIdx.y * PS, pe = min(P, p0 + PS);       // the strip's output rows
  const int h_first = p0 * SH - pt, h_last = (pe - 1) * SH - pt + R_ - 1;
  const bool y_aligned = reinterpret_cast<unsigned long long>(y) % (sizeof(T) * TV) == 0;
  // PF > 0: the threads' ring, [PF][J][threads] of TB bytes, 16-byte aligned after the filters
  auto ring = [&](int slot, int j) {
    return depthwise_smem + (RS * KT * sizeof(Acc) + 15) / 16 * 16 +
           ((slot * J + j) * threads + tid) * TB;
  };

  for (i64 n = blockIdx.z; n < N; n += gridDim.z) {
    const T* xb = x + n * xn + (kNCHW ? k * xc : k);          // NHWC: xc = 1
    for (int q0 = group * QT; q0 < Q; q0 += groups * QT) {
      const int c0 = q0 * SW - pl;
      Acc acc[NS][QT][TV];
#pragma unroll
      for (int o = 0; o < NS; ++o)
#pragma unroll
        for (int qi = 0; qi < QT; ++qi)
#pragma unroll
          for (int v = 0; v < TV; ++v) acc[o][qi][v] = b[v];
      int at = 0;                                             // row h's slot in the ring
      unsigned inside = 0;                                    // PF > 0: the span's columns in x
      const T* spans = PF > 0 ? xb + c0 * xw : xb;            // ... and row 0's span
      if constexpr (PF > 0) {                                 // rows h_first .. + PF - 1
#pragma unroll
        for (int j = 0; j < J; ++j) inside |= (c0 + j >= 0 && c0 + j < W) << j;
#pragma unroll
        for (int f = 0; f < PF; ++f)
          depthwise_rows_copy<T, TV, J>(ring(f, 0), threads * TB, spans, h_first + f, h_last, H,
                                        xh, xw, inside);
      }
      for (int hb = h_first; hb <= h_last; hb += PERIOD) {
        const int base = (hb - h_first) / SH;                 // a multiple of NS
#pragma unroll
        for (int i = 0; i < PERIOD; ++i) {
          const int h = hb + i;
          if (h > h_last) break;
          if constexpr (PF > 0) asm volatile("cp.async.wait_group %0;\n" ::"n"(PF - 1));
          if (h >= 0 && h < H) {
            Acc win[J][TV];
            if constexpr (PF > 0) {
              typedef typename RawBytes<TB>::type Raw;
#pragma unroll
              for (int j = 0; j < J; ++j) {
                const Raw raw = *reinterpret_cast<const Raw*>(ring(at, j));
                const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
                for (int v = 0; v < TV; ++v) win[j][v] = to_acc(e[v], Acc());
              }
            } else {
              const T* row = xb + h * xh;
#pragma unroll
              for (int j = 0; j < J; ++j) {
                const int col = c0 + j;
                if (col >= 0 && col < W) {
                  const Vec<T, TV> a = load_vec<T, TV>(row + col * xw);
#pragma unroll
                  for (int v = 0; v < TV; ++v) win[j][v] = to_acc(a.v[v], Acc());
                } else {
#pragma unroll
                  for (int v = 0; v < TV; ++v) win[j][v] = Acc(0);
                }
              }
            }
#pragma unroll
            for (int r = 0; r < R_; ++r) {                    // output row p: h = p*SH - pt + r
              const int d = i - r + LIFT;
              if (d % SH != 0) continue;
              const int pr = base + d / SH - R_;              // p - p0
              if (pr < 0 || p0 + pr >= pe) continue;
              const int slot = ((d / SH - R_) % NS + NS) % NS;
#pragma unroll
              for (int s = 0; s < S_; ++s) {
                const Vec<Acc, TV> f = load_vec<Acc, TV>(wsm + (r * S_ + s) * KT + kt);
#pragma unroll
                for (int qi = 0; qi < QT; ++qi)
#pragma unroll
                  for (int v = 0; v < TV; ++v)
                    acc[slot][qi][v] = madd(win[qi * SW + s][v], f.v[v], acc[slot][qi][v]);
              }
            }
          }
          if constexpr (PF > 0) {                             // row h's slot has been used
            depthwise_rows_copy<T, TV, J>(ring(at, 0), threads * TB, spans, h + PF, h_last, H, xh,
                                          xw, inside);
            at = at + 1 == PF ? 0 : at + 1;
          }
          const int d = i - (R_ - 1) + LIFT;                  // the output row h completes
          if (d % SH == 0) {
            const int pr = base + d / SH - R_, slot = ((d / SH - R_) % NS + NS) % NS;
            if (pr >= 0 && p0 + pr < pe) {
#pragma unroll
              for (int qi = 0; qi < QT; ++qi) {
                if (q0 + qi >= Q) break;
                if constexpr (kNCHW) {
                  y[((n * C + k) * P + p0 + pr) * (i64)Q + q0 + qi] = from_acc<T>(acc[slot][qi][0]);
                } else {
                  Vec<T, TV> o;
#pragma unroll
                  for (int v = 0; v < TV; ++v) o.v[v] = from_acc<T>(acc[slot][qi][v]);
                  store_vec<T, TV>(y + ((n * P + p0 + pr) * Q + q0 + qi) * (i64)C + k, o,
                                   y_aligned);
                }
              }
            }
#pragma unroll
            for (int qi = 0; qi < QT; ++qi)
#pragma unroll
              for (int v = 0; v < TV; ++v) acc[slot][qi][v] = b[v];
          }
        }
      }
    }
  }
}

// Element e of a vector held as 32-bit words (e known at compile time: register moves).
template <typename T>
__device__ __forceinline__ T word_element(const unsigned* u, int e) {
  if constexpr (sizeof(T) == 2) {
    return T{(unsigned short)(u[e / 2] >> (16 * (e % 2)))};    // half_t, bf16_t: the bits
  } else if constexpr (sizeof(T) == 4) {
    return __uint_as_float(u[e]);
  } else {
    return __hiloint2double((int)u[2 * e + 1], (int)u[2 * e]);
  }
}

// depthwise_rows_vec: depthwise_rows's NCHW form on vectors of V columns (4, 8 or 16 bytes;
// x's rows contiguous, W a multiple of V, x's start and strides whole vectors: the planner
// checks), for "same" padding on the left, pl = PL = (S_-1)/2 (pt any). A warp holds SEG =
// 32 / NV input rows side by side, NV = max(ceil(W/V), ceil(Q/QT)) lanes a row, each row a
// channel k of image n (the block's warps further channels; lanes past SEG*NV and channels
// past C take part in the exchanges, reading and storing nothing). Lane g of a row reads the
// row's vector of columns g*V .. g*V+V-1 (one load) and computes the QT = V/SW output columns
// q = g*QT .. over it: its window, columns g*V - PL .. g*V + V + RH - 1 (J = (QT-1)*SW + S_
// of them), is the last PL columns of the vectors of the DL lanes before it, its own and the
// first RH of the DR lanes after it (DL = ceil(PL/V), DR = ceil(RH/V); more than 1 only where
// the halo is wider than a vector: 5x5 on vectors of 1 column, 7x7 on 1 or 2), exchanged by
// warp shuffles of the 32-bit words that hold them (zeros for columns outside [0, W): the left
// of the row's first lanes, the right of its last). The rows are walked as in depthwise_rows
// (each input row once, added to every output row of the strip over it, products in window
// order, a row stored when its last filter row is added); the filter's R_*S_ taps in
// registers; each thread loads its vector PF rows ahead of the row it adds, into registers.
// Stores of QT columns as one vector where y's rows allow it.
template <typename T, typename Acc, int V, int R_, int S_, int SH, int SW, int PF>
__global__ void __launch_bounds__(256)
    depthwise_rows_vec(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                       T* __restrict__ y, int N, int C, int H, int W, int P, int Q, int pt, int pl,
                       int PS, i64 xn, i64 xc, i64 xh, i64 xw) {
  constexpr int QT = V / SW, PL = (S_ - 1) / 2, J = (QT - 1) * SW + S_, RH = J - PL - V;
  constexpr int NS = (R_ + SH - 1) / SH, PERIOD = NS * SH, LIFT = R_ * SH, RS = R_ * S_;
  constexpr int TB = V * sizeof(T), WORDS = TB / 4;           // a vector's bytes and words
  constexpr int DL = (PL + V - 1) / V, DR = (RH + V - 1) / V;  // lanes the halo spans a side
  static_assert(V % SW == 0 && RH >= 0 && TB % 4 == 0 && TB <= 16,
                "the window: the vector, PL columns on its left and RH on its right");
  struct alignas(TB) Words { unsigned u[WORDS]; };
  typedef typename RawBytes<TB>::type Raw;
  const int NV = max((W + V - 1) / V, (Q + QT - 1) / QT), SEG = 32 / NV;
  const int lane = threadIdx.x, seg = lane / NV, g = lane - seg * NV;
  const int k = (blockIdx.x * blockDim.y + threadIdx.y) * SEG + seg;
  const bool on = seg < SEG && k < C;                         // a row's lane, a channel
  const bool has_own = on && g * V < W;
  Acc f[RS], b = Acc(0);
#pragma unroll
  for (int i = 0; i < RS; ++i) f[i] = on ? to_acc(w[(i64)k * RS + i], Acc()) : Acc(0);
  if (on && bias) b = to_acc(bias[k], Acc());
  const int p0 = blockIdx.y * PS, pe = min(P, p0 + PS);       // the strip's output rows
  const int h_first = p0 * SH - pt, h_last = (pe - 1) * SH - pt + R_ - 1;
  const int q0 = g * QT;
  const bool y_vector = reinterpret_cast<unsigned long long>(y) % (sizeof(T) * QT) == 0 &&
                        Q % QT == 0 && q0 + QT <= Q;

  for (i64 n = blockIdx.z; n < N; n += gridDim.z) {
    const T* xb = x + n * xn + (i64)(on ? k : 0) * xc + g * V;
    auto load = [&](int h) {                                  // row h's vector, zeros outside
      Words v;
      if (has_own && h >= 0 && h < H && h <= h_last) {
        *reinterpret_cast<Raw*>(v.u) = *reinterpret_cast<const Raw*>(xb + h * xh);
      } else {
#pragma unroll
        for (int i = 0; i < WORDS; ++i) v.u[i] = 0u;
      }
      return v;
    };
    Acc acc[NS][QT];
#pragma unroll
    for (int o = 0; o < NS; ++o)
#pragma unroll
      for (int qi = 0; qi < QT; ++qi) acc[o][qi] = b;
    Words ahead[PF > 0 ? PF : 1];                             // rows h+1 .. h+PF (PF > 0)
#pragma unroll
    for (int a = 0; a < PF; ++a) ahead[a] = load(h_first + a);
    for (int hb = h_first; hb <= h_last; hb += PERIOD) {
      const int base = (hb - h_first) / SH;                   // a multiple of NS
#pragma unroll
      for (int i = 0; i < PERIOD; ++i) {
        const int h = hb + i;
        if (h > h_last) break;
        Words own;
        if constexpr (PF > 0) {
          own = ahead[0];
#pragma unroll
          for (int a = 0; a + 1 < PF; ++a) ahead[a] = ahead[a + 1];
          ahead[PF - 1] = load(h + PF);
        } else {
          own = load(h);
        }
        if (h >= 0 && h < H) {                                // the same for the whole block
          // lane g + d's vector at row[DL + d] (d = -DL .. DR; zeros where it is not this
          // row's, or lies past W), the words of it that the window takes
          unsigned row[DL + 1 + DR][WORDS] = {};
#pragma unroll
          for (int u = 0; u < WORDS; ++u) row[DL][u] = own.u[u];
#pragma unroll
          for (int d = 1; d <= DL; ++d)                       // its elements d*V - PL .. V - 1
#pragma unroll
            for (int u = max(d * V - PL, 0) * (int)sizeof(T) / 4; u < WORDS; ++u) {
              row[DL - d][u] = __shfl_up_sync(0xffffffffu, own.u[u], d);
              if (g < d) row[DL - d][u] = 0u;
            }
#pragma unroll
          for (int d = 1; d <= DR; ++d)               // its elements 0 .. min(RH - (d-1)*V, V) - 1
#pragma unroll
            for (int u = 0; u < (min(RH - (d - 1) * V, V) * (int)sizeof(T) + 3) / 4; ++u) {
              row[DL + d][u] = __shfl_down_sync(0xffffffffu, own.u[u], d);
              if ((g + d) * V >= W) row[DL + d][u] = 0u;
            }
          Acc win[J];
#pragma unroll
          for (int j = 0; j < J; ++j)                         // column g*V - PL + j
            win[j] = to_acc(word_element<T>(row[(j + DL * V - PL) / V], (j + DL * V - PL) % V),
                            Acc());
#pragma unroll
          for (int r = 0; r < R_; ++r) {                      // output row p: h = p*SH - pt + r
            const int d = i - r + LIFT;
            if (d % SH != 0) continue;
            const int pr = base + d / SH - R_;                // p - p0
            if (pr < 0 || p0 + pr >= pe) continue;
            const int slot = ((d / SH - R_) % NS + NS) % NS;
#pragma unroll
            for (int s = 0; s < S_; ++s)
#pragma unroll
              for (int qi = 0; qi < QT; ++qi)
                acc[slot][qi] = madd(win[qi * SW + s], f[r * S_ + s], acc[slot][qi]);
          }
        }
        const int d = i - (R_ - 1) + LIFT;                    // the output row h completes
        if (d % SH == 0) {
          const int pr = base + d / SH - R_, slot = ((d / SH - R_) % NS + NS) % NS;
          if (on && pr >= 0 && p0 + pr < pe && q0 < Q) {
            T* out = y + ((n * C + k) * P + p0 + pr) * (i64)Q + q0;
            Vec<T, QT> o;
#pragma unroll
            for (int qi = 0; qi < QT; ++qi) o.v[qi] = from_acc<T>(acc[slot][qi]);
            if (y_vector) {
              store_vec<T, QT>(out, o, true);
            } else {
#pragma unroll
              for (int qi = 0; qi < QT; ++qi)
                if (q0 + qi < Q) out[qi] = o.v[qi];
            }
          }
#pragma unroll
          for (int qi = 0; qi < QT; ++qi) acc[slot][qi] = b;
        }
      }
    }
  }
}

// depthwise_tile_nhwc: the NHWC form of groups = C = K (one filter per channel) with 16-byte
// channel vectors, for filters of R_ x S_ at strides SH x SW (no dilation), where a block's
// input window fits shared memory. A block owns an output tile of PT rows x QB columns x CV
// channel vectors (VEC = 16 bytes of T each) of image blockIdx.z (and + gridDim.z, ... past
// 65535 images):
//   1. its filters, w[k][r][s], into shared memory as wsm[r*S_ + s][channel] (rows of KT + 8
//      elements: 16-byte aligned, and the scattered 2-byte stores spread over the banks);
//   2. the input rows and columns under the tile, (PT-1)*SH + R_ by (QB-1)*SW + S_ pixels of
//      CV vectors, by 16-byte cp.async, zeros where a pixel lies in the padding (nothing read);
//   3. each thread computes QT consecutive output columns of one output row and TB bytes of
//      channels (TV = TB / sizeof(T); TB is 16, a whole vector, or 8, half of one: fewer
//      registers), an item: for every filter row it loads the row's span of (QT-1)*SW + S_
//      pixels once, converted to Acc, and takes each tap from there, in window order (r, then
//      s).
// Consecutive threads take consecutive channels of one pixel, so a warp's shared-memory reads
// are whole 128-byte lines and its stores to y are contiguous. Items past P, columns past
// Q and vectors past C are skipped. The grid is (channel tiles, row tiles x column tiles,
// images); x's strides (xn, xh, xw) are in elements, its channels contiguous and vectors
// aligned (the planner checks), and y is contiguous NHWC (scalar stores where `out` is one
// element off a vector).
template <typename T, typename Acc, int R_, int S_, int SH, int SW, int QT, int TB>
__global__ void __launch_bounds__(256)
    depthwise_tile_nhwc(const T* __restrict__ x, const T* __restrict__ w,
                        const T* __restrict__ bias, T* __restrict__ y, int N, int C, int H, int W,
                        int P, int Q, int pt, int pl, int PT, int QB, int CV, int col_tiles,
                        i64 xn, i64 xc, i64 xh, i64 xw) {
  constexpr int VEC = 16 / sizeof(T), RS = R_ * S_, J = (QT - 1) * SW + S_;
  constexpr int TV = TB / sizeof(T), SPLIT = 16 / TB;  // a thread's channels; per vector
  typedef typename RawBytes<TB>::type Raw;
  extern __shared__ __align__(16) unsigned char depthwise_smem[];
  const int KT = CV * VEC, KP = KT + 8;                 // channels of the block, wsm's pitch
  const int IH = (PT - 1) * SH + R_, IW = (QB - 1) * SW + S_, window = IH * IW * CV;
  T* wsm = reinterpret_cast<T*>(depthwise_smem);      // [RS][KP]
  uint4* xsm = reinterpret_cast<uint4*>(depthwise_smem + RS * KP * sizeof(T));  // [IH][IW][CV]
  const int k0 = blockIdx.x * KT;
  const int tp = blockIdx.y / col_tiles, tq = blockIdx.y - tp * col_tiles;
  const int p0 = tp * PT, q0 = tq * QB;
  const int tid = threadIdx.x, threads = blockDim.x;
  const int kn = min(KT, C - k0);                       // channels that exist (a multiple of VEC)

  // 1. Filters: w's block of kn * RS elements is contiguous, read in order.
  const T* wb = w + (i64)k0 * RS;
  for (int i = tid; i < RS * KT; i += threads) {
    const int kk = i / RS, rs = i - kk * RS;
    wsm[rs * KP + kk] = kk < kn ? wb[i] : from_acc<T>(Acc(0));
  }
  const int CT = CV * SPLIT;                            // a pixel's thread channel groups
  const int items = PT * (QB / QT) * CT, groups = QB / QT;
  const bool y_aligned = reinterpret_cast<unsigned long long>(y) % TB == 0;
  const int h0 = p0 * SH - pt, w0 = q0 * SW - pl;

  // 2. Image n's input window into `to`, zeros in the padding and past C.
  auto copy_window = [&](i64 n, uint4* to) {
    const T* xb = x + n * xn;
    for (int i = tid; i < window; i += threads) {
      const int cv = i % CV, pix = i / CV;
      const int ih = pix / IW, iw = pix - ih * IW;
      const int h = h0 + ih, c = w0 + iw, k = cv * VEC;
      const bool ok = h >= 0 && h < H && c >= 0 && c < W && k < kn;
      depthwise_copy<16, false>(to + i, ok ? xb + h * xh + c * xw + k0 + k : x, ok);
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };

  for (i64 n = blockIdx.z; n < N; n += gridDim.z) {
    copy_window(n, xsm);
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();

    // 3. Items: (output row, column group, TV channels), the channels fastest.
    const Raw* xr = reinterpret_cast<const Raw*>(xsm);
    for (int item = tid; item < items; item += threads) {
      const int ct = item % CT, rest = item / CT;
      const int pr = rest / groups, qg = rest - pr * groups;
      const int p = p0 + pr, q = q0 + qg * QT, k = ct * TV;
      if (p >= P || q >= Q || k >= kn) continue;
      Acc acc[QT][TV];
#pragma unroll
      for (int v = 0; v < TV; ++v) {
        const Acc b = bias ? to_acc(bias[k0 + k + v], Acc()) : Acc(0);
#pragma unroll
        for (int qi = 0; qi < QT; ++qi) acc[qi][v] = b;
      }
#pragma unroll
      for (int r = 0; r < R_; ++r) {
        const Raw* row = xr + ((pr * SH + r) * IW + qg * QT * SW) * CT + ct;
        Acc win[J][TV];
#pragma unroll
        for (int j = 0; j < J; ++j) {
          const Raw raw = row[j * CT];
          const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
          for (int v = 0; v < TV; ++v) win[j][v] = to_acc(e[v], Acc());
        }
#pragma unroll
        for (int s = 0; s < S_; ++s) {
          const Raw raw = *reinterpret_cast<const Raw*>(wsm + (r * S_ + s) * KP + k);
          const T* f = reinterpret_cast<const T*>(&raw);
#pragma unroll
          for (int v = 0; v < TV; ++v) {
            const Acc fv = to_acc(f[v], Acc());
#pragma unroll
            for (int qi = 0; qi < QT; ++qi)
              acc[qi][v] = madd(win[qi * SW + s][v], fv, acc[qi][v]);
          }
        }
      }
#pragma unroll
      for (int qi = 0; qi < QT; ++qi) {
        if (q + qi >= Q) break;
        Vec<T, TV> o;
#pragma unroll
        for (int v = 0; v < TV; ++v) o.v[v] = from_acc<T>(acc[qi][v]);
        store_vec<T, TV>(y + ((n * P + p) * Q + q + qi) * (i64)C + k0 + k, o, y_aligned);
      }
    }
    __syncthreads();                                    // before the window is refilled
  }
}

// depthwise_mma_nhwc: the NHWC form of groups = C = K for 16-bit T on Tensor Cores (mma.sync
// m16n8k16, FP32 accumulators), for filters of R_ x R_ at stride 1 (no dilation), R_ <= 9,
// where x's channels come in aligned 16-byte vectors (the planner checks). The layer's
// arithmetic, which bounds the CUDA-core kernels on 7x7 filters, runs as small matrix
// products: for one channel and filter row r, 16 output rows x 8 output columns are
//   Y[m][j] += sum_t X[m + r][j0 + t] * B_r[t][j],  B_r[t][j] = w[r][t - j] (0 <= t-j < R_),
// an m16n8k16 product whose k runs over 16 input columns (the 8 + R_ - 1 under the 8 outputs,
// the rest with zero weights): each output still sums its filter rows in order, each row's
// taps inside the product.
//
// A block (128 threads, 4 warps) owns TC = 16 channels of an output tile of 16 rows x 32
// columns of image blockIdx.z (and + gridDim.z, ...):
//   1. its input window, 16 + R_ - 1 rows x 40 columns (zeros outside the map), into shared
//      memory as one plane a channel, [c][row][column], rows of 40 elements (80 bytes, so the
//      8 rows of an ldmatrix hit distinct banks); channels 8..15's planes start 64 bytes
//      later (below). A thread loads 4 pixels' 8 channels (four 16-byte loads) and stores
//      them as 8 runs of 4 columns, one a channel (byte permutes, 8-byte stores: a half-warp,
//      4 x 8 columns of both channel halves, hits 32 distinct banks); its filters as
//      [c][r*R_ + s];
//   2. warp w takes channels w, w + 4, w + 8, w + 12; for each, B_r's fragments from the
//      filters (built once), then for each filter row the five 8-column halves of A under
//      the 32 outputs (16 rows from row r), two ldmatrix.x4 and an x2, and for each of the 4
//      column blocks an mma on its two halves (depthwise_mma_tile_products; kHalves false:
//      an ldmatrix.x4 a column block, depthwise_mma_products, the form before it);
//   3. the results (plus bias, converted to T) over the channel's own plane, rows 0..15 (the
//      warp alone reads it, and has read it all: a word store a lane, 32 distinct banks);
//      after the block's barrier a thread gathers 4 pixels' 8 channels (8-byte loads, byte
//      permutes) into four 16-byte stores to y (NHWC, contiguous; scalar stores where `y` is
//      not 16-byte aligned). Rows past P, columns past Q and channels past C are skipped.
// The block's channels, output rows and columns, threads, and the skew of channels 8..15's
// planes (plan.DEPTHWISE_MMA_TILE, DEPTHWISE_MMA_THREADS and DEPTHWISE_MMA_SKEW: the planner
// sizes the grid and shared memory by them).
constexpr int DEPTHWISE_MMA_CHANNELS = 16;
constexpr int DEPTHWISE_MMA_ROWS = 16;
constexpr int DEPTHWISE_MMA_COLUMNS = 32;
constexpr int DEPTHWISE_MMA_THREADS = 128;
constexpr int DEPTHWISE_MMA_PITCH = DEPTHWISE_MMA_COLUMNS + 8;
constexpr int DEPTHWISE_MMA_SKEW = 32;   // elements before channels 8..15's planes (64 bytes)

// The plane of channel cl (0..15), planes of `size` elements.
__device__ __forceinline__ int depthwise_mma_plane(int cl, int size) {
  return cl * size + (cl >> 3) * DEPTHWISE_MMA_SKEW;
}

// The two Tensor-Core kernels' shared steps.
// The filters of channels c0.. into shared memory as [c][r*R + s], in order (zeros past C).
template <int RS>
__device__ __forceinline__ void depthwise_mma_filters(unsigned short* wsm, const void* w, int c0,
                                                      int C, int tid, int threads) {
  for (int i = tid; i < DEPTHWISE_MMA_CHANNELS * RS; i += threads) {
    const int k = c0 + i / RS;
    wsm[i] = k < C ? reinterpret_cast<const unsigned short*>(w)[(i64)c0 * RS + i] : 0;
  }
}

// B_r's fragment for filter row r: B_r[t][g] for t = t2, t2 + 1 (b[0]) and t2 + 8, t2 + 9
// (b[1]), w[r][t - g] or 0.
template <int R_>
__device__ __forceinline__ void depthwise_mma_b(const unsigned short* f, int r, int g, int t2,
                                                unsigned (&b)[2]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int s0 = t2 + half * 8 - g, s1 = s0 + 1;
    const unsigned lo = s0 >= 0 && s0 < R_ ? f[r * R_ + s0] : 0;
    const unsigned hi = s1 >= 0 && s1 < R_ ? f[r * R_ + s1] : 0;
    b[half] = lo | (hi << 16);
  }
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&a)[4], const unsigned short* p) {
  const unsigned address = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(address));
}

// mma.sync m16n8k8 (FP32 accumulation): A's rows g and g + 8 (a0, a1), B's column g (b), as
// the first or second half of an m16n8k16's fragments.
template <typename T>
__device__ __forceinline__ void mma_m16n8k8(float (&d)[4], unsigned a0, unsigned a1,
                                            unsigned b) {
  if constexpr (same_type<T, bf16_t>::value)
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, "
                 "{%6}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(b));
  else
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, "
                 "{%6}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(b));
}

__device__ __forceinline__ void ldmatrix_x2(unsigned (&a)[2], const unsigned short* p) {
  const unsigned address = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(a[0]), "=r"(a[1])
               : "r"(address));
}

// One channel's products: for each filter row r in order, B_r's fragment (f: the channel's
// filters), then for each column block cb an ldmatrix.x4 of A at a_at(r, cb) and an mma into
// acc[cb].
template <typename T, int R_, int CB, typename AAt>
__device__ __forceinline__ void depthwise_mma_products(float (&acc)[CB][4],
                                                       const unsigned short* f, int g, int t2,
                                                       AAt a_at) {
#pragma unroll
  for (int cb = 0; cb < CB; ++cb)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[cb][e] = 0.f;
#pragma unroll
  for (int r = 0; r < R_; ++r) {
    unsigned b[2];
    depthwise_mma_b<R_>(f, r, g, t2, b);
#pragma unroll
    for (int cb = 0; cb < CB; ++cb) {
      unsigned a[4];
      ldmatrix_x4(a, a_at(r, cb));
      mma_m16n8k16<T>(acc[cb], a, b);
    }
  }
}

// The tile kernel's products for one channel: its 4 column blocks' A tiles overlap by half
// (block cb's columns are 8cb .. 8cb + 15), so for each filter row r the five 8-column halves
// under the 32 outputs (rows r .. r + 15, columns 8h .. 8h + 7, h = 0..4) are loaded once each,
// two ldmatrix.x4 (halves 0, 1 and 2, 3) and an x2 (half 4): 1280 bytes of shared memory
// where four x4 read 2048. Blocks 0 and 2 are an x4's halves, one m16n8k16 each; blocks 1 and
// 3 straddle two loads, whose halves no m16n8k16 takes without register copies (its A is
// an aligned quad), so each is two m16n8k8, B_r's rows 0..7 then 8..15: its row's taps still
// in order. `rows`: the lane's ldmatrix row in the channel's plane, column acol.
template <typename T, int R_>
__device__ __forceinline__ void depthwise_mma_tile_products(float (&acc)[4][4],
                                                            const unsigned short* f, int g,
                                                            int t2, const unsigned short* rows,
                                                            int acol) {
  constexpr int PITCH = DEPTHWISE_MMA_PITCH;
#pragma unroll
  for (int cb = 0; cb < 4; ++cb)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[cb][e] = 0.f;
#pragma unroll
  for (int r = 0; r < R_; ++r) {
    unsigned b[2], h01[4], h23[4], h4[2];
    depthwise_mma_b<R_>(f, r, g, t2, b);
    ldmatrix_x4(h01, rows + r * PITCH);
    ldmatrix_x4(h23, rows + r * PITCH + 16);
    ldmatrix_x2(h4, rows + r * PITCH + 32 - acol);
    mma_m16n8k16<T>(acc[0], h01, b);
    mma_m16n8k8<T>(acc[1], h01[2], h01[3], b[0]);
    mma_m16n8k8<T>(acc[1], h23[0], h23[1], b[1]);
    mma_m16n8k16<T>(acc[2], h23, b);
    mma_m16n8k8<T>(acc[3], h23[2], h23[3], b[0]);
    mma_m16n8k8<T>(acc[3], h4[0], h4[1], b[1]);
  }
}

// 4 pixels' 8 channels (raw[u]: pixel u's 16 bytes) as 8 runs of 4 columns, channel u's at
// dst + u*cs (byte permutes, 8-byte stores).
__device__ __forceinline__ void depthwise_mma_put4(unsigned short* dst, int cs,
                                                   const uint4 (&raw)[4]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {                               // channels 2e, 2e + 1
    const unsigned a0 = (&raw[0].x)[e], a1 = (&raw[1].x)[e];
    const unsigned a2 = (&raw[2].x)[e], a3 = (&raw[3].x)[e];
    *reinterpret_cast<uint2*>(dst + (2 * e) * cs) =
        make_uint2(__byte_perm(a0, a1, 0x5410), __byte_perm(a2, a3, 0x5410));
    *reinterpret_cast<uint2*>(dst + (2 * e + 1) * cs) =
        make_uint2(__byte_perm(a0, a1, 0x7632), __byte_perm(a2, a3, 0x7632));
  }
}

// The inverse: 8 runs of 4 columns (channel u's at src + u*cs) as 4 pixels' 8 channels,
// px[pixel][channel pair].
__device__ __forceinline__ void depthwise_mma_get4(const unsigned short* src, int cs,
                                                   unsigned (&px)[4][4]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const uint2 lo = *reinterpret_cast<const uint2*>(src + (2 * e) * cs);
    const uint2 hi = *reinterpret_cast<const uint2*>(src + (2 * e + 1) * cs);
    px[0][e] = __byte_perm(lo.x, hi.x, 0x5410);
    px[1][e] = __byte_perm(lo.x, hi.x, 0x7632);
    px[2][e] = __byte_perm(lo.y, hi.y, 0x5410);
    px[3][e] = __byte_perm(lo.y, hi.y, 0x7632);
  }
}

// A pixel's 8 channels to y: one 16-byte store, or 8 scalar ones where y is not aligned.
template <typename T>
__device__ __forceinline__ void depthwise_mma_store8(T* dst, const unsigned (&v)[4],
                                                     bool aligned) {
  if (aligned) {
    *reinterpret_cast<uint4*>(dst) = make_uint4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e)
      reinterpret_cast<unsigned short*>(dst)[e] = (unsigned short)(v[e >> 1] >> (16 * (e & 1)));
  }
}

template <typename T, int R_, bool kHalves>
__global__ void __launch_bounds__(DEPTHWISE_MMA_THREADS)
    depthwise_mma_nhwc(const T* __restrict__ x, const T* __restrict__ w,
                       const T* __restrict__ bias, T* __restrict__ y, int N, int C, int H,
                       int W, int P, int Q, int pt, int pl, int col_tiles, i64 xn, i64 xc,
                       i64 xh, i64 xw) {
  constexpr int TC = DEPTHWISE_MMA_CHANNELS, PT = DEPTHWISE_MMA_ROWS, QB = DEPTHWISE_MMA_COLUMNS;
  constexpr int NT = DEPTHWISE_MMA_THREADS, IH = PT + R_ - 1, PITCH = DEPTHWISE_MMA_PITCH;
  constexpr int RS = R_ * R_, JG = PITCH / 4, QG = QB / 4, PLANE = IH * PITCH;
  static_assert(TC == 16 && QB == 32, "2 vectors of 8 channels, 4 column blocks of 8");
  static_assert(R_ <= 9, "8 outputs and R_ - 1 more input columns within k = 16");
  extern __shared__ __align__(16) unsigned char depthwise_smem[];
  unsigned short* planes = reinterpret_cast<unsigned short*>(depthwise_smem);
  unsigned short* wsm = planes + TC * PLANE + DEPTHWISE_MMA_SKEW;           // [TC][RS]
  const int c0 = blockIdx.x * TC;
  const int tp = blockIdx.y / col_tiles, tq = blockIdx.y - tp * col_tiles;
  const int p0 = tp * PT, q0 = tq * QB;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const bool y_aligned = reinterpret_cast<unsigned long long>(y) % 16 == 0;

  depthwise_mma_filters<RS>(wsm, w, c0, C, tid, NT);
  const int h0 = p0 - pt, w0 = q0 - pl;
  for (i64 n = blockIdx.z; n < N; n += gridDim.z) {
    const T* xb = x + n * xn;
    // 1. The window: columns j..j+3 of row i, channels v*8.., as 4 loads and 8 stores.
#pragma unroll 2
    for (int idx = tid; idx < IH * JG * 2; idx += NT) {
      const int v = idx & 1, grp = idx >> 1, i = grp / JG, j = (grp - i * JG) * 4;
      const int h = h0 + i, k = c0 + v * 8;
      const bool row_in = h >= 0 && h < H && k < C;
      uint4 raw[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int col = w0 + j + u;
        raw[u] = make_uint4(0, 0, 0, 0);
        if (row_in && col >= 0 && col < W)
          raw[u] = *reinterpret_cast<const uint4*>(xb + h * xh + col * xw + k);
      }
      depthwise_mma_put4(planes + depthwise_mma_plane(v * 8, PLANE) + i * PITCH + j, PLANE, raw);
    }
    __syncthreads();

    // 2. Each warp's channels: B_r's fragments, then R_ x (3 ldmatrix + 6 mma).
    const int g = lane >> 2, t2 = (lane & 3) * 2;             // fragment row / column pair
    const int arow = (lane & 7) + ((lane >> 3) & 1) * 8, acol = (lane >> 4) * 8;
    for (int cl = warp; cl < TC; cl += NT / 32) {
      unsigned short* plane = planes + depthwise_mma_plane(cl, PLANE);
      float acc[4][4];
      if constexpr (kHalves)
        depthwise_mma_tile_products<T, R_>(acc, wsm + cl * RS, g, t2,
                                           plane + arow * PITCH + acol, acol);
      else                                    // four ldmatrix.x4 a filter row
        depthwise_mma_products<T, R_>(acc, wsm + cl * RS, g, t2, [&](int r, int cb) {
          return plane + (arow + r) * PITCH + cb * 8 + acol;
        });
      // 3a. Over the plane's rows 0..15: rows g and g + 8, columns cb*8 + t2 and + 1.
      const int k = c0 + cl;
      const float bk = bias && k < C ? to_acc(bias[k], float()) : 0.f;
      __syncwarp();                                           // all of the plane read
#pragma unroll
      for (int cb = 0; cb < 4; ++cb)
#pragma unroll
        for (int half = 0; half < 2; ++half)
          *reinterpret_cast<unsigned*>(plane + (g + half * 8) * PITCH + cb * 8 + t2) =
              pack2<T>(acc[cb][half * 2] + bk, acc[cb][half * 2 + 1] + bk);
    }
    __syncthreads();

    // 3b. Columns col..col+3 of output row `row`, channels v*8..: 8 loads, 4 stores.
    for (int idx = tid; idx < PT * QG * 2; idx += NT) {
      const int v = idx & 1, grp = idx >> 1, row = grp / QG, col = (grp - row * QG) * 4;
      const int p = p0 + row, q = q0 + col, k = c0 + v * 8;
      if (p >= P || q >= Q || k >= C) continue;
      unsigned px[4][4];
      depthwise_mma_get4(planes + depthwise_mma_plane(v * 8, PLANE) + row * PITCH + col, PLANE,
                         px);
      T* dst = y + ((n * P + p) * Q + q) * (i64)C + k;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        if (q + u >= Q) break;
        depthwise_mma_store8(dst + u * (i64)C, px[u], y_aligned);
      }
    }
    __syncthreads();                                          // before the window is refilled
  }
}

// depthwise_mma_small_nhwc: the same products for small maps (14x14, 7x7), where a 16 x 32
// tile of one image would be mostly past the map. The outputs are cut into 8 x 8 sub-tiles
// (of any image: sub-tile st is image st / (tiles_p*tiles_q), rows tp*8.., columns tq*8..),
// and a block takes 2*CB consecutive ones: for column block cb of the m16n8k16 products, A's
// rows 0..7 are sub-tile 2*cb's and rows 8..15 sub-tile 2*cb + 1's (ldmatrix takes each
// lane's row address). Each sub-tile's window, 8 + R_ - 1 rows x 16 columns (zeros outside
// the map), lies in shared memory as [c][sub-tile][row][column], rows of 16 elements whose
// two 16-byte halves swap in rows 4..7 of every 8 (so that an ldmatrix's 8 rows, and a
// warp's word stores of its results, hit distinct banks). Otherwise as depthwise_mma_nhwc:
// 4-pixel copies, B_r built once a channel, each output's filter rows summed in order, the
// results over the channel's planes, gathered into 16-byte stores. A block loops over its
// grid's y for more sub-tiles than MAX_GRID_YZ blocks.
__device__ __forceinline__ int depthwise_mma_swizzle(int row, int col) {
  return col ^ (((row >> 2) & 1) << 3);
}

// Sub-tile st's image and first output row and column.
__device__ __forceinline__ void depthwise_mma_sub(i64 st, int tiles_p, int tiles_q, i64& n,
                                                  int& p0, int& q0) {
  const i64 per_image = (i64)tiles_p * tiles_q;
  n = st / per_image;
  const int rem = (int)(st - n * per_image), tp = rem / tiles_q;
  p0 = tp * 8;
  q0 = (rem - tp * tiles_q) * 8;
}

template <typename T, int R_, int CB>
__global__ void __launch_bounds__(DEPTHWISE_MMA_THREADS)
    depthwise_mma_small_nhwc(const T* __restrict__ x, const T* __restrict__ w,
                             const T* __restrict__ bias, T* __restrict__ y, int N, int C, int H,
                             int W, int P, int Q, int pt, int pl, int tiles_p, int tiles_q,
                             i64 xn, i64 xc, i64 xh, i64 xw) {
  constexpr int TC = DEPTHWISE_MMA_CHANNELS, NT = DEPTHWISE_MMA_THREADS, SUBS = 2 * CB;
  constexpr int IH = 8 + R_ - 1, SUB = IH * 16, PLANE = SUBS * SUB, RS = R_ * R_;
  static_assert(R_ <= 9, "8 outputs and R_ - 1 more input columns within k = 16");
  static_assert(CB == 1 || CB == 2 || CB == 4, "column blocks of a product");
  extern __shared__ __align__(16) unsigned char depthwise_smem[];
  unsigned short* planes = reinterpret_cast<unsigned short*>(depthwise_smem);
  unsigned short* wsm = planes + TC * PLANE + DEPTHWISE_MMA_SKEW;           // [TC][RS]
  const int c0 = blockIdx.x * TC;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const bool y_aligned = reinterpret_cast<unsigned long long>(y) % 16 == 0;
  const i64 subs = (i64)N * tiles_p * tiles_q;

  depthwise_mma_filters<RS>(wsm, w, c0, C, tid, NT);
  for (i64 st0 = (i64)blockIdx.y * SUBS; st0 < subs; st0 += (i64)gridDim.y * SUBS) {
    // 1. The windows: columns j..j+3 of row i of sub-tile s, channels v*8...
    for (int idx = tid; idx < SUBS * IH * 4 * 2; idx += NT) {
      const int v = idx & 1, rest = idx >> 1, j = (rest & 3) * 4, si = rest >> 2;
      const int s = si / IH, i = si - s * IH, k = c0 + v * 8;
      i64 n;
      int p0, q0;
      depthwise_mma_sub(st0 + s, tiles_p, tiles_q, n, p0, q0);
      const int h = p0 - pt + i;
      const bool row_in = st0 + s < subs && h >= 0 && h < H && k < C;
      const T* xr = x + n * xn + h * xh + k;
      uint4 raw[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int col = q0 - pl + j + u;
        raw[u] = make_uint4(0, 0, 0, 0);
        if (row_in && col >= 0 && col < W) raw[u] = *reinterpret_cast<const uint4*>(xr + col * xw);
      }
      depthwise_mma_put4(planes + depthwise_mma_plane(v * 8, PLANE) + s * SUB + i * 16 +
                             depthwise_mma_swizzle(i, j), PLANE, raw);
    }
    __syncthreads();

    // 2. Each warp's channels: R_ x CB ldmatrix + mma, sub-tiles 2*cb and 2*cb + 1.
    const int g = lane >> 2, t2 = (lane & 3) * 2;
    const int asub = (lane >> 3) & 1, arow = lane & 7, acol = (lane >> 4) * 8;
    for (int cl = warp; cl < TC; cl += NT / 32) {
      unsigned short* plane = planes + depthwise_mma_plane(cl, PLANE);
      float acc[CB][4];
      depthwise_mma_products<T, R_>(acc, wsm + cl * RS, g, t2, [&](int r, int cb) {
        return plane + (2 * cb + asub) * SUB + (arow + r) * 16 +
               depthwise_mma_swizzle(arow + r, acol);
      });
      // 3a. Over rows 0..7 of sub-tiles 2*cb (acc[cb][0..1]) and 2*cb + 1 ([2..3]).
      const int k = c0 + cl;
      const float bk = bias && k < C ? to_acc(bias[k], float()) : 0.f;
      __syncwarp();                                           // all of the planes read
#pragma unroll
      for (int cb = 0; cb < CB; ++cb)
#pragma unroll
        for (int half = 0; half < 2; ++half)
          *reinterpret_cast<unsigned*>(plane + (2 * cb + half) * SUB + g * 16 +
                                       depthwise_mma_swizzle(g, t2)) =
              pack2<T>(acc[cb][half * 2] + bk, acc[cb][half * 2 + 1] + bk);
    }
    __syncthreads();

    // 3b. Columns cg*4.. of row `row` of sub-tile s, channels v*8..: 8 loads, 4 stores (a
    // half-warp: 8 rows of one sub-tile and channel half, 32 distinct banks).
    for (int idx = tid; idx < SUBS * 8 * 2 * 2; idx += NT) {
      const int cg = idx & 1, row = (idx >> 1) & 7, v = (idx >> 4) & 1, s = idx >> 5;
      i64 n;
      int p0, q0;
      depthwise_mma_sub(st0 + s, tiles_p, tiles_q, n, p0, q0);
      const int p = p0 + row, q = q0 + cg * 4, k = c0 + v * 8;
      if (st0 + s >= subs || p >= P || q >= Q || k >= C) continue;
      unsigned px[4][4];
      depthwise_mma_get4(planes + depthwise_mma_plane(v * 8, PLANE) + s * SUB + row * 16 +
                             depthwise_mma_swizzle(row, cg * 4), PLANE, px);
      T* dst = y + ((n * P + p) * Q + q) * (i64)C + k;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        if (q + u >= Q) break;
        depthwise_mma_store8(dst + u * (i64)C, px[u], y_aligned);
      }
    }
    __syncthreads();                                          // before the windows are refilled
  }
}
