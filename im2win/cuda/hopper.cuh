// hopper.cuh: Hopper's (sm_90a) primitives, shared by the kernels that use them
// (im2win_wgmma.cu, narrow_wgmma.cu, rows_wgmma.cu): shared-memory addresses and 16-byte
// copies, cp.async, mbarriers, TMA copies, wgmma (descriptors, the 128-byte swizzle, the
// instruction forms and their fences), the output rows' epilogue through shared memory
// (stmatrix_trans4, store_staged), the warp-specialised blocks' register split and run of
// tiles, and the producer warpgroup's named barrier. plan.source puts it after common.cuh (and
// gemm.cuh) and before the kernel file.

typedef unsigned long long u64;

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}

// The first 1024-byte-aligned shared address at or after p (the 128-byte swizzle's atom).
__device__ __forceinline__ unsigned smem_addr_1k(const void* p) {
  return (smem_addr(p) + 1023) & ~1023u;
}

// Warp-specialised blocks of 384 threads, a producer warpgroup and two consumers
// (__launch_bounds__(384, 1): 168 registers a thread): setmaxnreg's registers for the producer's
// threads and, of the rest, for each consumer's (a multiple of 8).
constexpr int WS_PRODUCER_REGS = 96;
constexpr int WS_CONSUMER_REGS = ((168 * 3 - WS_PRODUCER_REGS) / 2) & ~7;

// The block's contiguous run [x, y) of `tiles` work items split evenly over the grid.
__device__ __forceinline__ int2 block_run(int tiles) {
  return make_int2((int)((i64)blockIdx.x * tiles / gridDim.x),
                   (int)((i64)(blockIdx.x + 1) * tiles / gridDim.x));
}

__device__ __forceinline__ void cp_async16_to(unsigned dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}

template <int N> __device__ __forceinline__ void cp_async_wait_n() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ uint4 ld_shared16(unsigned src) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(src) : "memory");
  return v;
}

__device__ __forceinline__ void st_shared16(unsigned dst, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w) : "memory");
}

// mbarriers: `full[s]` completes when the producer's 128 threads have published stage s,
// `empty[s]` when the consumers' 8 warps have finished reading it.
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar)
               : "memory");
}

// Wait until the phase of parity `parity` of `bar` has completed.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}

// Arrive on `bar` once all of this thread's earlier cp.async copies have landed (counted as
// one of the barrier's expected arrivals: .noinc).
__device__ __forceinline__ void cp_async_arrive(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// TMA (kTma): a stage's two copies are bulk tensor copies issued by one producer thread; the
// `full` barrier (count 1) is armed with the stage's bytes and completes when they land.
struct __align__(64) TensorMap {   // a CUtensorMap, passed as a __grid_constant__ parameter
  u64 words[16];
};

__device__ __forceinline__ void mbar_expect_bytes(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// The im2col copy of one tap: the box of output pixels starting at the one whose window
// corner is (w, h) of image n, channels c.., tap offsets (ws, hs) = (s*dw, r*dh).
__device__ __forceinline__ void tma_im2col(unsigned dst, const TensorMap* map, int c, int w,
                                           int h, int n, int ws, int hs, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8};\n" ::"r"(dst),
      "l"(reinterpret_cast<u64>(map)), "r"(c), "r"(w), "r"(h), "r"(n), "r"(bar),
      "h"((unsigned short)ws), "h"((unsigned short)hs) : "memory");
}

// The tiled copy of a box of a 2-D tensor at (column t, row k).
__device__ __forceinline__ void tma_tile2d(unsigned dst, const TensorMap* map, int t, int k,
                                           unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst), "l"(reinterpret_cast<u64>(map)), "r"(t),
      "r"(k), "r"(bar) : "memory");
}

// The same copy multicast to the CTAs of the cluster in `mask` (bit i: the CTA of rank i): the
// box lands at `dst` of each, and each one's mbarrier at `bar` counts its bytes.
__device__ __forceinline__ void tma_tile2d_multicast(unsigned dst, const TensorMap* map, int t,
                                                     int k, unsigned bar, unsigned short mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<u64>(map)), "r"(t), "r"(k), "r"(bar), "h"(mask) : "memory");
}

