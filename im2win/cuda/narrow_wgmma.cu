// narrow_wgmma.cu: narrow.cu's dense stems (narrow_dense) on Hopper's Tensor Cores (sm_90a),
// warp-specialised: NHWC stems of C < 8 channels, one group, dw == 1, K = 32 or 64 filters,
// x's pixels C contiguous channels. The reduction is narrow_dense's, in window order: output
// pixel (p, q) multiplies the element pairs e = r*ER + j (ER = S*C rounded up to even) of
// x's rows p*sh - pt + r*dh, from column q*sw - pl on, by the filters' packed rows.
//
// A tile is TQ <= 128 output pixels of one output row; one block an SM takes the tiles in
// turn (persistent), 384 threads:
//   - warpgroup 0 (producer; a warp a row, a lane a 16-byte chunk) copies the tile's rows
//     (rows = (R - 1)*dh + 1 x rows, cols*C elements each) into stage s of a STAGES ring as
//     cp.async lays them: 16-byte copies, so that row i lands shifted by shift[i], its first
//     element's address / 2 mod 8; chunks without x's data are zero-filled, chunks that
//     straddle the padding's edge are copied whole and their padding zeroed once the copy
//     has landed, element by element only at x's two ends. It issues tile i's copies, then
//     waits for its own copies of tile i - 1, zeroes those edges and arrives on that
//     stage's `full` mbarrier (release: the consumers' wait acquires);
//   - warpgroups 1 and 2 (consumers) take the block's tiles in turn (ping-pong): each waits
//     on full[s], loads its A fragments from the stage (a pair at byte b of it: the words at
//     b & ~3 and the next, bytes b % 4.. of them; masked where past S*C or R: a masked
//     position is zero even where x holds an infinity) and runs two wgmma m64nKk16 a
//     k-step, A from registers, B (the filters, resident in shared memory, 128-byte swizzle)
//     by descriptor, two register sets so that one step's loads overlap the step before's
//     wgmmas; it frees the stage after its last loads and writes its outputs (bias,
//     conversion) through shared memory of its own in 16-byte stores, while the other
//     consumer's wgmmas run.
// docs/hopper.md (step 14) has the measurements behind this form: the first one, whose
// producer built narrow_dense's two stored copies of each row, ran cv3 at 359 us against
// narrow_dense's 257; this one at 201.

template <int BN, typename T>
__device__ __forceinline__ void narrow_rs(float (&d)[BN / 2], const unsigned (&a)[4], u64 desc_b) {
  constexpr bool bf = same_type<T, bf16_t>::value;
  static_assert(BN == 64 || BN == 32, "the stems' filter counts");
#define NARROW_RS(N, TY, REGS, OUTS, A, B)                                                    \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" REGS "}, " A \
               ", %" B ", p, 1, 1, 0;\n}\n"                                                 \
               : OUTS                                                                       \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b))
#define NARROW_REGS_16 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define NARROW_OUT_16 WG_F8(0), WG_F8(8)
  if constexpr (BN == 64) {
    if constexpr (bf) NARROW_RS(64, "bf16", WG_REGS_32, WG_OUT_32, "{%32, %33, %34, %35}", "36");
    else NARROW_RS(64, "f16", WG_REGS_32, WG_OUT_32, "{%32, %33, %34, %35}", "36");
  } else {
    if constexpr (bf)
      NARROW_RS(32, "bf16", NARROW_REGS_16, NARROW_OUT_16, "{%16, %17, %18, %19}", "20");
    else NARROW_RS(32, "f16", NARROW_REGS_16, NARROW_OUT_16, "{%16, %17, %18, %19}", "20");
  }
#undef NARROW_RS
#undef NARROW_REGS_16
#undef NARROW_OUT_16
}

// Shared memory (bytes from the 1024-aligned base); plan.narrow_wgmma_smem says the same.
struct NarrowLayout {
  int atoms, b, stage, shifts, out, table, rows_of, bias, bars, total;
  __host__ __device__ NarrowLayout(int BN, int STAGES, int E, int steps, int rows, int WR) {
    atoms = (E + 63) / 64;
    b = 0;                                                  // [atoms][BN][64], swizzled
    stage = b + atoms * BN * 128;                           // [STAGES][rows][WR]
    shifts = stage + STAGES * rows * WR * 2;                // int [STAGES][rows]
    out = shifts + (STAGES * rows * 4 + 15) / 16 * 16;      // [2][128][BN + 8]
    table = out + 2 * 128 * (BN + 8) * 2;                   // int4 [steps][4]
    rows_of = table + steps * 4 * 16;                       // int2 [steps][4]
    bias = rows_of + steps * 4 * 8;                         // float [BN]
    bars = bias + BN * 4;                                   // full[STAGES], empty[STAGES]
    total = bars + 16 * STAGES;
  }
};

