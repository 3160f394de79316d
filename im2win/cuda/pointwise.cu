// pointwise.cu: float16 / bfloat16 1x1 convolutions at stride 1 with few filters, NHWC, on
// Tensor Cores (mma.sync m16n8k16, FP32 accumulation):
//
//   y[p, k] = bias[k] + sum_{c<C} x[p, c] * w[k, c]      (p: the N*H*W pixels)
//
// These layers (MobileNetV2's and EfficientNet's projections and expansions, ResNet's first
// 1x1) move many bytes for little arithmetic: they are bound by memory, and a GEMM tile that
// refetches the filter or writes through registers scalar by scalar leaves bandwidth unused.
// Here the filter stays in shared memory for the whole launch and x streams through once:
//   - A block of 4 warps copies the filter into shared memory ([K][ROW] halves, C padded with
//     zeros to CP, a multiple of 16), then loops over tiles of BM = 64 pixels
//     (blockIdx.x + i*gridDim.x: a persistent grid sized to the device by the plan).
//   - Each tile's pixel rows (C channels, contiguous) come in by 16-byte cp.async into one of
//     two stages while the previous tile is multiplied: the next tile's copy is issued before
//     this one's math.
//   - Warp w multiplies pixels 16w..16w+15 by all K = 8*NT filters: A fragments (pixels) and B
//     fragments (filters) by ldmatrix, the reduction in order c = 0..C-1, 16 at a time.
//   - The 64 x K outputs (bias added, converted) pass through shared memory so that y is
//     written in 16-byte vectors (element by element where y is not 16-byte aligned).
// ROW = CP + 8 elements: each ldmatrix's eight rows then start in distinct 16-byte bank groups.
//
// x: pixel p's C channels at x + p*step (step a multiple of 8 elements, x 16-byte aligned: an
// NHWC array, or a channel slice of one, whose pixels are evenly strided); w contiguous
// (K, C); y contiguous (N*H*W, K). C a multiple of 8; offsets 64-bit.

namespace pointwise {

constexpr int WARPS = 4;
constexpr int THREADS = 32 * WARPS;
constexpr int BM = 16 * WARPS;            // pixels per tile

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void copy16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)),
               "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}

__device__ __forceinline__ void ldmatrix_x2(unsigned (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1]) : "r"(smem_u32(p)));
}

}  // namespace pointwise

// N, H, W, C, step: the problem's extents and x's pixel stride in elements; xn..xw: x's element
// strides (the record every depthwise.cu / narrow.cu / pointwise.cu launch passes; the pixels
// are read through `step`). Shared memory (bytes): 2 * ((K + 2*BM) * ROW + BM * (K + 8)).
template <typename T, int NT>
__global__ void __launch_bounds__(pointwise::THREADS, NT <= 2 ? 8 : NT == 3 ? 6 : 4)
pointwise_nhwc(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
               T* __restrict__ y, int N, int H, int W, int C, int step, i64 xn, i64 xc, i64 xh,
               i64 xw) {
  using namespace pointwise;
  constexpr int K = 8 * NT, YROW = K + 8;
  const int CP = (C + 15) / 16 * 16, ROW = CP + 8, CV = C / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* ws = reinterpret_cast<T*>(smem_raw);
  T* xs = ws + K * ROW;
  T* ys = xs + 2 * BM * ROW;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const i64 pixels = (i64)N * H * W;
  const i64 tiles = (pixels + BM - 1) / BM;

  // The filter (zeros past C), and zeros in both stages' columns C..CP-1 (never copied).
  const bool w_vec = ((size_t)w & 15) == 0;
  for (int i = tid; i < K * (CP / 8); i += THREADS) {
    const int k = i / (CP / 8), v = i - k * (CP / 8);
    uint4 value = make_uint4(0, 0, 0, 0);
    if (v < CV) {
      const T* src = w + (i64)k * C + v * 8;
      if (w_vec) {
        value = *reinterpret_cast<const uint4*>(src);
      } else {
        unsigned u[4];
        for (int j = 0; j < 4; ++j) u[j] = src[2 * j].bits | (unsigned)src[2 * j + 1].bits << 16;
        value = make_uint4(u[0], u[1], u[2], u[3]);
      }
    }
    *reinterpret_cast<uint4*>(ws + k * ROW + v * 8) = value;
  }
  if (CP > C) {
    for (int r = tid; r < 2 * BM; r += THREADS)
      *reinterpret_cast<uint4*>(xs + r * ROW + C) = make_uint4(0, 0, 0, 0);
  }

  auto load = [&](i64 tile, int stage) {
    const i64 p0 = tile * BM;
    for (int i = tid; i < BM * CV; i += THREADS) {
      const int r = i / CV, v = i - r * CV;
      const bool valid = p0 + r < pixels;
      copy16(xs + (stage * BM + r) * ROW + v * 8, x + (valid ? (p0 + r) * step + v * 8 : 0),
             valid);
    }
    asm volatile("cp.async.commit_group;\n");
  };

  const bool y_vec = ((size_t)y & 15) == 0;
  i64 tile = blockIdx.x;
  int stage = 0;
  if (tile < tiles) load(tile, 0);
  for (; tile < tiles; tile += gridDim.x, stage ^= 1) {
    const i64 next = tile + gridDim.x;
    if (next < tiles) {
      load(next, stage ^ 1);          // its stage was last read before the previous barrier
      asm volatile("cp.async.wait_group 1;\n");
    } else {
      asm volatile("cp.async.wait_group 0;\n");
    }
    __syncthreads();                  // this tile's rows (and, first, the filter) are in

    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j)
      for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
    // lanes 0-15: A rows 0-15 at column c; lanes 16-31: the same rows at c + 8
    const T* a_row = xs + (stage * BM + warp * 16 + lane % 16) * ROW + (lane / 16) * 8;
    // lanes 0-7: filters j*8.. at column c; lanes 8-15: at c + 8
    const T* b_row = ws + (lane % 8) * ROW + ((lane / 8) % 2) * 8;
    for (int c = 0; c < CP; c += 16) {
      unsigned a[4];
      ldmatrix_x4(a, a_row + c);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        unsigned b[2];
        ldmatrix_x2(b, b_row + j * 8 * ROW + c);
        mma_m16n8k16<T>(acc[j], a, b);
      }
    }
    // The outputs into this warp's staging rows: c0, c1 at row lane/4, c2, c3 at row lane/4 + 8.
    T* y_rows = ys + warp * 16 * YROW;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int col = j * 8 + (lane % 4) * 2;
      const float b0 = bias ? to_acc(bias[col], 0.f) : 0.f;
      const float b1 = bias ? to_acc(bias[col + 1], 0.f) : 0.f;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const T v0 = from_acc<T>(acc[j][2 * half] + b0);
        const T v1 = from_acc<T>(acc[j][2 * half + 1] + b1);
        *reinterpret_cast<unsigned*>(y_rows + (lane / 4 + 8 * half) * YROW + col) =
            v0.bits | (unsigned)v1.bits << 16;
      }
    }
    __syncthreads();
    const i64 p0 = tile * BM;
    for (int i = tid; i < BM * NT; i += THREADS) {
      const int r = i / NT, v = i - r * NT;
      if (p0 + r >= pixels) continue;
      const T* src = ys + r * YROW + v * 8;
      T* dst = y + (p0 + r) * K + v * 8;
      if (y_vec) {
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
      } else {
        for (int e = 0; e < 8; ++e) dst[e] = src[e];
      }
    }
    // The next iteration's first barrier keeps its staging writes after these reads.
  }
}
