// docs/wip/stem_wgmma.cu: NOT RUN YET (written 2026-12-04 with no device time left; nvcc
// compiles it for sm_90a). A warp-specialised Hopper form of narrow.cu's dense stems
// (narrow_dense), for issue 10's cv3. docs/wip/stem_wgmma_dev.py compiles it after
// common.cuh, im2win_wgmma.cu and narrow.cu (whose helpers it uses), checks it against the
// float64 reference and times it against "auto" and cuDNN.
//
// Why (docs/hopper.md, step 13): narrow_dense runs copy, barrier, k-loop and epilogue one
// after another in every warp; ncu on cv3 has the Tensor pipe 24% busy, issue 52%. Here:
//   - warpgroup 0 (producer) copies each tile's raw rows (16-byte cp.async, the next tile's
//     while it stores one) and turns them into the two stored copies of narrow_dense (as x
//     holds them, and one element later) in one of STAGES stages, then arrives on full[s];
//   - warpgroups 1 and 2 (consumers) take the block's tiles in turn (ping-pong): each waits
//     on full[s], loads its A fragments word by word from the stored rows (narrow_dense's
//     table of byte offsets and masks), and runs two wgmma m64nBNk16 a k-step with A from
//     registers and B (the filters, resident in shared memory, 128-byte swizzle) by
//     descriptor; it frees the stage after its last k-step's loads and writes its outputs
//     (bias, conversion) through shared memory of its own in 16-byte stores while the other
//     consumer's wgmmas run.
// One block an SM, persistent. K == BN (one filter tile), one group, dw == 1, x's pixels C
// contiguous channels and x 4-byte aligned; tiles of TP x TQ <= 128 output pixels.
// The producer's fill and store_rows are narrow_dense's for four warps instead of eight:
// when this lands they become one helper of narrow.cu's (duplicates --change shows them).

template <int BN, typename T>
__device__ __forceinline__ void stem_rs(float (&d)[BN / 2], const unsigned (&a)[4], u64 desc_b) {
  constexpr bool bf = same_type<T, bf16_t>::value;
  static_assert(BN == 64 || BN == 32, "the stems' filter counts");
#define STEM_RS(N, TY, REGS, OUTS, A, B)                                                    \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" REGS "}, " A \
               ", %" B ", p, 1, 1, 0;\n}\n"                                                 \
               : OUTS                                                                       \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b))
#define STEM_REGS_16 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define STEM_OUT_16 WG_F8(0), WG_F8(8)
  if constexpr (BN == 64) {
    if constexpr (bf) STEM_RS(64, "bf16", WG_REGS_32, WG_OUT_32, "{%32, %33, %34, %35}", "36");
    else STEM_RS(64, "f16", WG_REGS_32, WG_OUT_32, "{%32, %33, %34, %35}", "36");
  } else {
    if constexpr (bf)
      STEM_RS(32, "bf16", STEM_REGS_16, STEM_OUT_16, "{%16, %17, %18, %19}", "20");
    else STEM_RS(32, "f16", STEM_REGS_16, STEM_OUT_16, "{%16, %17, %18, %19}", "20");
  }
#undef STEM_RS
#undef STEM_REGS_16
#undef STEM_OUT_16
}

// Smem layout (bytes from the 1024-aligned base); the dev script's stem_smem says the same.
struct StemLayout {
  int atoms, b, win, raw, out, table, pixel, bias, bars, total;
  __host__ __device__ StemLayout(int BN, int STAGES, int E, int steps, int rows, int WIN,
                                 int raw_pitch) {
    atoms = (E + 63) / 64;
    b = 0;                                                  // [atoms][BN][64], swizzled
    win = b + atoms * BN * 128;                             // [STAGES][2][WIN]
    raw = win + STAGES * 2 * WIN * 2;                       // [2][rows][raw_pitch]
    out = raw + 2 * rows * raw_pitch * 2;                   // [2][128][BN + 8]
    table = out + 2 * 128 * (BN + 8) * 2;                   // int4 [2][steps][4]
    pixel = table + 2 * steps * 4 * 16;                     // int [128]
    bias = pixel + 128 * 4;                                 // float [BN]
    bars = bias + BN * 4;                                   // full[STAGES], empty[STAGES]
    total = bars + 16 * STAGES;
  }
};