// Clusters (the multicast filter): this CTA's rank in its cluster; an arrival on the mbarrier
// at `bar` of the CTA of rank `cta` (the default .release.cta, as CUTLASS's ClusterBarrier: what
// it orders, the warp's wgmma reads of a stage before the peer's copy into it, is complete
// once wgmma.wait_group returns; `.release.cluster` made ptxas put MEMBAR.ALL.GPU before every
// arrival, and that form ran cv4 40% slower than one block alone; this one 6% faster on an
// H100, docs/hopper.md step 34); the mbarriers'
// initialisation made visible to the cluster, and a barrier of every thread of the cluster.
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar, unsigned cta) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
      "r"(cta) : "memory");
}

__device__ __forceinline__ void cluster_sync_after_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// A bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) from shared memory
// to global memory, in this thread's bulk group; bulk_wait_read<N>: until at most N of the
// thread's groups still read their shared memory; bulk_wait<N>: ... are still in flight.
__device__ __forceinline__ void bulk_store(void* to, unsigned from, unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
               "cp.async.bulk.commit_group;\n" ::"l"(to), "r"(from), "r"(bytes) : "memory");
}
template <int N> __device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N> __device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the compiler from moving accumulator reads or writes across wgmma.wait_group.
template <int N> __device__ __forceinline__ void pin(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// wgmma's shared-memory matrix descriptor of a K-major tile starting at byte `addr` (rows of
// 128 bytes, 8-row groups 1024 bytes apart): 128-byte swizzle, or plain core matrices whose
// two 16-byte columns of a k16 step lie 128 bytes apart.
template <bool kSwizzle> __device__ __forceinline__ u64 descriptor(unsigned addr) {
  const u64 start = (addr & 0x3FFFF) >> 4, stride = 1024 >> 4;
  if (kSwizzle) return start | (u64)1 << 16 | stride << 32 | (u64)1 << 62;
  return start | (u64)(128 >> 4) << 16 | stride << 32;
}

// ... of a K-major tile of 64-byte rows (32 elements, kHalf's boxes) with 64-byte swizzle:
// 8-row groups 512 bytes apart.
__device__ __forceinline__ u64 descriptor64(unsigned addr) {
  const u64 start = (addr & 0x3FFFF) >> 4, stride = 512 >> 4;
  return start | (u64)1 << 16 | stride << 32 | (u64)2 << 62;
}

// Byte offset of 16-byte chunk c (0..7) of row r in a 128-byte-row tile, and the descriptor
// advance of one k16 step (two chunks).
template <bool kSwizzle> __device__ __forceinline__ unsigned chunk_offset(int r, int c) {
  if (kSwizzle) return r * 128 + ((c ^ (r & 7)) << 4);
  return ((r >> 3) * 8 + c) * 128 + (r & 7) * 16;
}
template <bool kSwizzle> __device__ constexpr unsigned k16_advance() { return kSwizzle ? 32 : 256; }

// wgmma m64nNk16 with FP32 accumulators d[N/2] (+= A * B; scale_d = 0 overwrites). Inline asm
// takes no arrays, so the register lists are written out.
#define WG_F8(i)                                                                          \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define WG_REGS_32                                                                         \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WG_REGS_48                                                                          \
  WG_REGS_32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define WG_REGS_64                                                                          \
  WG_REGS_48 ", %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WG_REGS_128                                                                          \
  WG_REGS_64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, "    \
             "%79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, "  \
             "%95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, " \
             "%109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, "  \
             "%122, %123, %124, %125, %126, %127"
#define WG_REGS_96                                                                          \
  WG_REGS_64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, "    \
             "%79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, "  \
             "%95"
#define WG_OUT_32 WG_F8(0), WG_F8(8), WG_F8(16), WG_F8(24)
#define WG_OUT_48 WG_OUT_32, WG_F8(32), WG_F8(40)
#define WG_OUT_64 WG_OUT_48, WG_F8(48), WG_F8(56)
#define WG_OUT_96 WG_OUT_64, WG_F8(64), WG_F8(72), WG_F8(80), WG_F8(88)
#define WG_OUT_128 WG_OUT_64, WG_F8(64), WG_F8(72), WG_F8(80), WG_F8(88), WG_F8(96), WG_F8(104), \
                   WG_F8(112), WG_F8(120)
// TR: the transpose flags, "0, 0" for K-major operands, "1, 1" for both MN-major.
#define WG_MMA(N, TY, REGS, OUTS, A, B, S, TR)                                               \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" S ", 0;\n"                              \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" REGS "}, %" A \
               ", %" B ", p, 1, 1, " TR ";\n}\n"                                             \
               : OUTS                                                                        \
               : "l"(desc_a), "l"(desc_b), "r"(scale_d))

