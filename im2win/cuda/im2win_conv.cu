// im2win_conv.cu: im2win convolution on CUDA cores, the whole batch in one launch.
//
// As a GEMM per group g (spec/im2win.md, "The convolution on windows"):
//   y[pixel, k] = bias[k] + sum_{t < red} w[k, t] * B[t, pixel]
//   M = K/G filters, N_gemm = N*P*Q output pixels, red = (C/G)*R*S,
// with w read as a plain (K, red) row-major matrix and B[t, pixel] read from `src` at
// base(pixel) + off(t):
//   materialised (kFused = false): src is x_win (N, C, P, Wp*R) or (N, P, Wp*R, C) and t runs in
//     window order, t = (c*S + s)*R + r (NCHW) or (s*R + r)*(C/G) + c (NHWC), with w given as
//     w_win: each output pixel's reduction is then the window tensor's contiguous run (one run
//     per channel in NCHW, one run of S*R*C/G in NHWC, with dw = 1); the window holds the
//     padding zeros, so only the tails are masked;
//   fused (kFused = true): src is x itself, read through its strides, and t runs in w's own
//     order, t = (c*R + r)*S + s (NCHW) or (r*S + s)*(C/G) + c (NHWC); the B tile in shared
//     memory is the window tile, built straight from x, padding by predication
//     (0 <= h0 + r*dh < H, 0 <= w0 + s*dw < W).
// base(pixel) is 64-bit and computed once per thread; off(t), r*dh and s*dw come from the plan's
// table (kTable, gemm.cuh), so the inner loop has no div/mod.
//
// Loads of B follow memory's contiguous direction: along the reduction (each thread loads
// B_PER consecutive t of one pixel) where runs are contiguous (NHWC, and NCHW windows), along
// pixels (each thread one pixel, consecutive threads consecutive output columns) for NCHW x.
//
// Thread mapping: a block computes a BM x BN tile (filters x pixels) of one group with
// NT = (BM/TM)*(BN/TN) threads; thread (ty, tx) owns a TM x TN register micro-tile: rows
// ty*TM + i, columns tx*TN + j, or, conflict-free (kSwizzle), columns in TN/4 float4 groups
// interleaved across threads (group a at a*(BN/TN)*4 + tx*4), so a quarter-warp's 16-byte
// shared-memory reads hit distinct banks. Grid: (pixel tiles, filter tiles, groups).
//
// Switches (each can be turned off alone for the ablation):
//   kSmem          shared-memory tiling; off: operands straight from global memory.
//   kTable         the reduction table (gemm.cuh); off: (c, r, s) by div/mod per element.
//   kDouble        double buffering: the next tile's global loads are issued before computing
//                  the current one and stored to the other shared buffer.
//   kVecA, kVecS   16-byte loads: float4 filter loads from global memory (the planner sets kVecA
//                  only when red % 4 == 0 and w is 16-byte aligned) and float4 shared-memory
//                  fragment reads. One switch (vector_loads) turns both off.
//   kSwizzle       bank-conflict-free shared memory: the A tile padded by 4 words per row and the
//                  interleaved column mapping above.
// The register micro-kernel is switched off by the 16x16 tile with TM = TN = 1.

// B[t, pixel] at the tap `tap` of t (zero outside the reduction, the pixels or, fused, x).
template <typename T, typename Acc, bool kFused>
__device__ __forceinline__ Acc load_b(const T* __restrict__ src, const Pixel& px, int t,
                                      const Tap& tap, const Geometry& geo) {
  if (!px.valid || t >= geo.red) return Acc(0);
  if (kFused && ((unsigned)(px.h0 + tap.dr) >= (unsigned)geo.H ||
                 (unsigned)(px.w0 + tap.ds) >= (unsigned)geo.W))
    return Acc(0);
  return to_acc(src[px.base + tap.off], Acc());
}

template <int BN, int TN, bool kSwizzle>
__device__ __forceinline__ int micro_col(int tx, int j) {
  if (kSwizzle && TN % 4 == 0) return (j / 4) * (BN / TN) * 4 + tx * 4 + (j % 4);
  return tx * TN + j;
}