template <typename T, int BN, int STAGES>
__global__ void __launch_bounds__(384, 1)
    narrow_dense_wgmma(const T* __restrict__ x, const T* __restrict__ w,
                       const T* __restrict__ bias, T* __restrict__ y, int N, int C, int H, int W,
                       int K, int G, int R, int S, int P, int Q, int sh, int sw, int dh, int dw,
                       int pt, int pl, int TP, int TQ, i64 xn, i64 xc, i64 xh, i64 xw) {
  // narrow_dense's arguments; G, dw, TP, xc and xw go unread (one group, dw == 1, tiles of one
  // output row, pixels of C contiguous channels: plan.narrow_wgmma_plan's conditions)
  constexpr int BM = 128, NW = BN / 8, SP = BN + 8;
  const int SC = S * C, ER = (SC + 1) / 2 * 2;
  const int E = (R * ER + 15) / 16 * 16, steps = E / 16;
  const int tiles_q = (Q + TQ - 1) / TQ, tiles = N * P * tiles_q;
  const int rows = (R - 1) * dh + 1, cols = (TQ - 1) * sw + S;
  const int L = cols * C, WR = (L + 9 + 7) / 8 * 8, chunks = WR / 8;
  const NarrowLayout lay(BN, STAGES, E, steps, rows, WR);

  extern __shared__ unsigned char dynamic_smem[];
  const unsigned base = smem_addr_1k(dynamic_smem);
  unsigned char* smem = dynamic_smem + (base - smem_addr(dynamic_smem));
  int* shifts = reinterpret_cast<int*>(smem + lay.shifts);
  T* out = reinterpret_cast<T*>(smem + lay.out);
  int4* table = reinterpret_cast<int4*>(smem + lay.table);
  int2* rows_of = reinterpret_cast<int2*>(smem + lay.rows_of);
  float* bias_s = reinterpret_cast<float*>(smem + lay.bias);
  const unsigned full = base + lay.bars, empty = full + 8 * STAGES;
  const int tid = threadIdx.x;

  // The filters as B: [atom][filter][64 of the reduction], 128-byte rows, swizzled.
  const T zero = from_acc<T>(0.f);
#pragma unroll 4
  for (int i = tid; i < lay.atoms * 64 * BN; i += 384) {
    const int n = i / (lay.atoms * 64), e = i - n * lay.atoms * 64, r = e / ER, j = e - r * ER;
    const T v = n < K && r < R && j < SC ? w[((i64)n * R + r) * SC + j] : zero;
    *reinterpret_cast<T*>(smem + lay.b + (e / 64) * BN * 128 +
                          chunk_offset<true>(n, (e % 64) / 8) + (e % 8) * 2) = v;
  }
  // table[step][c4]: byte offsets in a stage (before the row's shift) of the pairs 2*c4 and
  // 2*c4 + 8 of k-step `step`, and their masks (past S*C or R: zero); rows_of: their rows.
  for (int i = tid; i < 4 * steps; i += 384) {
    int v[4], ri[2];
#pragma unroll
    for (int kh = 0; kh < 2; ++kh) {
      const int e = (i / 4) * 16 + kh * 8 + (i % 4) * 2, r = e / ER, j = e - r * ER;
      v[kh] = r < R ? 2 * (r * dh * WR + j) : 0;
      ri[kh] = r < R ? r * dh : 0;
      v[2 + kh] = r >= R ? 0 : j + 1 < SC ? -1 : j < SC ? 0xffff : 0;
    }
    table[i] = make_int4(v[0], v[1], v[2], v[3]);
    rows_of[i] = make_int2(ri[0], ri[1]);
  }
  for (int i = tid; i < BN; i += 384) bias_s[i] = bias && i < K ? to_acc(bias[i], float()) : 0.f;
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, 128);                 // the producer's threads
      mbar_init(empty + 8 * s, 4);                  // the reading consumer's four warps
    }
  }
  fence_async_shared();                             // B, written by threads, for the wgmmas
  __syncthreads();

  auto origin = [&](int tile) {       // (image, output row, first output column)
    const int tq = tile % tiles_q, rest = tile / tiles_q;
    return make_int3(rest / P, rest % P, tq * TQ);
  };

  if (tid < 128) {  // ------------------------------------------------------------ producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(WS_PRODUCER_REGS));
    const int warp = tid / 32, lane = tid % 32;
    const u64 x_elem = reinterpret_cast<u64>(x) / 2;
    // x's extent in elements from x (its strides may be negative): [x_lo, x_hi)
    const i64 x_lo = (i64)(N - 1) * min(xn, (i64)0) + (i64)(H - 1) * min(xh, (i64)0);
    const i64 x_hi = (i64)(N - 1) * max(xn, (i64)0) + (i64)(H - 1) * max(xh, (i64)0) +
                     (i64)W * C;
    // Row ri of tile `tile`: element v of its window row is x's element at + v (x's data
    // where v lies in [lo, hi), padding in [0, lo) and [hi, L), never read past [0, L)),
    // stored at v + shift so that x's 16-byte chunks stay whole.
    struct Row { i64 at; int lo, hi, shift; bool in; };
    auto row_of = [&](int3 o, int ri) {
      const int h = o.y * sh - pt + ri, w0 = o.z * sw - pl;
      const int ca = max(w0, 0), cb = min(w0 + cols, W);
      Row r;
      r.at = (i64)o.x * xn + (i64)h * xh + (i64)w0 * C;
      r.lo = (ca - w0) * C;
      r.hi = (cb - w0) * C;
      r.in = h >= 0 && h < H && ca < cb;
      r.shift = r.in ? (int)((x_elem + (u64)r.at) & 7) : 0;
      return r;
    };
    // Tile i's copies: a chunk of 8 stored elements is zeros where it holds no data, one
    // 16-byte copy where it lies within x (padding it holds is zeroed by edges() once the
    // copy has landed), and element by element only at x's two ends.
    auto issue = [&](int tile, int s) {
      const unsigned stage = base + lay.stage + s * rows * WR * 2;
      const int3 o = origin(tile);
      for (int ri = warp; ri < rows; ri += 4) {
        const Row r = row_of(o, ri);
        if (lane == 0) shifts[s * rows + ri] = r.shift;
        // chunk k holds elements v0 = 8k - shift on, x's e0 + 8k on: x's data in chunks
        // [k0, k1), x itself in [s0, s1) (short of it only at x's two ends)
        const i64 e0 = r.at - r.shift;
        const int k0 = r.in ? (r.lo + r.shift) / 8 : 0, k1 = r.in ? (r.hi + r.shift + 7) / 8 : 0;
        const int s0 = e0 >= x_lo ? 0 : (int)min((x_lo - e0 + 7) / 8, (i64)chunks);
        const int s1 = (int)min(max((x_hi - e0) / 8, (i64)0), (i64)chunks);
        for (int k = lane; k < chunks; k += 32) {
          const unsigned to = stage + (ri * WR + 8 * k) * 2;
          const bool data = k >= k0 && k < k1;
          if (data && (k < s0 || k >= s1)) {
            const int v0 = 8 * k - r.shift;
            unsigned short e[8];
#pragma unroll
            for (int u = 0; u < 8; ++u)
              e[u] = v0 + u >= r.lo && v0 + u < r.hi ? x[r.at + v0 + u].bits : 0;
            st_shared16(to, pack8(e));
          } else {
            cp_async16_to(to, data ? x + (e0 + 8 * k) : x, data);   // zeros where not data
          }
        }
      }
      asm volatile("cp.async.commit_group;\n" ::: "memory");
    };
    // Once this thread's copies of tile `tile` have landed: zero the padding inside the chunks
    // that straddle lo or hi (this thread copied them: a lane owns the chunks k = lane mod
    // 32), 16 bytes read and written back, then publish the stage.
    auto edges = [&](int tile, int s) {
      const unsigned stage = base + lay.stage + s * rows * WR * 2;
      const int3 o = origin(tile);
      // the 16-byte chunk at `at` keeps its elements [from, to), the rest zeroed
      auto keep = [&](unsigned at, int from, int to) {
        uint4 v = ld_shared16(at);
        unsigned* word = reinterpret_cast<unsigned*>(&v);
#pragma unroll
        for (int u = 0; u < 4; ++u)
          word[u] &= (from <= 2 * u && 2 * u < to ? 0xffffu : 0u) |
                     (from <= 2 * u + 1 && 2 * u + 1 < to ? 0xffff0000u : 0u);
        st_shared16(at, v);
      };
      for (int ri = warp; ri < rows; ri += 4) {
        const Row r = row_of(o, ri);
        const int first = r.lo + r.shift, end = r.hi + r.shift;   // x's data, stored
        const int kl = first / 8, kr = end / 8;
        const bool left = r.in && r.lo > 0 && kl % 32 == lane;
        const bool right = r.in && r.hi < L && kr % 32 == lane && !(left && kr == kl);
        if (left) keep(stage + (ri * WR + 8 * kl) * 2, first - 8 * kl, end - 8 * kl);
        if (right) keep(stage + (ri * WR + 8 * kr) * 2, first - 8 * kr, end - 8 * kr);
      }
      mbar_arrive(full + 8 * s);
    };
    int i = 0, last = -1;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++i) {
      const int s = i % STAGES;
      if (i >= STAGES) mbar_wait(empty + 8 * s, (i / STAGES - 1) & 1);
      issue(tile, s);
      if (last >= 0) {
        cp_async_wait_n<1>();                  // tile i - 1's copies (this thread's) landed
        edges(last, (i - 1) % STAGES);
      }
      last = tile;
    }
    if (last >= 0) {
      cp_async_wait_n<0>();
      edges(last, (i - 1) % STAGES);
    }
    return;
  }
  // ------------------------------------------------------------------------------ consumers
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(WS_CONSUMER_REGS));
  const int consumer = tid / 128 - 1, warp = (tid / 32) % 4, lane = tid % 32;
  const int g = lane / 4, c4 = lane % 4;
  // at[m][h]: byte offset in a row of the window of pixel m*64 + warp*16 + g + 8h; a pixel
  // past the tile reads pixel 0's.
  int at[2][2];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int idx = m * 64 + warp * 16 + g + 8 * h;
      at[m][h] = idx < TQ ? 2 * idx * sw * C : 0;
      asm volatile("" : "+r"(at[m][h]));     // kept, not recomputed at every k-step
    }
  const bool vector_y = reinterpret_cast<u64>(y) % 16 == 0 && K % 8 == 0;
  const u64 desc_b = descriptor<true>(base + lay.b);   // + (byte offset) / 16 a k-step
  T* st = out + consumer * BM * SP;
  int i = consumer;
  for (int tile = blockIdx.x + consumer * gridDim.x; tile < tiles;
       tile += 2 * gridDim.x, i += 2) {
    const int s = i % STAGES;
    mbar_wait(full + 8 * s, (i / STAGES) & 1);
    const unsigned stage = base + lay.stage + s * rows * WR * 2;
    const int* shift = shifts + s * rows;
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
    // A fragments of step `step` into a[m]: rows g (+8), pairs 2*c4 (+8) of the k-step; a
    // pair at shared address b is bytes b % 4 .. b % 4 + 3 of the words at b & ~3 and the next.
    auto load = [&](int step, unsigned (&a)[2][4]) {
      const int4 u = table[step * 4 + c4];
      const int2 rr = rows_of[step * 4 + c4];
      const unsigned o0 = stage + u.x + 2 * shift[rr.x], o1 = stage + u.y + 2 * shift[rr.y];
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const unsigned b = at[m][q % 2] + (q / 2 ? o1 : o0), word = b & ~3u;
          unsigned w0, w1, pair;
          asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(w0) : "r"(word));
          asm volatile("ld.shared.u32 %0, [%1+4];\n" : "=r"(w1) : "r"(word));
          asm("prmt.b32.f4e %0, %1, %2, %3;\n" : "=r"(pair) : "r"(w0), "r"(w1), "r"(b));
          a[m][q] = pair & (unsigned)(q / 2 ? u.w : u.z);
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
        narrow_rs<BN, T>(acc[m], a[m], desc_b + (u64)((step / 4) * BN * 8 + (step % 4) * 2));
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
      if (idx >= TQ || o.z + idx >= Q) continue;
      T* to = y_tile + (i64)idx * K + part * 8;
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

// ------------------------------------------------------------------------------------------
// narrow_rows_wgmma: the dense stems of stride 2 (sw == 2, dw == 1, C <= 4 channels, S of 3, 4, 7
// or 8 taps, K <= 64 filters, Q <= 112, P >= STAGES, R * ceil(S/2)/2 <= 16:
// plan.narrow_rows_takes), with no window fragments loaded at all. In shared memory x's row h
// (image n) lies in ring slot (n*H + h) mod NR as cols columns of 4 channels (8 bytes; channels
// past C zero, columns outside x zero): column pl + w holds x's column w. Output pixel q's window
// row then starts at byte 16q (two columns of four channels a stride), so the pixels' runs lie 16
// bytes apart and overlap: one no-swizzle wgmma descriptor with 16-byte rows (pixels), chunks of 8
// elements (two columns) 16 bytes apart (LBO) and 8-pixel groups 128 bytes apart (SBO) reads the
// window rows of all the tile's pixels straight from the row as stored, in window order. Where S is
// odd a window row's last chunk holds one column past the window: that chunk is read from the
// slot's second copy of the row, whose odd columns are zero (the chunk starts at an even column),
// by a descriptor whose LBO reaches into it, so no product with x's data outside the window is
// taken (an infinity there stays out). The filters are A (64 rows, K-major, zero past K, C, S;
// staged in shared memory with 128-byte swizzle, then held in each consumer's registers), the
// tile's pixels B (N = 112): one wgmma m64n112k16 per k16 step, R * ceil(S/2)/2 steps a tile.
//
// A tile is one output row (n, p); a block takes a contiguous run of them, so consecutive
// tiles share all but sh of their x rows and the producer warpgroup copies only the new rows:
// raw, ROWS_AHEAD tiles ahead, by 16-byte cp.async, then once landed converted to columns of
// 4 channels (2-byte shared loads, 8-byte stores; C a template parameter), and publishes the
// tile on full[s]
// (fence.proxy.async first: the wgmmas read through the async proxy). The two
// consumer warpgroups take the block's tiles in turn, free the stage after their wgmmas
// retire, and write y through shared memory (stmatrix .trans: the accumulators are
// filter-major) in 16-byte stores of whole pixels. A slot is reused only once every tile
// that read it has freed its stage: the STAGES tiles in flight span at most NR =
// 2*span + (STAGES - 1)*sh rows of (n*H + h) (two images at most: P >= STAGES).

constexpr int ROWS_NP = 112;      // a tile's pixels (wgmma N)
constexpr int ROWS_SP = 72;       // the output staging's pitch in elements (144 bytes)

// wgmma m64n112k16 with A from registers (a[4]: the m16n8k16 A fragment of the thread's
// warp's 16 rows) and B from shared memory, FP32 accumulators.
template <typename T>
__device__ __forceinline__ void wgmma_n112_rs(float (&d)[56], const unsigned (&a)[4],
                                              u64 desc_b) {
  constexpr bool bf = same_type<T, bf16_t>::value;
#define ROWS_MMA_RS(TY)                                                                        \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                     \
               "wgmma.mma_async.sync.aligned.m64n112k16.f32." TY "." TY " {" WG_REGS_48       \
               ", %48, %49, %50, %51, %52, %53, %54, %55}, {%56, %57, %58, %59}, %60, p, 1, "  \
               "1, 0;\n}\n"                                                                     \
               : WG_OUT_48, WG_F8(48)                                                          \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b))
  if constexpr (bf) ROWS_MMA_RS("bf16");
  else ROWS_MMA_RS("f16");
