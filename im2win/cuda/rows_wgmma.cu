// rows_wgmma.cu: im2win on Hopper's Tensor Cores (sm_90a) for NHWC layers whose window columns
// lie 128 bytes apart in x's row: sw * C * 2 == 128 (C = 32 at stride 2, C = 64 at stride 1),
// float16 or bfloat16, one group, dw == 1, K <= 64 * KB filters, Q <= 112 output columns
// (plan.rows_wgmma_takes). The reduction is im2win's, in window order: output pixel (p, q)
// multiplies window row r of its window, S * C elements contiguous in x's row p*sh - pt + r*dh
// from column q*sw - pl on, by filter row r, for r = 0 .. R-1.
//
// In shared memory an x row is stored as TMA's 128-byte swizzle lays a tile of 128-byte rows
// ("lines"): line l holds padded columns l*128/(2C) .., x's column w at padded column pl + w,
// zeros elsewhere. Output pixel q's window row then starts at line q (its columns q*sw ..), and
// k16 step k of it (elements 16k .. 16k + 15) lies at line q + k/4, bytes 32*(k % 4) ..: one
// K-major, 128-byte-swizzled wgmma descriptor at row base + 128*(k/4) + 32*(k%4) (rows 128
// bytes apart, 8-row groups 1024: SBO) reads step k for all 112 pixels of the output row
// straight from x's row as stored (the swizzle follows the address: tools/offset_probe.py).
// The filters are A (64 rows a block of KB, K-major, one window row a stage, the same swizzle),
// the output row's pixels B: S*C/16 wgmma m64n112k16 a window row and filter block.
//
// A tile is a pair of output rows (n, p0) and (n, p0 + 1); a block takes a contiguous run of
// tiles; its 384 threads:
//   - warpgroup 0 (producer) fills stage (tile, r) of a STAGES ring: filter row r (64*KB rows
//     of S*C elements, by TMA: boxes of 64 x 64 of w as a matrix of K rows, w_map) and, by
//     16-byte cp.async, every x row that stage reads not copied yet, into
//     the next slots of a ring of NR rows (plan.rows_wgmma_ring simulates the order of copies
//     and reads for NR), and records which slots the stage's two rows lie in, after waiting
//     on empty[s] for the stage's previous reads; full[s] completes once the copies have
//     landed (each producer thread's arrival deferred until its own have:
//     cp.async.mbarrier.arrive.noinc, as im2win_wgmma.cu's cp.async producer and CUTLASS's
//     cp.async mainloops publish a stage), so the producer runs up to STAGES stages ahead;
//   - warpgroups 1 and 2 (consumers) each compute one output row of the tile (the second
//     recomputes the first's where P is odd and stores nothing), both reading each filter
//     stage: they release a stage once the wgmmas of the next have been issued and its own
//     have retired (wgmma.wait_group 1), and write y through shared memory of their own
//     (stmatrix .trans: the accumulators are filter-major): with K = 64*KB y's row is staged
//     densely and written by one bulk copy that runs on under the next tile's wgmmas, else
//     in 16-byte stores of whole pixels (or element by element).
// The L2 reads of a tile are its new x rows (2*sh of them) and the filter once: cv4's 56 KB
// + 196 KB for 2 * 109 * 64 outputs, against about 1 MB for 256 * 64 in im2win_wgmma.cu
// (bytes counted from the copies, not measured).

constexpr int RW_NP = 112;      // an output row's pixels (wgmma N), at most
constexpr int RW_SP = 72;       // the output staging's pitch in elements (144 bytes)

// wgmma m64n112k16, both operands from shared memory (K-major), FP32 accumulators.
template <typename T>
__device__ __forceinline__ void wgmma_n112_ss(float (&d)[56], u64 desc_a, u64 desc_b) {
  constexpr bool bf = same_type<T, bf16_t>::value;
#define RW_MMA_SS(TY)                                                                         \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                    \
               "wgmma.mma_async.sync.aligned.m64n112k16.f32." TY "." TY " {" WG_REGS_48      \
               ", %48, %49, %50, %51, %52, %53, %54, %55}, %56, %57, p, 1, 1, 0, 0;\n}\n"    \
               : WG_OUT_48, WG_F8(48)                                                         \
               : "l"(desc_a), "l"(desc_b))
  if constexpr (bf) RW_MMA_SS("bf16");
  else RW_MMA_SS("f16");
