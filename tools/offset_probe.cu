// offset_probe.cu: can a wgmma operand start a few rows into a swizzled shared-memory tile?
// A window-reuse producer (docs/hopper.md, step 11) would copy each x row once and read tap s
// of a stride-1 row as the same tile s rows further on: operand A starting at tile + s * ROW,
// inside a swizzle atom. One warpgroup per (s, variant): A (64 x K) = rows s .. s + 63 of X
// (72 x K, ROW-byte rows stored with the ROW-byte swizzle, as the TMA writes them), B (64 x
// K) = W, D = A * B^T by wgmma m64n64k16 from shared memory. variant 0 leaves the descriptor's
// base-offset field 0, variant 1 sets it to the start's row within the swizzle pattern.
// ROW: 128 (128-byte swizzle, K = 64) or 64 (64-byte swizzle, K = 32).
typedef unsigned long long u64;

template <int ROW>
__device__ __forceinline__ unsigned swizzled(int r, int c) {   // chunk c of row r, bytes
  constexpr int MASK = ROW / 16 - 1;
  return r * ROW + ((c ^ ((r * ROW / 128) & MASK)) << 4);
}

template <int ROW>
__device__ __forceinline__ u64 desc(unsigned addr, int variant) {
  const u64 start = (addr & 0x3FFFF) >> 4;
  const u64 atom = ROW * 8;                          // bytes of one 8-row swizzle atom
  const u64 base = variant ? (addr % atom) / ROW : 0;   // the start's row within the atom ...
  const u64 offset = ROW == 128 ? base : base >> 1;     // ... in 128-byte units (PTX: bits 7-9)
  const u64 layout = ROW == 128 ? 1 : 2;
  return start | (u64)1 << 16 | (u64)(atom >> 4) << 32 | offset << 49 | layout << 62;
}

template <int ROW>
__global__ void __launch_bounds__(128) offset_probe(const unsigned short* __restrict__ x,
                                                    const unsigned short* __restrict__ w,
                                                    float* __restrict__ d) {
  constexpr int K = ROW / 2, CHUNKS = ROW / 16;
  __shared__ __align__(1024) unsigned char X[72 * ROW];
  __shared__ __align__(1024) unsigned char W[64 * ROW];
  const int tid = threadIdx.x, s = blockIdx.x, variant = blockIdx.y;
  for (int i = tid; i < 72 * CHUNKS; i += 128) {
    const int r = i / CHUNKS, c = i % CHUNKS;
    *reinterpret_cast<uint4*>(X + swizzled<ROW>(r, c)) =
        *reinterpret_cast<const uint4*>(x + r * K + c * 8);
  }
  for (int i = tid; i < 64 * CHUNKS; i += 128) {
    const int r = i / CHUNKS, c = i % CHUNKS;
    *reinterpret_cast<uint4*>(W + swizzled<ROW>(r, c)) =
        *reinterpret_cast<const uint4*>(w + r * K + c * 8);
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  float acc[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = 0.f;
  const unsigned xa = (unsigned)__cvta_generic_to_shared(X) + s * ROW;
  const unsigned wa = (unsigned)__cvta_generic_to_shared(W);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
  for (int k = 0; k < K / 16; ++k) {
    const u64 da = desc<ROW>(xa + 32 * k, variant), db = desc<ROW>(wa + 32 * k, 0);
    asm volatile(
        "{\nwgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
        "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, 1, 1, "
        "1, 0, 0;\n}\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]), "+f"(acc[4]), "+f"(acc[5]),
          "+f"(acc[6]), "+f"(acc[7]), "+f"(acc[8]), "+f"(acc[9]), "+f"(acc[10]), "+f"(acc[11]),
          "+f"(acc[12]), "+f"(acc[13]), "+f"(acc[14]), "+f"(acc[15]), "+f"(acc[16]),
          "+f"(acc[17]), "+f"(acc[18]), "+f"(acc[19]), "+f"(acc[20]), "+f"(acc[21]),
          "+f"(acc[22]), "+f"(acc[23]), "+f"(acc[24]), "+f"(acc[25]), "+f"(acc[26]),
          "+f"(acc[27]), "+f"(acc[28]), "+f"(acc[29]), "+f"(acc[30]), "+f"(acc[31])
        : "l"(da), "l"(db));
  }
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  const int warp = tid / 32, lane = tid % 32;
  float* out = d + (blockIdx.y * gridDim.x + s) * 64 * 64;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      out[(warp * 16 + lane / 4 + 8 * (e / 2)) * 64 + 8 * j + 2 * (lane % 4) + e % 2] =
          acc[4 * j + e];
}

template __global__ void offset_probe<128>(const unsigned short*, const unsigned short*, float*);
template __global__ void offset_probe<64>(const unsigned short*, const unsigned short*, float*);