#undef ROWS_MMA_RS
}

constexpr int ROWS_AHEAD = 4;     // tiles whose raw rows the producer copies ahead

// Shared memory (bytes from the 1024-aligned base); plan.narrow_rows_smem says the same.
struct RowsLayout {
  int atoms, copy, slot, nr, raw_row, raw_nr, a, ring, zero, raw, out, bias, tiles, bars, total;
  __host__ __device__ RowsLayout(int R, int S, int C, int W, int pl, int sh, int dh,
                                 int STAGES) {
    const int pairs = (S + 1) / 2, span = (R - 1) * dh + 1;
    atoms = (R * pairs * 8 + 63) / 64;
    int cols = pl + W > 2 * (ROWS_NP - 1) + 2 * pairs ? pl + W : 2 * (ROWS_NP - 1) + 2 * pairs;
    cols = (cols + 1) / 2 * 2;
    copy = cols * 8;                                        // one copy of a row, 16-byte multiple
    slot = copy * (S % 2 ? 2 : 1);                          // the copy with odd columns zero
    nr = 2 * span + (STAGES - 1) * sh;
    raw_row = (W * C * 2 + 14 + 15) / 16 * 16;              // x's row from its 16-byte chunk
    raw_nr = 2 * span + (ROWS_AHEAD + 2) * sh;
    a = 0;                                                  // [atoms][64][64], swizzled
    ring = a + atoms * 64 * 128;                            // [nr] slots
    zero = ring + nr * slot;                                // a slot of zeros (padding rows)
    raw = zero + slot;                                      // [raw_nr][raw_row]
    out = raw + raw_nr * raw_row;                           // [2][ROWS_NP][ROWS_SP]
    bias = out + 2 * ROWS_NP * ROWS_SP * 2;                 // float [64]
    tiles = bias + 64 * 4;                                  // int4 [8]: a tile's new rows
    bars = tiles + 8 * 16;                                  // full[STAGES], empty[STAGES]
    total = bars + 16 * STAGES;
  }
};