#undef RW_MMA_SS
}

// A shared-memory address with the 128-byte swizzle applied (bits 4-6 ^= bits 7-9), as the TMA
// and wgmma apply it to the addresses they compute.
__device__ __forceinline__ unsigned swizzle128(unsigned addr) {
  return addr ^ ((addr >> 3) & 0x70);
}

// Shared memory (bytes from the 1024-aligned base); plan.rows_wgmma_smem says the same.
struct RwLayout {
  int atoms, stage, slot, ring, zero, out, staging, bias, slots, bars, total;
  __host__ __device__ RwLayout(int S, int C, int W, int pl, int KB, int STAGES, int NR,
                               int zeros) {
    atoms = (S * C + 63) / 64;                              // a window row's 64-element atoms
    stage = atoms * KB * 64 * 128;                          // [atom][64*KB filters][128 bytes]
    const int x_lines = ((pl + W) * C * 2 + 127) / 128;
    slot = 128 * (x_lines > RW_NP + atoms - 1 ? x_lines : RW_NP + atoms - 1);
    ring = STAGES * stage;                                  // [NR] slots of x rows
    zero = ring + NR * slot;                                // a slot of zeros where rows pad
    out = zero + zeros * slot;                              // [2] stagings of y's row:
    const int pitched = RW_NP * RW_SP * 2, dense = RW_NP * 64 * KB * 2;
    staging = pitched > dense ? pitched : dense;            // [RW_NP][RW_SP] or [RW_NP][K]
    bias = out + 2 * staging;                               // float [64*KB]
    slots = bias + 64 * KB * 4;                             // int2 [STAGES]: a stage's rows
    bars = slots + 8 * STAGES;                              // full[STAGES], empty[STAGES]
    total = bars + 16 * STAGES;
  }
};