// The .tf32 form (float operands, k8): no transpose flags, both operands K-major.
#define WG_MMA_TF32(N, REGS, OUTS, A, B, S)                                                  \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" S ", 0;\n"                             \
               "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 {" REGS "}, %" A      \
               ", %" B ", p, 1, 1;\n}\n"                                                     \
               : OUTS                                                                        \
               : "l"(desc_a), "l"(desc_b), "r"(scale_d))

// MN: both operands MN-major (16-bit types only; the backward-filter kernel's).
template <int N, typename T, bool MN = false>
__device__ __forceinline__ void wgmma(float (&d)[N / 2], u64 desc_a, u64 desc_b, int scale_d) {
  constexpr bool bf = same_type<T, bf16_t>::value;
  static_assert(N == 64 || N == 96 || N == 128 || N == 192 || N == 256, "a wgmma N we use");
  static_assert(!MN || sizeof(T) == 2, "transposed wgmma operands are 16-bit");
// (W: the accumulators' count, pasted into the register lists' names so that they reach
// WG_MMA as one argument each.)
#define WG_TYPED(N, W, A, B, S)                                                               \
  if constexpr (bf && MN) WG_MMA(N, "bf16", WG_REGS_##W, WG_OUT_##W, A, B, S, "1, 1");      \
  else if constexpr (bf) WG_MMA(N, "bf16", WG_REGS_##W, WG_OUT_##W, A, B, S, "0, 0");       \
  else if constexpr (MN) WG_MMA(N, "f16", WG_REGS_##W, WG_OUT_##W, A, B, S, "1, 1");        \
  else WG_MMA(N, "f16", WG_REGS_##W, WG_OUT_##W, A, B, S, "0, 0");
  if constexpr (same_type<T, float>::value) {
    static_assert(N != 192, "no tf32 tile of 192");
    if constexpr (N == 64) WG_MMA_TF32(64, WG_REGS_32, WG_OUT_32, "32", "33", "34");
    else if constexpr (N == 96) WG_MMA_TF32(96, WG_REGS_48, WG_OUT_48, "48", "49", "50");
    else if constexpr (N == 128) WG_MMA_TF32(128, WG_REGS_64, WG_OUT_64, "64", "65", "66");
    else WG_MMA_TF32(256, WG_REGS_128, WG_OUT_128, "128", "129", "130");
  } else if constexpr (N == 64) {
    WG_TYPED(64, 32, "32", "33", "34")
  } else if constexpr (N == 96) {
    WG_TYPED(96, 48, "48", "49", "50")
  } else if constexpr (N == 128) {
    WG_TYPED(128, 64, "64", "65", "66")
  } else if constexpr (N == 192) {
    WG_TYPED(192, 96, "96", "97", "98")
  } else {
    WG_TYPED(256, 128, "128", "129", "130")
  }
#undef WG_TYPED
}

// 8 elements gathered through registers into one 16-byte shared chunk.
__device__ __forceinline__ uint4 pack8(const unsigned short (&e)[8]) {
  return make_uint4(e[0] | (unsigned)e[1] << 16, e[2] | (unsigned)e[3] << 16,
                    e[4] | (unsigned)e[5] << 16, e[6] | (unsigned)e[7] << 16);
}

// y[i0] = v0 if ok0 and y[i0 + step] = v1 if ok1: one 4-byte store (8-byte for float) when
// the two are adjacent (step 1), both go and it is aligned.
template <typename T>
__device__ __forceinline__ void store_adjacent(T* y, i64 i0, i64 step, bool ok0, bool ok1,
                                               float v0, float v1) {
  const bool pair = step == 1 && ok0 && ok1;
  if constexpr (sizeof(T) == 4) {                  // float: one 8-byte store where aligned
    if (pair && reinterpret_cast<u64>(y + i0) % 8 == 0) {
      *reinterpret_cast<float2*>(y + i0) = make_float2(v0, v1);
      return;
    }
    if (ok0) y[i0] = from_acc<T>(v0);
    if (ok1) y[i0 + step] = from_acc<T>(v1);
  } else {
    const T h0 = from_acc<T>(v0), h1 = from_acc<T>(v1);
    if (pair && reinterpret_cast<u64>(y + i0) % 4 == 0) {
      *reinterpret_cast<unsigned*>(y + i0) = h0.bits | (unsigned)h1.bits << 16;
      return;
    }
    if (ok0) y[i0] = h0;
    if (ok1) y[i0 + step] = h1;
  }
}

// u[q] of quad thread m becomes u[m] of quad thread q (t = lane % 4): a 4 x 4 transpose of
// 32-bit words across the four threads of a quad, in two exchanges (distance 1, then 2) of
// two words each. Every lane of the warp takes part.
__device__ __forceinline__ void quad_transpose(unsigned (&u)[4], int lane) {
  const bool odd = lane & 1, high = lane & 2;
#pragma unroll
  for (int k = 0; k < 2; ++k) {        // words 2k, 2k + 1: keep the one of our parity
    const unsigned got = __shfl_xor_sync(0xffffffffu, odd ? u[2 * k] : u[2 * k + 1], 1);
    if (odd) u[2 * k] = got; else u[2 * k + 1] = got;
  }
#pragma unroll
  for (int e = 0; e < 2; ++e) {        // words e, 2 + e: keep the pair of our half
    const unsigned got = __shfl_xor_sync(0xffffffffu, high ? u[e] : u[2 + e], 2);
    if (high) u[e] = got; else u[2 + e] = got;
  }
}

// Two accumulators as two 16-bit T in one word, v0 low (rounded each as from_acc rounds).
template <typename T>
__device__ __forceinline__ unsigned pack_pair(float v0, float v1) {
  return from_acc<T>(v0).bits | (unsigned)from_acc<T>(v1).bits << 16;
}

// The 8 16-bit elements packed in u (element c: bits 16*(c%2) of u[c/2]) into y[i0 + c*step]
// for c < count: one 16-byte store where they are adjacent (step 1), all 8 go and it is aligned.
template <typename T>
__device__ __forceinline__ void store8(T* y, i64 i0, i64 step, int count, const unsigned (&u)[4]) {
  if (step == 1 && count >= 8 && reinterpret_cast<u64>(y + i0) % 16 == 0) {
    *reinterpret_cast<uint4*>(y + i0) = make_uint4(u[0], u[1], u[2], u[3]);
    return;
  }
#pragma unroll
  for (int c = 0; c < 8; ++c)
    if (c < count) y[i0 + c * step].bits = (unsigned short)(u[c / 2] >> (16 * (c % 2)));
}

// Dynamic shared memory of one block (plan.py's WgmmaTile.smem_bytes says the same): 1 KB of
// alignment slack, the ring, its 2 * STAGES mbarriers and 32 bytes for three more (the resident
// filter's, ping-pong's two), and with `table` (the cp.async producer's; TMA copies have none)
// 16 bytes per pixel row; with a resident filter of `slices` slices, the ring holds the window
// tiles only and the filter tile follows it.
__host__ __device__ constexpr int smem_bytes(int BM, int BN, int STAGES, int slices = 0,
                                             bool table = true) {
  return 1024 + STAGES * (BM + (slices ? 0 : BN)) * 128 + slices * BN * 128 + 16 * STAGES + 32 +
         (table ? 16 * BM : 0);
}
// ... and with "3xtf32"'s split: each stage holds the filter tile twice (big, small parts).
__host__ __device__ constexpr int smem_bytes_three(int BM, int BN, int STAGES) {
  return 1024 + STAGES * (BM + 2 * BN) * 128 + 16 * STAGES + 32 + 16 * BM;
}

// v rounded to TF32 (to nearest, ties away from zero), as a float whose low 13 bits are zero.
__device__ __forceinline__ float rna_tf32(float v) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
  return __uint_as_float(r);
}

// Four 8 x 16-byte matrices of shared memory, lane l giving row l % 8 of matrix l / 8: the
// thread's 4-byte word l % 4 of row l / 4 of each (ldmatrix .b16, read as 32-bit words).
__device__ __forceinline__ void ldmatrix_x4(unsigned addr, unsigned (&v)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
               : "r"(addr));
}

// wgmma m64nNk8 .tf32 with A from registers (each thread's fragment a[4]: rows g and g + 8,
// columns t and t + 4 of its warp's 16 rows, g = lane / 4, t = lane % 4) and B from shared
// memory; FP32 accumulators d[N/2] (+= A * B; scale_d = 0 overwrites).
#define WG_MMA_TF32_RS(N, REGS, OUTS, A, B, S)                                                \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" S ", 0;\n"                             \
               "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 {" REGS "}, " A      \
               ", %" B ", p, 1, 1;\n}\n"                                                     \
               : OUTS                                                                        \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))
