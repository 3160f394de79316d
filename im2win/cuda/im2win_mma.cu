// im2win_mma.cu: float16 / bfloat16 im2win convolution on Tensor Cores (mma.sync m16n8k16,
// FP32 accumulation), the whole batch in one launch; the Tensor-Core kernel of sm_80 (Hopper
// has im2win_wgmma.cu).
//
// The same GEMM per group as im2win_conv.cu (M = K/G filters, N = N*P*Q pixels, reduction
// t < red; gemm.cuh), with the reduction padded once to `redp`, a multiple of BK: A columns and
// B rows t >= red read as zero (predicated, nothing is copied), so no (r, s) is ever padded on
// its own and nothing outside w or x is read. B[t, pixel] is read at
// base(pixel) + off(t) exactly as in im2win_conv.cu (fused: x through its strides, padding by
// predication; materialised: the window tensor, t in window order).
//
// Thread mapping: a block computes a BM x BN tile (filters x pixels) with (BM/WM)*(BN/WN) warps;
// warp (wm, wn) owns a WM x WN sub-tile as (WM/16) x (WN/8) mma tiles, whose FP32 accumulators
// live in registers. Per BK slice, A (BM x BK, t contiguous) and B (BN x BK: each pixel's
// reduction contiguous, the mma "col" operand) are staged in shared memory, STAGES deep.
//
// Switches (each can be turned off alone for the ablation):
//   kAsync     cp.async 16-byte global-to-shared copies (zero-filled outside x); off: loads
//              through registers. Used where 8 consecutive t are contiguous and 16-byte
//              aligned (set by the planner): for A (kVecA) when red % 8 == 0 and w is aligned,
//              for B (kVecB) when the runs are (NHWC with C/G % 8 == 0); otherwise gathered
//              element by element through registers.
//   STAGES     pipeline depth: 3 (two slices in flight while one is computed) or 1 (no
//              overlap); register fragments are double-buffered across the k16 steps.
//   kLdmatrix  ldmatrix.x4 fragment loads; off: 32-bit shared loads of the same elements.
//   kSwizzle   16-byte chunks of each 64-byte shared row XOR-swizzled by (row >> 1) & 3, so
//              the 8 rows of an ldmatrix hit distinct banks; off: plain rows (4-way conflicts).
//   kTable     reduction offsets from the plan's table (gemm.cuh); off: div/mod per element.

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)),
               "l"(src), "r"(valid ? 16 : 0));
}

template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }

// Byte offset of 16-byte chunk `chunk` of shared row `row` (rows of BK = 32 halves, 64 bytes).
template <bool kSwizzle> __device__ __forceinline__ int chunk_at(int row, int chunk) {
  return row * 64 + 16 * (kSwizzle ? chunk ^ ((row >> 1) & 3) : chunk);
}

// y[i0] = v0 if ok0 and y[i1] = v1 if ok1, in 16 bits: one 4-byte store when both are
// adjacent (i1 == i0 + 1) and 4-byte aligned.
template <typename T>
__device__ __forceinline__ void store_pair(T* y, i64 i0, i64 i1, bool ok0, bool ok1, float v0,
                                           float v1) {
  const T h0 = from_acc<T>(v0), h1 = from_acc<T>(v1);
  if (ok0 && ok1 && i1 == i0 + 1 && reinterpret_cast<unsigned long long>(y + i0) % 4 == 0) {
    *reinterpret_cast<unsigned*>(y + i0) = h0.bits | (unsigned)h1.bits << 16;
    return;
  }
  if (ok0) y[i0] = h0;
  if (ok1) y[i1] = h1;
}

// acc += a * b on one m16n8k16 tile (fragments as mma.sync lays them out).
#define MMA16816(TY)                                                                        \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TY "." TY ".f32 {%0,%1,%2,%3}, "      \
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                                    \
               : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])                      \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))

template <typename T>
__device__ __forceinline__ void mma16816(float (&acc)[4], const unsigned (&a)[4],
                                         const unsigned (&b)[2]) {
  if constexpr (same_type<T, bf16_t>::value) MMA16816("bf16");
  else MMA16816("f16");
}

