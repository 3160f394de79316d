// common.cuh: element types and conversions shared by every im2win kernel.
//
// No CUDA headers are included, so the same text compiles under CuPy's NVRTC and under nvcc
// (CI compiles it for sm_80 and sm_90 without a GPU). float16 and bfloat16 are carried as their raw 16 bits
// (CuPy passes a float16 array as a plain pointer) and converted with one PTX instruction.
// Python concatenates this file in front of each .cu file, because CuPy's kernel cache does not
// see headers pulled in with #include.

typedef long long i64;

struct half_t {
  unsigned short bits;
};

struct bf16_t {                 // bfloat16, carried the same way (ml_dtypes.bfloat16 arrays)
  unsigned short bits;
};

// Accumulator-side view of an element: every kernel loads into Acc and stores from Acc.
__device__ __forceinline__ float to_acc(float v, float) { return v; }
__device__ __forceinline__ double to_acc(double v, double) { return v; }
__device__ __forceinline__ float to_acc(half_t v, float) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
}
__device__ __forceinline__ float to_acc(bf16_t v, float) {
  return __uint_as_float((unsigned)v.bits << 16);
}

// Accumulation, IEEE: CuPy compiles every kernel with -ftz=true (appended after the options it
// is given, so a kernel cannot undo it), which flushes float32 subnormal operands and results
// to zero; __fmaf_ieee_rn ignores that flag. (On the H200 the flush cost the FP32 path up to
// 3e-4 of relative error where products fall below 2^-126; IEEE fused multiply-adds lose
// nothing there.) Double arithmetic is never flushed.
__device__ __forceinline__ float madd(float a, float b, float c) { return __fmaf_ieee_rn(a, b, c); }
__device__ __forceinline__ double madd(double a, double b, double c) { return a * b + c; }
__device__ __forceinline__ float add(float a, float b) { return __fmaf_ieee_rn(a, 1.f, b); }
__device__ __forceinline__ double add(double a, double b) { return a + b; }

template <typename T> __device__ __forceinline__ T from_acc(float v);
template <> __device__ __forceinline__ float from_acc<float>(float v) { return v; }
template <> __device__ __forceinline__ half_t from_acc<half_t>(float v) {
  half_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(v));
  return h;
}
template <> __device__ __forceinline__ bf16_t from_acc<bf16_t>(float v) {
  bf16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(v));
  return h;
}
// Two accumulators as one word of a 16-bit T, lo in the low half: one cvt.rn.*x2.f32.
template <typename T> __device__ __forceinline__ unsigned pack2(float lo, float hi);
template <> __device__ __forceinline__ unsigned pack2<half_t>(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
template <> __device__ __forceinline__ unsigned pack2<bf16_t>(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
template <typename T> __device__ __forceinline__ T from_acc(double v);
template <> __device__ __forceinline__ double from_acc<double>(double v) { return v; }

template <typename A, typename B> struct same_type { static constexpr bool value = false; };
template <typename A> struct same_type<A, A> { static constexpr bool value = true; };

// The 16-bit Tensor-Core kernels' MMA (narrow.cu, pointwise.cu): d += a * b, one
// mma.sync m16n8k16 with FP32 accumulators, a (row) and b (col) fragments of T.
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const unsigned (&a)[4],
                                             const unsigned (&b)[2]) {
  if constexpr (same_type<T, bf16_t>::value)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// The CUDA-core float32 kernels' register micro-tile (im2win_ffma.cu, wgrad_ffma.cu): one step
// of the 8 x 8 outer product, acc[i][j] += a[i] * b[j], IEEE fused multiply-adds, a and b each
// two float4 (p, q: rows i < 4 and i >= 4; u, v likewise for j), from registers or (below)
// shared memory. Each accumulator takes one product, so the order of the 64 is free and the
// bits are the same in any: row by row, or with kBlocks in 2 x 2 blocks, each block as (0,0)
// (0,1) (1,1) (1,0) and the blocks of a row pair snaking (BLOCKS), so that most products share
// an operand with the one before. The order decides which registers ptxas gives the
// accumulators; on the H200 this one took im2win_ffma.cu's pipelined loop from 41.3 (row by
// row) to 45.5 TFLOPS on cv4 (docs/hopper.md, step 15, has the orders tried). It is fragile:
// the same order written with index arithmetic compiled to other registers and ran at 41.2.
template <bool kBlocks = false>
__device__ __forceinline__ void outer_8x8(float4 p, float4 q, float4 u, float4 v,
                                          float (&acc)[8][8]) {
  const float a[8] = {p.x, p.y, p.z, p.w, q.x, q.y, q.z, q.w};
  const float b[8] = {u.x, u.y, u.z, u.w, v.x, v.y, v.z, v.w};
  constexpr int BLOCKS[64] = {   // kBlocks: product n is acc[BLOCKS[n] / 8][BLOCKS[n] % 8]
       0,  1,  9,  8,  2,  3, 11, 10,  4,  5, 13, 12,  6,  7, 15, 14,
      22, 23, 31, 30, 20, 21, 29, 28, 18, 19, 27, 26, 16, 17, 25, 24,
      32, 33, 41, 40, 34, 35, 43, 42, 36, 37, 45, 44, 38, 39, 47, 46,
      54, 55, 63, 62, 52, 53, 61, 60, 50, 51, 59, 58, 48, 49, 57, 56};
#pragma unroll
  for (int n = 0; n < 64; ++n) {
    const int i = kBlocks ? BLOCKS[n] / 8 : n / 8, j = kBlocks ? BLOCKS[n] % 8 : n % 8;
    acc[i][j] = madd(a[i], b[j], acc[i][j]);
  }
}
__device__ __forceinline__ void outer_8x8(const float* a0, const float* a1, const float* b0,
                                          const float* b1, float (&acc)[8][8]) {
  outer_8x8(*reinterpret_cast<const float4*>(a0), *reinterpret_cast<const float4*>(a1),
            *reinterpret_cast<const float4*>(b0), *reinterpret_cast<const float4*>(b1), acc);
}