template <typename T, int BN, int STAGES>
__global__ void __launch_bounds__(384, 1)
    stem_wgmma(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
               T* __restrict__ y, int N, int C, int H, int W, int K, int R, int S, int P, int Q,
               int sh, int sw, int dh, int pt, int pl, int TP, int TQ, i64 xn, i64 xh) {
  constexpr int BM = 128, NW = BN / 8, SP = BN + 8;
  constexpr int PRODUCER_REGS = 96, CONSUMER_REGS = ((168 * 3 - PRODUCER_REGS) / 2) & ~7;
  const int SC = S * C, ER = (SC + 1) / 2 * 2;
  const int E = (R * ER + 15) / 16 * 16, steps = E / 16;
  const int tiles_q = (Q + TQ - 1) / TQ, tiles_p = (P + TP - 1) / TP;
  const int tiles = N * tiles_p * tiles_q;
  const int rows = (TP - 1) * sh + (R - 1) * dh + 1, cols = (TQ - 1) * sw + S;
  const int L = cols * C, WR = (L + 2 + 7) / 8 * 8, WIN = rows * WR;
  const int raw_pitch = (L + 16 + 7) / 8 * 8;
  const StemLayout lay(BN, STAGES, E, steps, rows, WIN, raw_pitch);

  extern __shared__ unsigned char dynamic_smem[];
  const unsigned base = (smem_addr(dynamic_smem) + 1023) & ~1023u;
  unsigned char* smem = dynamic_smem + (base - smem_addr(dynamic_smem));
  T* win = reinterpret_cast<T*>(smem + lay.win);
  T* raw = reinterpret_cast<T*>(smem + lay.raw);
  T* out = reinterpret_cast<T*>(smem + lay.out);
  int4* table = reinterpret_cast<int4*>(smem + lay.table);
  int* pixel = reinterpret_cast<int*>(smem + lay.pixel);
  float* bias_s = reinterpret_cast<float*>(smem + lay.bias);
  const unsigned full = base + lay.bars, empty = full + 8 * STAGES;
  const int tid = threadIdx.x;

  // The filters as B: [atom][filter][64 of the reduction], 128-byte rows, swizzled.
  const T zero = from_acc<T>(0.f);
  for (int i = tid; i < lay.atoms * 64 * BN; i += 384) {
    const int n = i / (lay.atoms * 64), e = i - n * lay.atoms * 64, r = e / ER, j = e - r * ER;
    const T v = n < K && r < R && j < SC ? w[((i64)n * R + r) * SC + j] : zero;
    *reinterpret_cast<T*>(smem + lay.b + (e / 64) * BN * 128 +
                          chunk_offset<true>(n, (e % 64) / 8) + (e % 8) * 2) = v;
  }
  for (int i = tid; i < 8 * steps; i += 384) {     // as narrow_dense's table, WIN apart
    const int p = i / (4 * steps), step = i / 4 % steps;
    int v[4];
#pragma unroll
    for (int kh = 0; kh < 2; ++kh) {
      const int e = step * 16 + kh * 8 + (i % 4) * 2, r = e / ER, j = e - r * ER;
      const int f = r < R ? r * dh * WR + j : 0;
      v[kh] = 2 * f + ((f + p) & 1) * (2 * WIN + 2);
      v[2 + kh] = r >= R ? 0 : j + 1 < SC ? -1 : 0xffff;
    }
    table[i] = make_int4(v[0], v[1], v[2], v[3]);
  }
  for (int i = tid; i < BM; i += 384) pixel[i] = i / TQ << 16 | i % TQ;
  for (int i = tid; i < BN; i += 384) bias_s[i] = bias && i < K ? to_acc(bias[i], float()) : 0.f;
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, 128);
      mbar_init(empty + 8 * s, 4);                  // the reading consumer's four warps
    }
  }
  fence_async_shared();                             // B, written by threads, for the wgmmas
  __syncthreads();

  auto origin = [&](int tile) {       // (image, first output row, first output column)
    const int tq = tile % tiles_q, rest = tile / tiles_q;
    return make_int3(rest / tiles_p, rest % tiles_p * TP, tq * TQ);
  };

  if (tid < 128) {  // ------------------------------------------------------------ producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
    const int warp = tid / 32, lane = tid % 32;
    // narrow_fill_raw<16> for four warps
    auto fill = [&](int tile, T* rows_to) {
      const int3 o = origin(tile);
      const T* xb = x + (i64)o.x * xn;
      const int h0 = o.y * sh - pt, w0 = o.z * sw - pl;
      const int ca = max(w0, 0), cb = min(w0 + cols, W);
      for (int ri = warp; ri < rows; ri += 4) {
        const int h = h0 + ri;
        if (h < 0 || h >= H || ca >= cb) continue;
        const u64 first = reinterpret_cast<u64>(xb + h * xh + ca * C);
        const u64 end = reinterpret_cast<u64>(xb + h * xh + cb * C);
        const u64 start = first & ~3ull, stop = end & ~3ull, row0 = first & ~15ull;
        unsigned char* row = reinterpret_cast<unsigned char*>(rows_to + ri * raw_pitch);
        u64 words_to = stop;
        const u64 a16 = (start + 15) & ~15ull, e16 = stop & ~15ull;
        if (a16 < e16) {
          for (u64 g = a16 + 16 * lane; g < e16; g += 16 * 32)
            narrow_copy<16>(row + (g - row0), reinterpret_cast<const void*>(g), true);
          for (u64 g = e16 + 4 * lane; g < stop; g += 4 * 32)
            narrow_copy<4>(row + (g - row0), reinterpret_cast<const void*>(g), true);
          words_to = a16;
        }
        for (u64 g = start + 4 * lane; g < words_to; g += 4 * 32)
          narrow_copy<4>(row + (g - row0), reinterpret_cast<const void*>(g), true);
        if (lane == 0 && end % 4) *reinterpret_cast<T*>(row + (stop - row0)) = xb[h * xh + cb * C - 1];
      }
    };
    // narrow_dense's store_rows into stage `to` (win0, then win1 WIN elements later).
    auto store_rows = [&](int tile, const T* rows_from, T* to) {
      const int3 o = origin(tile);
      const T* xb = x + (i64)o.x * xn;
      const int h0 = o.y * sh - pt, w0 = o.z * sw - pl;
      const int ca = max(w0, 0), cb = min(w0 + cols, W);
      const int lo = (ca - w0) * C, hi = (cb - w0) * C;
      const unsigned first = (unsigned)(reinterpret_cast<u64>(xb) / 2) + (unsigned)(ca * C);
      const int chunks = WR / 8;
      int ri = tid / chunks, m = tid - ri * chunks;
      for (; ri < rows;) {
        const int h = h0 + ri, v = 8 * m;
        const bool row_in = h >= 0 && h < H && ca < cb;
        const int shift = (int)((first + (unsigned)h * (unsigned)xh) & 7) - lo;
        const T* from = rows_from + ri * raw_pitch;
        uint4 c0, c1;
        if (row_in && v - 1 >= lo && v + 7 < hi) {
          const int a = v - 1 + shift;
          const unsigned* words = reinterpret_cast<const unsigned*>(from) + (a >> 1);
          const unsigned u0 = words[0], u1 = words[1], u2 = words[2], u3 = words[3],
                         u4 = words[4];
          const uint4 whole = (a & 1) ? make_uint4(u1, u2, u3, u4) : make_uint4(u0, u1, u2, u3);
          const uint4 halves = make_uint4(__byte_perm(u0, u1, 0x5432), __byte_perm(u1, u2, 0x5432),
                                          __byte_perm(u2, u3, 0x5432), __byte_perm(u3, u4, 0x5432));
          c0 = (a & 1) ? whole : halves;
          c1 = (a & 1) ? halves : whole;
        } else {
          unsigned short e[9];
#pragma unroll
          for (int i = 0; i < 9; ++i) {
            const int u = v - 1 + i;
            e[i] = row_in && u >= lo && u < hi ? from[u + shift].bits : 0;
          }
          c0 = make_uint4(e[1] | (unsigned)e[2] << 16, e[3] | (unsigned)e[4] << 16,
                          e[5] | (unsigned)e[6] << 16, e[7] | (unsigned)e[8] << 16);
          c1 = make_uint4(e[0] | (unsigned)e[1] << 16, e[2] | (unsigned)e[3] << 16,
                          e[4] | (unsigned)e[5] << 16, e[6] | (unsigned)e[7] << 16);
        }
        reinterpret_cast<uint4*>(to + ri * WR)[m] = c0;
        reinterpret_cast<uint4*>(to + WIN + ri * WR)[m] = c1;
        for (m += 128; m >= chunks; m -= chunks) ++ri;
      }
    };
    if (blockIdx.x < tiles) {
      fill(blockIdx.x, raw);
      asm volatile("cp.async.commit_group;\n" ::);
    }
    int i = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++i) {
      const bool next = tile + gridDim.x < tiles;
      if (next) fill(tile + gridDim.x, raw + ((i + 1) & 1) * rows * raw_pitch);
      narrow_wait_this(next);
      producer_sync();                               // every producer thread's copies landed
      const int s = i % STAGES;
      if (i >= STAGES) mbar_wait(empty + 8 * s, (i / STAGES - 1) & 1);
      store_rows(tile, raw + (i & 1) * rows * raw_pitch, win + s * 2 * WIN);
      mbar_arrive(full + 8 * s);
      producer_sync();                               // raw[i & 1] is filled again next
    }
    return;
  }
  // ------------------------------------------------------------------------------ consumers
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
  const int consumer = tid / 128 - 1, warp = (tid / 32) % 4, lane = tid % 32;
  const int g = lane / 4, c4 = lane % 4;
  // at[m][h]: byte offset in a stage of the window of pixel m*64 + warp*16 + g + 8h (+1 where
  // its first element is odd); a pixel past the tile reads pixel 0's.
  int at[2][2];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int idx = m * 64 + warp * 16 + g + 8 * h, pr = idx / TQ, pc = idx - pr * TQ;
      const int b0 = idx < TP * TQ ? pr * sh * WR + pc * sw * C : 0;
      at[m][h] = 2 * b0 + (b0 & 1);
    }
  const bool even = sw * C % 2 == 0;
  const bool vector_y = reinterpret_cast<u64>(y) % 16 == 0 && K % 8 == 0;
  T* st = out + consumer * BM * SP;
  int i = consumer;
  for (int tile = blockIdx.x + consumer * gridDim.x; tile < tiles;
       tile += 2 * gridDim.x, i += 2) {
    const int s = i % STAGES;
    mbar_wait(full + 8 * s, (i / STAGES) & 1);
    const unsigned char* stage = reinterpret_cast<const unsigned char*>(win + s * 2 * WIN);
    float acc[2][BN / 2];
#pragma unroll
    for (int j = 0; j < NW; ++j) {
      const float b0 = bias_s[j * 8 + c4 * 2], b1 = bias_s[j * 8 + c4 * 2 + 1];
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        acc[m][4 * j] = acc[m][4 * j + 2] = b0;
        acc[m][4 * j + 1] = acc[m][4 * j + 3] = b1;
      }
    }
    // A fragments of step `step` into a[m]: rows g (+8), pairs 2*c4 (+8) of the k-step.
    auto load = [&](int step, unsigned (&a)[2][4]) {
      const int4 u0 = table[step * 4 + c4];
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          int4 u = u0;
          int from = at[m][q % 2];
          if (!even) {
            if (from & 1) u = table[(steps + step) * 4 + c4];
            from &= ~1;
          }
          a[m][q] = *reinterpret_cast<const unsigned*>(stage + from + (q / 2 ? u.y : u.x)) &
                    (unsigned)(q / 2 ? u.w : u.z);
        }
    };
    // Two register sets: a step's loads overlap the step before's wgmmas, and a set is
    // loaded again only once the group that read it has retired (wait_group 1, then pin_regs
    // so that the compiler keeps its registers until then).
    unsigned a0[2][4], a1[2][4] = {};
    auto issue = [&](int step, unsigned (&a)[2][4]) {
      wgmma_fence();                                 // the fragments' registers are written
#pragma unroll
      for (int m = 0; m < 2; ++m)
        stem_rs<BN, T>(acc[m], a[m], descriptor<true>(base + lay.b + (step / 4) * BN * 128 +
                                                       (step % 4) * 32));
      wgmma_commit();
    };