template <typename T, bool kNHWC, bool kFused, int BM, int BN, int WM, int WN, int STAGES,
          bool kAsync, bool kVecA, bool kVecB, bool kLdmatrix, bool kSwizzle, bool kTable>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32,
                                  (!kVecB && (WM / 16) * (WN / 8) <= 16) ? 4 : 1)
    im2win_mma(const T* __restrict__ src, const T* __restrict__ w, const T* __restrict__ bias,
               T* __restrict__ y,
               const int2* __restrict__ taps, Geometry geo, int g0) {
  constexpr int BK = 32;                       // halves per shared row: 64 bytes, 4 chunks
  constexpr int WARPS_N = BN / WN, NT = (BM / WM) * WARPS_N * 32;
  constexpr int MI = WM / 16, NI = WN / 8;     // mma tiles per warp
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile must hold whole ldmatrix.x4 loads");
  static_assert((BM * 4) % NT == 0 && (BN * 4) % NT == 0, "16-byte chunks divide evenly");
  constexpr int A_CHUNKS = BM * 4 / NT, B_CHUNKS = BN * 4 / NT;

  __shared__ __align__(128) unsigned char As[STAGES][BM * 64];
  __shared__ __align__(128) unsigned char Bs[STAGES][BN * 64];

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;
  const int g = g0 + blockIdx.z;
  const int m0 = blockIdx.y * BM;
  const i64 j0 = (i64)blockIdx.x * BN;
  const T* w_group = w + (i64)g * geo.Kg * geo.red;

  // Each thread copies chunks (row = idx / 4, chunk = idx % 4), idx = tid + i * NT; the pixel
  // of each B row is fixed for the whole reduction, so its base is computed once.
  // inside[i]: px[i] is valid and its whole window lies inside x (always, for the
  // materialised window), so its element loads need no bounds tests.
  Pixel px[B_CHUNKS];
  bool inside[B_CHUNKS];
#pragma unroll
  for (int i = 0; i < B_CHUNKS; ++i) {
    px[i] = pixel_at(j0 + (tid + i * NT) / 4, g, geo);
    inside[i] = px[i].valid && (!kFused || (px[i].h0 >= 0 && px[i].w0 >= 0 &&
                                            px[i].h0 + (geo.R - 1) * geo.dh < geo.H &&
                                            px[i].w0 + (geo.S - 1) * geo.dw < geo.W));
  }

  auto load_slice = [&](int stage, int k0) {
#pragma unroll
    for (int i = 0; i < A_CHUNKS; ++i) {
      const int idx = tid + i * NT, row = idx / 4, chunk = idx % 4, t0 = k0 + chunk * 8;
      const bool row_ok = m0 + row < geo.Kg;
      const T* from = w_group + (i64)(row_ok ? m0 + row : 0) * geo.red;
      unsigned char* to = &As[stage][chunk_at<kSwizzle>(row, chunk)];
      if (kVecA) {  // red % 8 == 0: the chunk lies wholly inside or wholly past the row
        const bool ok = row_ok && t0 < geo.red;
        if (kAsync) {
          cp_async16(to, from + (ok ? t0 : 0), ok);
        } else {
          uint4 v = make_uint4(0, 0, 0, 0);
          if (ok) v = *reinterpret_cast<const uint4*>(from + t0);
          *reinterpret_cast<uint4*>(to) = v;
        }
      } else {
        unsigned short e[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) e[k] = row_ok && t0 + k < geo.red ? from[t0 + k].bits : 0;
        *reinterpret_cast<uint4*>(to) =
            make_uint4(e[0] | (unsigned)e[1] << 16, e[2] | (unsigned)e[3] << 16,
                       e[4] | (unsigned)e[5] << 16, e[6] | (unsigned)e[7] << 16);
      }
    }
#pragma unroll
    for (int i = 0; i < B_CHUNKS; ++i) {
      const int idx = tid + i * NT, row = idx / 4, chunk = idx % 4;
      const int t0 = k0 + chunk * 8;
      unsigned char* to = &Bs[stage][chunk_at<kSwizzle>(row, chunk)];
      if (kVecB) {  // 8 consecutive t: one contiguous, aligned run of x or x_win
        const Tap tap = tap_at<kNHWC, !kFused, kTable>(t0 < geo.red ? t0 : 0, taps, geo);
        bool ok = px[i].valid && t0 < geo.red;
        if (kFused)
          ok = ok && (unsigned)(px[i].h0 + tap.dr) < (unsigned)geo.H &&
               (unsigned)(px[i].w0 + tap.ds) < (unsigned)geo.W;
        const T* from = src + (ok ? px[i].base + tap.off : 0);
        if (kAsync) {
          cp_async16(to, from, ok);
        } else {
          uint4 v = make_uint4(0, 0, 0, 0);
          if (ok) v = *reinterpret_cast<const uint4*>(from);
          *reinterpret_cast<uint4*>(to) = v;
        }
      } else {      // element by element (e.g. C = 3): gathered through registers
        unsigned short e[8];
        int2 entries[8];   // the chunk's table entries, fetched together (few, wide loads)
        if (kTable) taps_of<8>(taps, t0, entries);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const int t = t0 + k;
          e[k] = 0;
          if (px[i].valid && t < geo.red) {
            const Tap tap = kTable ? tap_of(entries[k]) : tap_at<kNHWC, !kFused, false>(t, taps, geo);
            if (inside[i] || ((unsigned)(px[i].h0 + tap.dr) < (unsigned)geo.H &&
                              (unsigned)(px[i].w0 + tap.ds) < (unsigned)geo.W))
              e[k] = src[px[i].base + tap.off].bits;
          }
        }
        *reinterpret_cast<uint4*>(to) =
            make_uint4(e[0] | (unsigned)e[1] << 16, e[2] | (unsigned)e[3] << 16,
                       e[4] | (unsigned)e[5] << 16, e[6] | (unsigned)e[7] << 16);
      }
    }
  };

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

  // Fragments of one k16 step: A as ldmatrix.x4 (rows lane % 16, chunk lane / 16), B as
  // ldmatrix.x4 over two n8 tiles (rows lane % 8 + 8 * (lane / 16), chunk (lane / 8) % 2).
  auto load_fragments = [&](int stage, int kk, unsigned (&af)[MI][4], unsigned (&bf)[NI][2]) {
#pragma unroll
    for (int i = 0; i < MI; ++i) {
      const int row = wm * WM + i * 16 + lane % 16, chunk = kk * 2 + lane / 16;
      const unsigned char* p = &As[stage][chunk_at<kSwizzle>(row, chunk)];
      if (kLdmatrix) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(af[i][0]), "=r"(af[i][1]), "=r"(af[i][2]), "=r"(af[i][3])
                     : "r"(smem_u32(p)));
      } else {  // the same elements: row lane / 4 (+8), columns (lane % 4) * 2 (+8)
        const int r0 = wm * WM + i * 16 + lane / 4, c = (lane % 4) * 4;
        af[i][0] = *reinterpret_cast<const unsigned*>(&As[stage][chunk_at<kSwizzle>(r0, kk * 2)] + c);
        af[i][1] = *reinterpret_cast<const unsigned*>(&As[stage][chunk_at<kSwizzle>(r0 + 8, kk * 2)] + c);
        af[i][2] = *reinterpret_cast<const unsigned*>(&As[stage][chunk_at<kSwizzle>(r0, kk * 2 + 1)] + c);
        af[i][3] = *reinterpret_cast<const unsigned*>(&As[stage][chunk_at<kSwizzle>(r0 + 8, kk * 2 + 1)] + c);
      }
    }