template <int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const unsigned (&a)[4], u64 desc_b,
                                         int scale_d) {
  static_assert(N == 64 || N == 128, "the 3xTF32 tiles' N");
  if constexpr (N == 64)
    WG_MMA_TF32_RS(64, WG_REGS_32, WG_OUT_32, "{%32, %33, %34, %35}", "36", "37");
  else
    WG_MMA_TF32_RS(128, WG_REGS_64, WG_OUT_64, "{%64, %65, %66, %67}", "68", "69");
}
#undef WG_MMA_TF32_RS

// Keeps registers that an in-flight wgmma reads (its A fragment) from being reused before
// wgmma.wait_group.
template <int N> __device__ __forceinline__ void pin_regs(unsigned (&v)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(v[i])::"memory");
}

// A consumer's m64n112 accumulators acc[4j + q] (filter g (+8 for q >= 2), pixel
// 8j + 2*(lane % 4) (+1 for odd q) of the warp's 16 filters) for j and j + 1, as T, by
// stmatrix .trans, which stores pixel-major rows of 8 filters: matrix m of the x4 is
// (filters + 8*(m % 2), pixels 8*(j + m / 2)), lane l giving the address of pixel
// 8*(j + m/2) + l % 8's row (narrow_rows_wgmma's and rows_wgmma's epilogues).
template <typename T>
__device__ __forceinline__ void stmatrix_trans4(unsigned to, const float (&acc)[56], int j) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::
               "r"(to), "r"(pack2<T>(acc[4 * j], acc[4 * j + 1])),
               "r"(pack2<T>(acc[4 * j + 2], acc[4 * j + 3])),
               "r"(pack2<T>(acc[4 * j + 4], acc[4 * j + 5])),
               "r"(pack2<T>(acc[4 * j + 6], acc[4 * j + 7])) : "memory");
}