// PROBE (tools/narrow_dev.py's rowsN variants, wrong results): 1 the producer copies nothing
// from x (converts whatever its raw slots hold), 2 the consumers run no wgmma, 4 they store no
// y, 8 the producer converts nothing, 16 the consumers skip their epilogue.
template <typename T, int C, int STAGES, int PROBE = 0>
__global__ void __launch_bounds__(384, 1)
    narrow_rows_wgmma(const T* __restrict__ x, const T* __restrict__ w,
                      const T* __restrict__ bias, T* __restrict__ y, int N, int C_, int H, int W,
                      int K, int G, int R, int S, int P, int Q, int sh, int sw, int dh, int dw,
                      int pt, int pl, int TP, int TQ, i64 xn, i64 xc, i64 xh, i64 xw) {
  // narrow_dense's arguments; C_ (C), G, sw (2), dw (1), TP, TQ, xc (1) and xw (C) go unread
  const int pairs = (S + 1) / 2, row_steps = pairs / 2, span = (R - 1) * dh + 1;
  const RowsLayout lay(R, S, C, W, pl, sh, dh, STAGES);
  const int tiles = N * P;
  const int2 run = block_run(tiles);
  const int t0 = run.x, t1 = run.y;

  extern __shared__ unsigned char dynamic_smem[];
  const unsigned base = smem_addr_1k(dynamic_smem);
  unsigned char* smem = dynamic_smem + (base - smem_addr(dynamic_smem));
  T* out = reinterpret_cast<T*>(smem + lay.out);
  float* bias_s = reinterpret_cast<float*>(smem + lay.bias);
  const unsigned full = base + lay.bars, empty = full + 8 * STAGES;
  const int tid = threadIdx.x;

  // The ring and the zero slot start as zeros: the producer writes x's columns only.
  for (int i = tid * 16; i < lay.raw - lay.ring; i += 384 * 16)
    st_shared16(base + lay.ring + i, make_uint4(0, 0, 0, 0));
  // The filters as A: [atom][filter][64 of the reduction], 128-byte rows, swizzled; element e
  // of filter n is tap (r, s), channel c: e = (r*pairs*2 + s)*4 + c.
  // A 16-byte chunk a thread at a time (two taps of four channels, one row r: pairs*8 is a
  // multiple of 8), its 8 loads together.
#pragma unroll 2
  for (int i = tid; i < lay.atoms * 64 * 8; i += 384) {
    const int n = i / (lay.atoms * 8), e = (i - n * lay.atoms * 8) * 8;
    const int r = e / (pairs * 8), s0 = (e - r * pairs * 8) / 4;
    unsigned short v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int s = s0 + u / 4, c = u % 4;
      v[u] = n < K && r < R && s < S && c < C ? w[(((i64)n * R + r) * S + s) * C + c].bits : 0;
    }
    st_shared16(base + lay.a + (e / 64) * 64 * 128 + chunk_offset<true>(n, (e % 64) / 8), pack8(v));
  }
  for (int i = tid; i < 64; i += 384) bias_s[i] = bias && i < K ? to_acc(bias[i], float()) : 0.f;
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, 128);                 // the producer's threads
      mbar_init(empty + 8 * s, 4);                  // the reading consumer's four warps
    }
  }
  fence_async_shared();                             // A and the zeros, for the wgmmas
  __syncthreads();
  const int odd_copy = S % 2 ? lay.copy : 0;

  if (tid < 128) {  // ------------------------------------------------------------ producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(WS_PRODUCER_REGS));
    const u64 x_elem = reinterpret_cast<u64>(x) / 2;
    const int shift_step = (int)((u64)xh & 7);      // a row's step in x's alignment
    // x's extent in elements from x (its strides may be negative): [x_lo, x_hi)
    const i64 x_lo = (i64)(N - 1) * min(xn, (i64)0) + (i64)(H - 1) * min(xh, (i64)0);
    const i64 x_hi = (i64)(N - 1) * max(xn, (i64)0) + (i64)(H - 1) * max(xh, (i64)0) +
                     (i64)W * C;
    // The block's tiles in order: tile (n, p)'s new rows [from, hi) of image n (all its rows
    // where it is the block's first or its image's first, else those below the tile
    // before's), and the raw ring's and the ring's slots of x's row g = n*H + from, carried
    // from tile to tile (rows only go down; a division and two modulos a block).
    struct Cursor {
      int n, p, from, hi, g, raw_slot, slot;
    };
    auto rows_of = [&](Cursor& u, bool first) {
      const int top = u.p * sh - pt, lo = max(top, 0);
      u.hi = min(top + span, H);
      u.from = first || u.p == 0 ? lo : max(lo, min(top - sh + span, H));
      u.g = u.n * H + u.from;
    };
    auto next = [&](Cursor& u) {
      const int g = u.g;
      if (++u.p == P) u.p = 0, ++u.n;
      rows_of(u, false);
      u.raw_slot += u.g - g;
      while (u.raw_slot >= lay.raw_nr) u.raw_slot -= lay.raw_nr;
      u.slot += u.g - g;
      while (u.slot >= lay.nr) u.slot -= lay.nr;
    };
    auto wrap = [](int slot, int nr) { return slot + 1 == nr ? 0 : slot + 1; };
    Cursor at_issue;
    at_issue.n = t0 / P, at_issue.p = t0 - at_issue.n * P;
    rows_of(at_issue, true);
    at_issue.raw_slot = (int)((unsigned)at_issue.g % lay.raw_nr);
    at_issue.slot = (int)((unsigned)at_issue.g % lay.nr);
    // The block's tile i's rows for its conversion: (from, hi, raw slot | ring slot << 16,
    // x's alignment at row from) in entry i mod 8 of a table, written by thread 0 with its
    // copies ROWS_AHEAD tiles ahead, read after the producer_sync of iteration i (and
    // written again for tile i + 8 in iteration i + 4, past every thread's reads of it).
    int4* const tile_rows = reinterpret_cast<int4*>(smem + lay.tiles);
    // A tile's new rows copied raw into their raw slots, x's 16-byte chunks by cp.async (a
    // row from the chunk holding its first element: `shift` elements before it), a chunk
    // reaching outside x element by element; one commit group a tile, even an empty one.
    // Thread tid copies chunk tid of each row (a row has at most 117: W <= 232, C <= 4;
    // plan.narrow_rows_takes).
    auto issue = [&](const Cursor& u, bool any, int j) {
      i64 e0 = (i64)u.n * xn + (i64)u.from * xh;
      if (any && tid == 0)
        tile_rows[j & 7] = make_int4(u.from, u.hi, u.raw_slot | u.slot << 16,
                                     (int)((x_elem + (u64)e0) & 7));
      if (any && !(PROBE & 1)) {
        int raw_slot = u.raw_slot;
        for (int h = u.from; h < u.hi; ++h) {
          const int shift = (int)((x_elem + (u64)e0) & 7);
          if (tid < (shift + W * C + 7) / 8) {
            const i64 e = e0 - shift + 8 * tid;
            const unsigned to = base + lay.raw + raw_slot * lay.raw_row + 16 * tid;
            if (e >= x_lo && e + 8 <= x_hi) {
              asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to), "l"(x + e));
            } else {
              unsigned short v[8];
#pragma unroll
              for (int j = 0; j < 8; ++j)
                v[j] = e + j >= x_lo && e + j < x_hi ? x[e + j].bits : 0;
              st_shared16(to, pack8(v));
            }
          }
          e0 += xh;
          raw_slot = wrap(raw_slot, lay.raw_nr);
        }
      }
      asm volatile("cp.async.commit_group;\n" ::: "memory");
    };
    // Column c of a row from its raw slot into its ring slot: 4 channels (8 bytes, zeros past
    // C), in the second copy zeros at odd columns.
    auto convert = [&](const unsigned short* raw_row, unsigned char* ring_row, int c) {
      unsigned short e[4] = {0, 0, 0, 0};
#pragma unroll
      for (int ch = 0; ch < C; ++ch) e[ch] = raw_row[c * C + ch];
      const uint2 v = make_uint2(e[0] | (unsigned)e[1] << 16, e[2] | (unsigned)e[3] << 16);
      *reinterpret_cast<uint2*>(ring_row + 8 * c) = v;
      if (S % 2)
        *reinterpret_cast<uint2*>(ring_row + odd_copy + 8 * c) =
            (pl + c) % 2 ? make_uint2(0, 0) : v;
    };
    for (int t = t0; t < t0 + ROWS_AHEAD; ++t) {
      issue(at_issue, t < t1, t - t0);
      if (t + 1 < t1) next(at_issue);
    }
    for (int t = t0, i = 0; t < t1; ++t, ++i) {
      issue(at_issue, t + ROWS_AHEAD < t1, i + ROWS_AHEAD);
      if (t + ROWS_AHEAD + 1 < t1) next(at_issue);
      cp_async_wait_n<ROWS_AHEAD>();                // this thread's copies of tile t landed
      producer_sync();                              // ... and every producer thread's
      const int s = i % STAGES;
      if (i >= STAGES) mbar_wait(empty + 8 * s, (i / STAGES - 1) & 1);
      // tile t's new rows into the ring, thread tid converting columns tid and tid + 128
      // (W <= 232)
      if (!(PROBE & 8)) {
        const int4 rows = tile_rows[i & 7];
        int raw_slot = rows.z & 0xFFFF, slot = rows.z >> 16, shift = rows.w;
        for (int h = rows.x; h < rows.y; ++h) {
          const unsigned short* raw_row = reinterpret_cast<const unsigned short*>(
              smem + lay.raw + raw_slot * lay.raw_row) + shift;
          unsigned char* ring_row = smem + lay.ring + slot * lay.slot + 8 * pl;
          if (tid < W) convert(raw_row, ring_row, tid);
          if (tid + 128 < W) convert(raw_row, ring_row, tid + 128);
          shift = (shift + shift_step) & 7;
          raw_slot = wrap(raw_slot, lay.raw_nr);
          slot = wrap(slot, lay.nr);
        }
      }
      fence_async_shared();                         // this thread's rows, for the wgmmas
      mbar_arrive(full + 8 * s);
    }
    cp_async_wait_n<0>();
    return;
  }
  // ------------------------------------------------------------------------------ consumers
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(WS_CONSUMER_REGS));
  const int consumer = tid / 128 - 1, ctid = tid % 128, warp = ctid / 32, lane = tid % 32;
  const int g = lane / 4;
  // B: pixels 16 bytes apart, 8-pixel groups 128 (SBO), a k16 step's two chunks 16 bytes
  // apart, or, in a window row's last step where S is odd, the second from the row's copy
  // with odd columns zero (LBO)
  const u64 b_near = (u64)(128 >> 4) << 32 | (u64)1 << 16;
  const u64 b_last = S % 2 ? (u64)(128 >> 4) << 32 | (u64)((lay.copy + 16) >> 4) << 16 : b_near;
  const float b0 = bias_s[16 * warp + g], b1 = bias_s[16 * warp + g + 8];
  const bool vector_y = reinterpret_cast<u64>(y) % 16 == 0 && K % 8 == 0;
  T* st = out + consumer * ROWS_NP * ROWS_SP;
  const unsigned st_addr = smem_addr(st);
  // The filters' fragments in registers for the whole kernel (R * row_steps <= 16 k16 steps:
  // plan.narrow_rows_takes), loaded once from A by ldmatrix: step k's are A's rows 16*warp..,
  // chunks 2*(k % 4) and + 1 of atom k / 4 (A from registers takes a quarter of the wgmmas'
  // shared-memory reads away: an H100, cv3 129.3 -> 123.0 us).
  const int steps = R * row_steps;
  unsigned af[16][4];