#pragma unroll
    for (int j = 0; j < NI; j += 2) {
      if (kLdmatrix) {
        const int row = wn * WN + j * 8 + lane % 8 + 8 * (lane / 16);
        const int chunk = kk * 2 + (lane / 8) % 2;
        const unsigned char* p = &Bs[stage][chunk_at<kSwizzle>(row, chunk)];
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(bf[j][0]), "=r"(bf[j][1]), "=r"(bf[j + 1][0]), "=r"(bf[j + 1][1])
                     : "r"(smem_u32(p)));
      } else {
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
          const int row = wn * WN + (j + jj) * 8 + lane / 4, c = (lane % 4) * 4;
          bf[j + jj][0] = *reinterpret_cast<const unsigned*>(&Bs[stage][chunk_at<kSwizzle>(row, kk * 2)] + c);
          bf[j + jj][1] = *reinterpret_cast<const unsigned*>(&Bs[stage][chunk_at<kSwizzle>(row, kk * 2 + 1)] + c);
        }
      }
    }
  };

  auto compute_slice = [&](int stage) {
    unsigned af[2][MI][4], bf[2][NI][2];   // fragments double-buffered across the k16 steps
    load_fragments(stage, 0, af[0], bf[0]);
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      if (kk + 1 < BK / 16) load_fragments(stage, kk + 1, af[(kk + 1) % 2], bf[(kk + 1) % 2]);
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
          mma16816<T>(acc[i][j], af[kk % 2][i], bf[kk % 2][j]);
    }
  };

  const int slices = geo.redp / BK;
  // Prologue: STAGES - 1 slices in flight (one group each, empty groups keep the count).
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < slices) load_slice(s, s * BK);
    if (kAsync) cp_async_commit();
  }
  for (int kt = 0; kt < slices; ++kt) {
    if (STAGES == 1) {
      load_slice(0, kt * BK);
      if (kAsync) {
        cp_async_commit();
        cp_async_wait<0>();
      }
      __syncthreads();
      compute_slice(0);
      __syncthreads();
      continue;
    }
    if (kAsync) cp_async_wait<STAGES - 2>();  // slice kt has landed (this thread's copies)
    __syncthreads();                           // ... and everyone's; slice kt-1 is consumed
    const int next = kt + STAGES - 1;
    if (next < slices) load_slice(next % STAGES, next * BK);
    if (kAsync) cp_async_commit();
    compute_slice(kt % STAGES);
  }

  // Epilogue: accumulator (i, j, e) is filter row wm*WM + i*16 + lane/4 (+8 for e >= 2) and
  // pixel column wn*WN + j*8 + (lane % 4)*2 (+1 for odd e). y is overwritten, never added to.
  // Values leave in pairs adjacent in y: NHWC pairs two filter rows of one pixel (swapped
  // with lane ^ 4, which holds the neighbouring row), NCHW two pixels of one filter row.
  const bool odd_row = (lane / 4) % 2;