// PROBE (tools/rows_dev.py's rowsP<N> variants, wrong results): 1 the producer copies no x rows,
// 2 no filter rows.
template <typename T, int KB, int STAGES, int STEPS, int PROBE = 0>
__global__ void __launch_bounds__(384, 1)
    rows_wgmma(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
               T* __restrict__ y, int N, int C, int H, int W, int K, int R, int S, int P, int Q,
               int sh, int dh, int pt, int pl, int NR, int zeros, i64 xn, i64 xc, i64 xh,
               i64 xw, const __grid_constant__ TensorMap w_map) {
  // xc (1) and xw (C) go unread: a pixel's C channels are contiguous, x's rows 16-byte aligned
  const RwLayout lay(S, C, W, pl, KB, STAGES, NR, zeros);
  const int pairs = (P + 1) / 2, tiles = N * pairs;   // STEPS: S*C/16, k16 steps a window row
  const int2 run = block_run(tiles);
  const int t0 = run.x, t1 = run.y;

  extern __shared__ unsigned char dynamic_smem[];
  const unsigned base = smem_addr_1k(dynamic_smem);
  unsigned char* smem = dynamic_smem + (base - smem_addr(dynamic_smem));
  float* bias_s = reinterpret_cast<float*>(smem + lay.bias);
  int2* stage_slots = reinterpret_cast<int2*>(smem + lay.slots);
  const unsigned full = base + lay.bars, empty = full + 8 * STAGES;
  const int tid = threadIdx.x;

  // Everything up to the output staging starts as zeros: the filters past K and past S*C, the
  // ring's columns outside x, the zero slot; the copies write the rest.
  for (int i = tid * 16; i < lay.out; i += 384 * 16) st_shared16(base + i, make_uint4(0, 0, 0, 0));
  for (int i = tid; i < 64 * KB; i += 384)
    bias_s[i] = bias && i < K ? to_acc(bias[i], float()) : 0.f;
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, 129);                 // the producer's threads, the TMA's bytes
      mbar_init(empty + 8 * s, 8);                  // the two consumers' eight warps
    }
  }
  fence_async_shared();                             // the zeros, for the wgmmas
  __syncthreads();

  if (tid < 128) {  // ------------------------------------------------------------ producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(WS_PRODUCER_REGS));
    const int row_chunks = W * C / 8;
    const unsigned col0 = pl * C * 2;               // x's column 0 in a slot, bytes
    int next_h = 0, cur_n = -1, run_h0 = 0, run_slot0 = 0, ptr = 0;
    auto slot_of = [&](int h) {                     // the slot of row h of the current run
      if (h < 0 || h >= H) return -1;
      int s = run_slot0 + (h - run_h0) % NR;
      return s >= NR ? s - NR : s;
    };
    int i = 0;
    for (int t = t0; t < t1; ++t) {
      const int n = t / pairs, p0 = 2 * (t - n * pairs);
      const int last = p0 + 1 < P ? p0 + 1 : p0;   // the tile's last output row
      const int lo = max(p0 * sh - pt, 0);
      if (n != cur_n || next_h < lo) {              // a new run of rows: x's rows from lo on
        cur_n = n, next_h = lo, run_h0 = lo, run_slot0 = ptr;
      }
      for (int r = 0; r < R; ++r, ++i) {
        const int s = i % STAGES;
        if (i >= STAGES) mbar_wait(empty + 8 * s, (i / STAGES - 1) & 1);
        // x's rows up to the last output row's window row r, not copied yet
        const int hi = min(last * sh - pt + r * dh, H - 1);
        for (; next_h <= hi; ++next_h) {
          if (PROBE & 1) continue;
          const T* src = x + (i64)n * xn + (i64)next_h * xh;
          const unsigned dst = base + lay.ring + ptr * lay.slot + col0;
          for (int j = tid; j < row_chunks; j += 128)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                             swizzle128(dst + 16 * j)), "l"(src + 8 * j));
          ptr = ptr + 1 == NR ? 0 : ptr + 1;
        }
        // filter row r by TMA: box (atom a, block kb) = elements r*S*C + 64a .. of filters
        // 64kb .. 64kb + 63 (zeros past K and past the filter; the last atom's elements past
        // S*C are the next row's, never read), 128-byte swizzled, as the stage's A
        if (tid == 0)                               // before its arrivals, which release it
          stage_slots[s] = make_int2(slot_of(p0 * sh - pt + r * dh),
                                     slot_of(last * sh - pt + r * dh));
        if (tid == 0 && !(PROBE & 2)) {
          const unsigned stage = base + s * lay.stage;
          mbar_expect_bytes(full + 8 * s, lay.stage);
          for (int a = 0; a < lay.atoms; ++a)
            for (int kb = 0; kb < KB; ++kb)
              tma_tile2d(stage + (a * KB + kb) * 8192, &w_map, r * S * C + 64 * a, 64 * kb,
                         full + 8 * s);
        } else if (tid == 0) {
          mbar_arrive(full + 8 * s);
        }
        cp_async_arrive(full + 8 * s);             // once this thread's copies have landed
      }
    }
    cp_async_wait_n<0>();
    return;
  }
  // ------------------------------------------------------------------------------ consumers
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(WS_CONSUMER_REGS));
  const int consumer = tid / 128 - 1, ctid = tid % 128, warp = ctid / 32, lane = tid % 32;
  const int g = lane / 4;
  const bool vector_y = reinterpret_cast<u64>(y) % 16 == 0 && K % 8 == 0;
  // y's row (n, p) is Q*K contiguous elements: with K = 64*KB it is staged densely and
  // written by one bulk copy (cp.async.bulk) that runs on while the next tile computes
  const bool bulk_y = vector_y && K == 64 * KB;
  T* st = reinterpret_cast<T*>(smem + lay.out + consumer * lay.staging);
  const unsigned st_addr = smem_addr(st);
  const u64 zero_desc = descriptor<true>(base + lay.zero);
  int i = 0;
  for (int t = t0; t < t1; ++t) {
    const int n = t / pairs, p = 2 * (t - n * pairs) + consumer;
    float acc[KB][56];
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) {
      const float b0 = bias_s[64 * kb + 16 * warp + g], b1 = bias_s[64 * kb + 16 * warp + g + 8];
#pragma unroll
      for (int j = 0; j < 14; ++j) {
        acc[kb][4 * j] = acc[kb][4 * j + 1] = b0;
        acc[kb][4 * j + 2] = acc[kb][4 * j + 3] = b1;
      }
      pin(acc[kb]);
    }
    int previous = 0;
    for (int r = 0; r < R; ++r, ++i) {
      const int s = i % STAGES;
      mbar_wait(full + 8 * s, (i / STAGES) & 1);
      // the stage's row, read by lane 0 alone and passed on (lane 0's arrival on empty[s],
      // after its own read, is what orders it before the producer's next write of the entry)
      int slot = 0;
      if (lane == 0) slot = consumer ? stage_slots[s].y : stage_slots[s].x;
      slot = __shfl_sync(0xffffffffu, slot, 0);
      const u64 db = slot < 0 ? zero_desc : descriptor<true>(base + lay.ring + slot * lay.slot);
      const u64 da = descriptor<true>(base + s * lay.stage);
      wgmma_fence();                                // the accumulators are written
#pragma unroll
      for (int k = 0; k < STEPS; ++k) {
        const unsigned off = 128 * (k / 4) + 32 * (k % 4);        // B: line k/4, chunk 2(k%4)
#pragma unroll
        for (int kb = 0; kb < KB; ++kb)
          wgmma_n112_ss<T>(acc[kb], da + (((k / 4) * KB * 8192 + kb * 8192 + 32 * (k % 4)) >> 4),
                           db + (off >> 4));
      }
      wgmma_commit();
      if (r > 0) {                                  // the stage before's wgmmas have retired
        wgmma_wait<1>();
        __syncwarp();
        if (lane == 0) mbar_arrive(empty + 8 * previous);
      }
      previous = s;
    }
    wgmma_wait<0>();
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) pin(acc[kb]);
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + 8 * previous);

    // y's row through this consumer's staging (stmatrix_trans4: filter block kb's columns
    // 64kb + 16*warp ..)
    const int m = lane / 8;
    const int pixels = p < P ? min(Q, RW_NP) : 0;
    T* y_row = y + ((i64)n * P + p) * Q * K;
    if (bulk_y) {
      if (ctid == 0) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
      asm volatile("bar.sync %0, 128;\n" ::"r"(2 + consumer) : "memory");   // st is free
#pragma unroll
      for (int kb = 0; kb < KB; ++kb) {
#pragma unroll
        for (int j = 0; j < 14; j += 2)
          stmatrix_trans4<T>(st_addr + (((8 * (j + m / 2) + lane % 8) * 64 * KB + 64 * kb +
                                         16 * warp + 8 * (m % 2)) * 2), acc[kb], j);
      }
      fence_async_shared();                         // st, for the bulk copy
      asm volatile("bar.sync %0, 128;\n" ::"r"(2 + consumer) : "memory");
      if (ctid == 0 && pixels)
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
                     "cp.async.bulk.commit_group;\n" ::"l"(y_row), "r"(st_addr),
                     "r"(pixels * K * 2) : "memory");
      continue;
    }
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) {
#pragma unroll
      for (int j = 0; j < 14; j += 2)
        stmatrix_trans4<T>(st_addr + (((8 * (j + m / 2) + lane % 8) * RW_SP + 16 * warp +
                                       8 * (m % 2)) * 2), acc[kb], j);
      asm volatile("bar.sync %0, 128;\n" ::"r"(2 + consumer) : "memory");
      const int k0 = 64 * kb, kn = min(K - k0, 64);
      store_staged<RW_SP>(y_row, K, k0, kn, pixels, st, st_addr, ctid, vector_y);
      asm volatile("bar.sync %0, 128;\n" ::"r"(2 + consumer) : "memory");   // st written again
    }
  }
  if (bulk_y && ctid == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