#pragma unroll
  for (int k = 0; k < 16; ++k)
    if (k < steps)
      ldmatrix_x4(base + lay.a + (k / 4) * 64 * 128 +
                      chunk_offset<true>(16 * warp + lane % 16, 2 * (k % 4) + lane / 16),
                  af[k]);
  int i = consumer;
  for (int t = t0 + consumer; t < t1; t += 2, i += 2) {
    const int s = i % STAGES;
    mbar_wait(full + 8 * s, (i / STAGES) & 1);
    const int n = t / P, p = t - n * P, top = p * sh - pt;
    // window row r (x's row top + r*dh) lies in slot (n*H + top + r*dh) mod nr; top >= -pt
    // and span <= nr, so one modulo a tile and a subtraction a row
    int slot = (int)((unsigned)(n * H + top + lay.nr) % lay.nr);
    float acc[56];
#pragma unroll
    for (int j = 0; j < 14; ++j) {
      acc[4 * j] = acc[4 * j + 1] = b0;
      acc[4 * j + 2] = acc[4 * j + 3] = b1;
    }
    pin(acc);
    wgmma_fence();                                  // the accumulators are written
    {
      u64 db = 0;
#pragma unroll
      for (int k = 0; k < 16; ++k) {
        if (k < steps) {
          const bool second = row_steps == 2 && k % 2;   // a window row's second k16 step
          if (!second) {
            const int h = top + (row_steps == 2 ? k / 2 : k) * dh;
            const unsigned row =
                h >= 0 && h < H ? base + lay.ring + slot * lay.slot : base + lay.zero;
            slot += dh;
            if (slot >= lay.nr) slot -= lay.nr;
            db = (u64)((row & 0x3FFFF) >> 4);
          }
          const u64 desc_b =
              second ? (db + 2) | b_last : db | (row_steps == 2 ? b_near : b_last);
          if (!(PROBE & 2)) wgmma_n112_rs<T>(acc, af[k], desc_b);
        }
      }
    }
    wgmma_commit();
    wgmma_wait<0>();
    pin(acc);
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + 8 * s);       // this warp's wgmmas have read the stage

    // y's row through this consumer's staging, pixel-major (stmatrix_trans4)
    if (PROBE & 16) continue;
    const int m = lane / 8;
#pragma unroll
    for (int j = 0; j < 14; j += 2)
      stmatrix_trans4<T>(st_addr + (((8 * (j + m / 2) + lane % 8) * ROWS_SP + 16 * warp +
                                     8 * (m % 2)) * 2), acc, j);
    asm volatile("bar.sync %0, 128;\n" ::"r"(2 + consumer) : "memory");
    const int pixels = PROBE & 4 ? 0 : min(Q, ROWS_NP);
    T* y_row = y + ((i64)n * P + p) * Q * K;
    store_staged<ROWS_SP>(y_row, K, 0, K, pixels, st, st_addr, ctid, vector_y);
    asm volatile("bar.sync %0, 128;\n" ::"r"(2 + consumer) : "memory");   // st is written again
  }
}