// A consumer warpgroup (thread ctid of 128) copies `pixels` staged rows of kn elements (pitch
// SP elements at st, shared address st_addr) to y's pixels K elements apart from y_row, columns
// k0 ..: 8 lanes a pixel in 16-byte stores where vector (y 16-byte aligned, K and k0 multiples
// of 8), else element by element (narrow_rows_wgmma's and rows_wgmma's epilogues).
template <int SP, typename T>
__device__ __forceinline__ void store_staged(T* y_row, int K, int k0, int kn, int pixels,
                                             const T* st, unsigned st_addr, int ctid,
                                             bool vector) {
  if (vector) {
    const int part = ctid % 8;
    if (part < kn / 8)
      for (int px = ctid / 8; px < pixels; px += 16)
        *reinterpret_cast<uint4*>(y_row + (i64)px * K + k0 + part * 8) =
            ld_shared16(st_addr + (px * SP + part * 8) * 2);
  } else {
    for (int v = ctid; v < pixels * kn; v += 128) {
      const int px = v / kn, k = v - px * kn;
      y_row[(i64)px * K + k0 + k] = st[px * SP + k];
    }
  }
}

__device__ __forceinline__ void producer_sync() {   // the producer warpgroup's own barrier
  asm volatile("bar.sync 1, 128;\n" ::: "memory");
}