#pragma unroll
    for (int m = 0; m < 2; ++m) pin(acc[m]);
    load(0, a0);
    for (int step = 0; step < steps; step += 2) {
      issue(step, a0);
      if (step + 1 < steps) {
        wgmma_wait<1>();                             // step - 1's group (a1) has retired
#pragma unroll
        for (int m = 0; m < 2; ++m) pin_regs(a1[m]);
        load(step + 1, a1);
        issue(step + 1, a1);
      }
      if (step + 2 < steps) {
        wgmma_wait<1>();                             // step's group (a0) has retired
#pragma unroll
        for (int m = 0; m < 2; ++m) pin_regs(a0[m]);
        load(step + 2, a0);
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + 8 * s);       // this warp's loads of the stage are done
    wgmma_wait<0>();
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      pin(acc[m]);
      pin_regs(a0[m]);
      pin_regs(a1[m]);
    }

    // Outputs: acc[m][4j + q] is pixel m*64 + warp*16 + g (+8 for q >= 2), channel 8j + 2*c4
    // (+1 for odd q); through this warp's rows of `st` to 16-byte stores of y.
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int j = 0; j < NW; ++j)
          *reinterpret_cast<unsigned*>(st + (m * 64 + warp * 16 + g + 8 * half) * SP + j * 8 +
                                       c4 * 2) =
              pack2<T>(acc[m][4 * j + 2 * half], acc[m][4 * j + 2 * half + 1]);
    __syncwarp();
    const int3 o = origin(tile);
    T* y_tile = y + (((i64)o.x * P + o.y) * Q + o.z) * K;
    for (int v = lane; v < 2 * 16 * NW; v += 32) {  // this warp's 32 pixels, NW vectors each
      const int r = v / NW, part = v % NW, idx = (r / 16) * 64 + warp * 16 + r % 16;
      const int pr = pixel[idx] >> 16, pc = pixel[idx] & 0xffff;
      if (idx >= TP * TQ || o.y + pr >= P || o.z + pc >= Q) continue;
      T* to = y_tile + ((i64)pr * Q + pc) * K + part * 8;
      const T* from = st + idx * SP + part * 8;
      if (vector_y) {
        *reinterpret_cast<uint4*>(to) = *reinterpret_cast<const uint4*>(from);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) to[e] = from[e];
      }
    }
    __syncwarp();                                    // st is written again next tile
  }
}