template <typename T, typename Acc, bool kNHWC, bool kFused, int BM, int BN, int BK, int TM,
          int TN, bool kSmem, bool kTable, bool kDouble, bool kVecA, bool kVecS, bool kSwizzle>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    im2win_conv(const T* __restrict__ src, const T* __restrict__ w, const T* __restrict__ bias,
                T* __restrict__ y, const int2* __restrict__ taps, Geometry geo, int g0) {
  constexpr int TX = BN / TN, TY = BM / TM, NT = TX * TY;
  static_assert(BM % TM == 0 && BN % TN == 0, "tile must divide into micro-tiles");
  static_assert(NT % BN == 0, "each thread loads B for exactly one pixel");
  constexpr bool kFloat = same_type<T, float>::value && same_type<Acc, float>::value;
  constexpr bool kVecOk = kVecA && kFloat;          // float4 filter loads
  constexpr bool kVecSOk = kVecS && same_type<Acc, float>::value;  // float4 fragment reads
  constexpr int PADA = kSwizzle ? 4 : 0;
  constexpr int PADB = kSwizzle ? 4 : 0;

  const int tid = threadIdx.x;
  const int tx = tid % TX, ty = tid / TX;
  const int g = g0 + blockIdx.z;
  const int m0 = blockIdx.y * BM;          // first filter (within the group) of this tile
  const i64 j0 = (i64)blockIdx.x * BN;     // first pixel of this tile
  const T* w_group = w + (i64)g * geo.Kg * geo.red;

  Acc acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = Acc(0);

  if constexpr (!kSmem) {
    Pixel px[TN];
#pragma unroll
    for (int j = 0; j < TN; ++j) px[j] = pixel_at(j0 + micro_col<BN, TN, kSwizzle>(tx, j), g, geo);
    for (int t = 0; t < geo.red; ++t) {
      Acc af[TM], bf[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const int m = m0 + ty * TM + i;
        af[i] = m < geo.Kg ? to_acc(w_group[(i64)m * geo.red + t], Acc()) : Acc(0);
      }
#pragma unroll
      for (int j = 0; j < TN; ++j)
        bf[j] = load_b<T, Acc, kFused>(src, px[j], t, tap_at<kNHWC, !kFused, kTable>(t, taps, geo),
                                       geo);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = madd(af[i], bf[j], acc[i][j]);
    }
  } else {
    constexpr int NBUF = kDouble ? 2 : 1;
    __shared__ __align__(16) Acc As[NBUF][BK][BM + PADA];
    __shared__ __align__(16) Acc Bs[NBUF][BK][BN + PADB];
    constexpr int A_ELEMS = BM * BK, A_VECS = A_ELEMS / 4;
    constexpr int A_PER = kVecOk ? (A_VECS + NT - 1) / NT : (A_ELEMS + NT - 1) / NT;
    constexpr int A_REGS = kVecOk ? 4 * A_PER : A_PER;
    // B mapping: each thread loads the B_PER consecutive rows b_row + i of one pixel, its
    // pixel along t (kAlongT: pixel tid / (BK / B_PER)) or along pixels (pixel tid % BN).
    // The rows' table entries are then consecutive too: 16-byte loads of two, kGroup entries
    // at a time (at most 4, which keeps the registers of the largest tiles at the old count).
    constexpr bool kAlongT = (kNHWC || !kFused) && (BK * BN) % NT == 0 && BK * BN >= NT;
    constexpr int B_ROWS = NT / BN;
    constexpr int B_PER = kAlongT ? BK * BN / NT : (BK + B_ROWS - 1) / B_ROWS;
    constexpr bool kPairs = kTable && B_PER % 2 == 0;
    constexpr int kGroup = kPairs && B_PER > 4 ? 4 : (kPairs ? B_PER : 1);
    Acc a_st[A_REGS], b_st[B_PER];
    const int b_col = kAlongT ? tid / (BK / B_PER) : tid % BN;
    const int b_row = kAlongT ? (tid % (BK / B_PER)) * B_PER : (tid / BN) * B_PER;
    const Pixel px = pixel_at(j0 + b_col, g, geo);

    auto load_tiles = [&](int k0) {
      if constexpr (kVecOk) {
#pragma unroll
        for (int i = 0; i < A_PER; ++i) {
          const int idx = tid + i * NT;
          const int m = idx / (BK / 4), t = k0 + (idx % (BK / 4)) * 4;
          float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
          if (idx < A_VECS && m0 + m < geo.Kg && t < geo.red)
            v = *reinterpret_cast<const float4*>(w_group + (i64)(m0 + m) * geo.red + t);
          a_st[4 * i] = v.x; a_st[4 * i + 1] = v.y; a_st[4 * i + 2] = v.z; a_st[4 * i + 3] = v.w;
        }
      } else {
#pragma unroll
        for (int i = 0; i < A_PER; ++i) {
          const int idx = tid + i * NT;
          const int m = idx / BK, t = k0 + idx % BK;
          a_st[i] = (idx < A_ELEMS && m0 + m < geo.Kg && t < geo.red)
                        ? to_acc(w_group[(i64)(m0 + m) * geo.red + t], Acc()) : Acc(0);
        }
      }
#pragma unroll
      for (int i0 = 0; i0 < B_PER; i0 += kGroup) {   // kGroup rows at a time: few live entries
        int2 entries[kGroup];
        if constexpr (kPairs) {
          if (b_row < BK) taps_of(taps, k0 + b_row + i0, entries);
        }
#pragma unroll
        for (int i = i0; i < i0 + kGroup && i < B_PER; ++i) {
          const int row = b_row + i, t = k0 + row;
          const Tap tap = kPairs ? tap_of(entries[i - i0])
                                 : tap_at<kNHWC, !kFused, kTable>(t, taps, geo);
          b_st[i] = row < BK ? load_b<T, Acc, kFused>(src, px, t, tap, geo) : Acc(0);
        }
      }
    };
    auto store_tiles = [&](int buf) {
      if constexpr (kVecOk) {
#pragma unroll
        for (int i = 0; i < A_PER; ++i) {
          const int idx = tid + i * NT;
          if (idx < A_VECS) {
            const int m = idx / (BK / 4), t = (idx % (BK / 4)) * 4;
#pragma unroll
            for (int e = 0; e < 4; ++e) As[buf][t + e][m] = a_st[4 * i + e];
          }
        }
      } else {
#pragma unroll
        for (int i = 0; i < A_PER; ++i) {
          const int idx = tid + i * NT;
          if (idx < A_ELEMS) As[buf][idx % BK][idx / BK] = a_st[i];
        }
      }
#pragma unroll
      for (int i = 0; i < B_PER; ++i) {
        const int row = b_row + i;
        if (row < BK) Bs[buf][row][b_col] = b_st[i];
      }
    };
    auto compute = [&](int buf) {
#pragma unroll
      for (int kk = 0; kk < BK; ++kk) {
        Acc af[TM], bf[TN];
        if constexpr (kVecSOk && TM % 4 == 0) {
#pragma unroll
          for (int i = 0; i < TM; i += 4) {
            const float4 v = *reinterpret_cast<const float4*>(&As[buf][kk][ty * TM + i]);
            af[i] = v.x; af[i + 1] = v.y; af[i + 2] = v.z; af[i + 3] = v.w;
          }
        } else {
#pragma unroll
          for (int i = 0; i < TM; ++i) af[i] = As[buf][kk][ty * TM + i];
        }
        if constexpr (kVecSOk && TN % 4 == 0) {
#pragma unroll
          for (int j = 0; j < TN; j += 4) {
            const float4 v = *reinterpret_cast<const float4*>(
                &Bs[buf][kk][micro_col<BN, TN, kSwizzle>(tx, j)]);
            bf[j] = v.x; bf[j + 1] = v.y; bf[j + 2] = v.z; bf[j + 3] = v.w;
          }
        } else {
#pragma unroll
          for (int j = 0; j < TN; ++j) bf[j] = Bs[buf][kk][micro_col<BN, TN, kSwizzle>(tx, j)];
        }
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < TN; ++j) acc[i][j] = madd(af[i], bf[j], acc[i][j]);
      }
    };

    const int ktiles = (geo.red + BK - 1) / BK;
    load_tiles(0);
    store_tiles(0);
    __syncthreads();
    for (int kt = 0; kt < ktiles; ++kt) {
      const bool more = kt + 1 < ktiles;
      if (kDouble) {
        const int buf = kt & 1;
        if (more) load_tiles((kt + 1) * BK);  // in flight while this tile is computed
        compute(buf);
        if (more) store_tiles(buf ^ 1);       // buf ^ 1 was last read before the last barrier
        __syncthreads();
      } else {
        compute(0);
        __syncthreads();
        if (more) {
          load_tiles((kt + 1) * BK);
          store_tiles(0);
          __syncthreads();
        }
      }
    }
  }

  // Epilogue: overwrite y (never accumulate into it), masking the tails.
#pragma unroll
  for (int j = 0; j < TN; ++j) {
    const i64 pix = j0 + micro_col<BN, TN, kSwizzle>(tx, j);
    if (pix >= geo.npix) continue;
    const i64 n = pix / geo.PQ;
    const i64 pq = pix - n * geo.PQ;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int m = m0 + ty * TM + i;
      if (m >= geo.Kg) continue;
      const int k = g * geo.Kg + m;
      const Acc v = bias ? add(acc[i][j], to_acc(bias[k], Acc())) : acc[i][j];
      const i64 at = kNHWC ? (n * geo.PQ + pq) * geo.K + k : (n * geo.K + k) * geo.PQ + pq;
      y[at] = from_acc<T>(v);
    }
  }
}