#pragma unroll
  for (int j = 0; j < NI; ++j) {
    const i64 pix = j0 + wn * WN + j * 8 + (lane % 4) * 2;      // pixels pix, pix + 1
    const i64 n = kNHWC ? 0 : pix / geo.PQ, pq = kNHWC ? 0 : pix - n * geo.PQ;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {                              // filter rows m, m + 8
        const int m = m0 + wm * WM + i * 16 + lane / 4 + 8 * h;
        const float b = bias && m < geo.Kg ? to_acc(bias[g * geo.Kg + m], 0.f) : 0.f;
        float v0 = add(acc[i][j][2 * h], b), v1 = add(acc[i][j][2 * h + 1], b);
        if (kNHWC) {                   // this lane keeps pixel pix + odd_row, rows mm, mm + 1
          const float other = __shfl_xor_sync(0xffffffffu, odd_row ? v0 : v1, 4);
          if (odd_row) v0 = other; else v1 = other;
          const i64 p = pix + odd_row;
          const int mm = m - odd_row;
          const i64 at = p * geo.K + g * geo.Kg + mm;
          store_pair(y, at, at + 1, p < geo.npix && mm < geo.Kg,
                     p < geo.npix && mm + 1 < geo.Kg, v0, v1);
        } else {
          const i64 k = g * geo.Kg + m, at = (n * geo.K + k) * geo.PQ + pq;
          const i64 next = pq + 1 < geo.PQ ? at + 1 : ((n + 1) * geo.K + k) * geo.PQ;
          store_pair(y, at, next, m < geo.Kg && pix < geo.npix,
                     m < geo.Kg && pix + 1 < geo.npix, v0, v1);
        }
      }
  }
}
