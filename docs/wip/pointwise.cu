// WIP (2026-12-03, not run on a GPU yet; not wired into the planner): a streaming 1x1
// convolution for float16 NHWC at stride 1, y[p, k] = bias[k] + sum_c x[p, c] * w[k, c], for
// the network layers with few channels over many pixels, which are memory-bound
// (efficientnet_b0.4: 38.5 MB moved, about 10 us at 4 TB/s; cuBLAS took 41 us, cuDNN 28).
// tools/pointwise_dev.py checks it against float64 and times it next to cuDNN.
//
// A block of 4 warps keeps the whole filter in shared memory (K rows of C, padded to the MMA's
// 16) and loops over tiles of 64 pixels (persistent grid), copying the next tile's rows by
// 16-byte cp.async while it multiplies this one (mma.sync m16n8k16, FP32 accumulators: each
// warp 16 pixels x all K filters); the 64 x K outputs pass through shared memory so that y is
// written in 16-byte vectors. C and K multiples of 8, K at most 160 (K/2 accumulators a
// thread); x, w, y 16-byte aligned.

#include <cuda_fp16.h>

namespace pointwise {

constexpr int WARPS = 4;
constexpr int BM = 16 * WARPS;          // pixels per tile

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
               "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldmatrix_x2(unsigned (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1]) : "r"(smem_addr(p)));
}

__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4],
                                         const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

}  // namespace pointwise

// Shared memory: the filter (K x ROW halves), two stages of pixel rows (BM x ROW), and the
// output staging (BM x (K + 8)); ROW = C padded to 16, plus 8 (16 bytes: ldmatrix's eight
// rows then start in distinct bank groups).
template <int C, int K>
constexpr int pointwise_smem_bytes() {
  return 2 * ((K + 2 * pointwise::BM) * ((C + 15) / 16 * 16 + 8) + pointwise::BM * (K + 8));
}

template <int C, int K>
__global__ void __launch_bounds__(32 * pointwise::WARPS)
pointwise_nhwc(const __half* __restrict__ x, const __half* __restrict__ w,
               const __half* __restrict__ bias, __half* __restrict__ y, long long pixels) {
  using namespace pointwise;
  static_assert(C % 8 == 0 && K % 8 == 0 && K <= 160, "C, K multiples of 8; K <= 160");
  constexpr int CP = (C + 15) / 16 * 16, ROW = CP + 8, YROW = K + 8, NT = K / 8;
  constexpr int THREADS = 32 * WARPS;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* ws = reinterpret_cast<__half*>(smem_raw);
  __half* xs = ws + K * ROW;
  __half* ys = xs + 2 * BM * ROW;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const long long tiles = (pixels + BM - 1) / BM;

  // The filter, and zeros in both stages' padding columns (cp.async never writes them).
  for (int i = tid; i < K * (CP / 8); i += THREADS) {
    const int k = i / (CP / 8), v = i % (CP / 8);
    uint4 value = make_uint4(0, 0, 0, 0);
    if (v < C / 8) value = *reinterpret_cast<const uint4*>(w + (long long)k * C + v * 8);
    *reinterpret_cast<uint4*>(ws + k * ROW + v * 8) = value;
  }
  if (CP > C) {
    for (int r = tid; r < 2 * BM; r += THREADS)
      *reinterpret_cast<uint4*>(xs + r * ROW + C) = make_uint4(0, 0, 0, 0);
  }

  auto load = [&](long long tile, int stage) {
    const long long p0 = tile * BM;
    for (int i = tid; i < BM * (C / 8); i += THREADS) {
      const int r = i / (C / 8), v = i % (C / 8);
      const bool valid = p0 + r < pixels;
      const __half* src = x + (valid ? (p0 + r) * C + v * 8 : 0);
      cp_async16(xs + (stage * BM + r) * ROW + v * 8, src, valid);
    }
    asm volatile("cp.async.commit_group;\n");
  };

  long long tile = blockIdx.x;
  int stage = 0;
  if (tile < tiles) load(tile, 0);
  for (; tile < tiles; tile += gridDim.x, stage ^= 1) {
    const long long next = tile + gridDim.x;
    if (next < tiles) {
      load(next, stage ^ 1);
      asm volatile("cp.async.wait_group 1;\n");
    } else {
      asm volatile("cp.async.wait_group 0;\n");
    }
    __syncthreads();                      // this tile's rows (and, first, the filter) are in

    float acc[NT][4];
    for (int j = 0; j < NT; ++j)
      for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
    const __half* a_rows = xs + (stage * BM + warp * 16) * ROW;
#pragma unroll
    for (int ks = 0; ks < CP / 16; ++ks) {
      unsigned a[4];
      // lanes 0-15: rows 0-15 at column ks*16; lanes 16-31: the same rows at ks*16 + 8
      ldmatrix_x4(a, a_rows + (lane % 16) * ROW + ks * 16 + (lane / 16) * 8);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        unsigned b[2];
        // lanes 0-7: filters j*8.. at column ks*16; lanes 8-15: at ks*16 + 8
        ldmatrix_x2(b, ws + (j * 8 + lane % 8) * ROW + ks * 16 + ((lane / 8) % 2) * 8);
        mma16816(acc[j], a, b);
      }
    }
    // Outputs into the staging rows: c0, c1 at row lane/4, c2, c3 at row lane/4 + 8.
    __half* y_rows = ys + warp * 16 * YROW;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int col = j * 8 + (lane % 4) * 2;
      const float b0 = bias ? __half2float(bias[col]) : 0.f;
      const float b1 = bias ? __half2float(bias[col + 1]) : 0.f;
      *reinterpret_cast<__half2*>(y_rows + (lane / 4) * YROW + col) =
          __floats2half2_rn(acc[j][0] + b0, acc[j][1] + b1);
      *reinterpret_cast<__half2*>(y_rows + (lane / 4 + 8) * YROW + col) =
          __floats2half2_rn(acc[j][2] + b0, acc[j][3] + b1);
    }
    __syncthreads();
    const long long p0 = tile * BM;
    for (int i = tid; i < BM * (K / 8); i += THREADS) {
      const int r = i / (K / 8), v = i % (K / 8);
      if (p0 + r < pixels)
        *reinterpret_cast<uint4*>(y + (p0 + r) * K + v * 8) =
            *reinterpret_cast<const uint4*>(ys + r * YROW + v * 8);
    }
    // The next iteration's first barrier keeps its staging writes after these reads.
  }
}
