// im2win_wgmma.cu: float16 / bfloat16 im2win convolution on Hopper Tensor Cores (sm_90a:
// wgmma.mma_async with both operands in shared memory, FP32 accumulation), the whole batch in
// one persistent launch.
//
// The same GEMM per group as im2win_mma.cu (gemm.cuh: B[t, pixel] = src[base(pixel) + off(t)],
// the reduction t in window order for materialised windows), transposed so that a tile's rows
// are pixels and its columns filters: D[pixel, filter] = sum_t X[pixel, t] * W[filter, t].
// Both operands are "K-major" (t contiguous), wgmma's natural layout: each pixel's window run
// and each filter row are 64-element (128-byte) rows of shared memory. In NHWC the two
// accumulators a thread holds side by side are neighbouring filters of one pixel: adjacent in y.
//
// Block: three warpgroups (384 threads), warp-specialised (setmaxnreg moves registers from the
// producer to the consumers).
//   producer (warpgroup 0): for each BK = 64 slice, copies the BM x 64 window tile and the
//     BN x 64 filter tile into the next free stage of a STAGES-deep ring: 16-byte cp.async
//     (zero-filled outside x, past the reduction and past the last pixel or filter) where
//     8 consecutive t are one aligned run (kVecX, kVecW), element by element through
//     registers otherwise (then fence.proxy.async, so that the Tensor Cores see the stores).
//     Each thread publishes a stage with cp.async.mbarrier.arrive on its `full` mbarrier,
//     which fires when the thread's copies into it have landed: the producer never waits for
//     its own copies, only for free stages, so up to STAGES - 1 slices are in flight.
//   consumers (warpgroups 1, 2): each owns BM/2 pixel rows x BN filters of the tile as MI = BM/128
//     wgmma m64nBNk16 accumulators; waits on `full`, issues the slice's 4*MI wgmmas, and frees
//     the previous stage (its `empty` mbarrier) once those have retired (wgmma.wait_group 1).
//     The epilogue (bias, conversion, stores straight from registers: 16 bytes a thread for
//     16-bit NHWC y, after a transpose across each quad) of one tile overlaps
//     the producer's copies for the next.
// Tiles (pixel tile, filter tile, group) are dealt round-robin to a grid of at most one block
// per SM (kPersistent; off: one block per tile), filter tiles fastest, so blocks running together
// share their window rows in L2.
//
// Resident filter (kResident, TMA copies, one filter tile and group a launch): the producer
// copies the whole BN x reduction filter tile into shared memory once, before the first work
// item (one `w_full` mbarrier), and each stage of the ring holds the window tile only; every
// work item of the block reads its filter slices there. The L2 reads of the filter go (cv8,
// 128x128: 144 KB a tile, about half of what the tile reads) and the ring's stages halve.
//
// Ping-pong consumers (kPingPong, TMA copies, persistent grid): each consumer warpgroup takes
// whole tiles (MI = BM/64 accumulators of 64 rows), the two taking the block's work items in
// turn. The producer fills the ring in work-item order, so the consumers' main loops
// alternate and one's epilogue runs while the other's wgmmas do. A consumer skips the other's
// stages by counting them; since a `full` wait tells phases apart by parity only, it starts a
// main loop only once the other has claimed the last stage of its previous one (the `done`
// mbarriers), so that it never waits more than one phase ahead.
//
// Split-K (SPLITS > 1, TMA copies only): a tile's reduction is cut into SPLITS consecutive
// ranges of slices, each a work item of its own (items: tile-major, so one tile's ranges run
// side by side); each writes its FP32 partial sums to partial[split][pixel][filter], and
// split_reduce adds them in order of the split, then the bias, into y: the same bits every
// run (no atomics).
//
// float32 (precision "tf32" and "3xtf32", TMA copies only): the same rows hold 32 floats and
// each k-step is wgmma m64nNk8 .tf32 (32 bytes of a row, as a k16 step of 16-bit elements).
// "tf32" multiplies the operands as they lie (the Tensor Cores read the top 19 bits of each
// float). "3xtf32" (kThree) splits each operand v into big = rna_tf32(v) and small =
// rna_tf32(v - big) and sums big*small + small*big + big*big. Each slice's sum starts from
// zero in accumulators of its own (`part`), the slice's cross terms first (small, so their
// sum loses nothing that matters), then its four big*big steps, and is added to the tile's in
// FP32 (round to nearest): the Tensor Cores' own FP32 additions are the coarser ones, and
// with the three terms of each k-step in turn, accumulated in place over the whole
// reduction, 3xTF32 had 6x the error of FP32 fused multiply-adds (H200, 2026-12-01: 3.8e-6
// against 6.0e-7, max-norm relative, a 3x3 of 64 channels). The two sets of accumulators fit
// the registers of the 128x128 and 256x64 tiles only. The filter comes split (tf32_split,
// once a call: its big parts in rows 0..K-1 of the map, its small parts in rows K..2K-1),
// and a stage holds the window tile, then the filter tile's big parts, then its small parts.
// Each consumer splits its own rows of the window tile in registers: ldmatrix gives each
// thread wgmma's A fragment of a k-step (rows g and g + 8, columns t and t + 4), whose big
// and small parts feed the register-A form of wgmma. So no stage is rewritten in shared
// memory, and x's parts are read from it once instead of once a term.
//
// Shared-memory rows are 128 bytes: with kSwizzle the 16-byte chunk c of row r sits at chunk
// c ^ (r % 8) (wgmma's 128-byte swizzle: the 8 chunks a group of 8 producer threads writes
// land in distinct banks); without, rows are stored as wgmma's plain 8 x 16-byte core matrices
// (those 8 writes 128 bytes apart share banks), for the ablation (tools/wgmma_dev.py
// --ablation, cv8 float16 NHWC, H200: 152 TFLOPS without the swizzle, which also turns TMA
// off, against 417 with both and 285 with the swizzle and cp.async copies).

// The primitives (copies, mbarriers, TMA, wgmma) are hopper.cuh's.

constexpr int INT_MIN_ = -2147483647 - 1;   // PixelRow.w0 past the last pixel

struct PixelRow {
  i64 base;    // the pixel's byte address (16-byte copies) or element offset (gathers) in src
  int h0, w0;  // fused: the window's top-left corner in x; w0 == INT_MIN past the last pixel
};

// Row r of the producer's pixel table: a plain shared-memory load (ordered by the barriers
// around the table's writes), so that the compiler may batch the loads of a slice.
__device__ __forceinline__ PixelRow pixel_row(const int4* table, int r) {
  const int4 v = table[r];
  PixelRow px;
  px.base = (i64)((u64)(unsigned)v.y << 32 | (unsigned)v.x);
  px.h0 = v.z;
  px.w0 = v.w;
  return px;
}

struct TileAt {
  i64 m0;      // first pixel
  int n0, g;   // first filter of the group, group
};

template <int BM, int BN>
__device__ __forceinline__ TileAt tile_at(i64 tile, i64 ptiles, int ftiles, int g0) {
  TileAt at;
  const i64 rest = tile / ftiles;
  at.n0 = (int)(tile - rest * ftiles) * BN;
  const i64 gi = rest / ptiles;
  at.m0 = (rest - gi * ptiles) * BM;
  at.g = g0 + (int)gi;
  return at;
}

// The kernel's body; the two entry points below pass it the TMA descriptors or none.
template <typename T, bool kNHWC, bool kFused, int BM, int BN, int STAGES, bool kVecX, bool kVecW,
          bool kSwizzle, bool kTable, bool kPersistent, bool kTma, int SPLITS = 1,
          bool kThree = false, bool kResident = false, bool kPingPong = false, bool kHalf = false,
          int MC = 1, int PROBE = 0>
__device__ __forceinline__ void wgmma_conv(const T* __restrict__ src, const T* __restrict__ w,
                                           const T* __restrict__ bias, T* __restrict__ y,
                                           const int2* __restrict__ taps, const Geometry& geo,
                                           int g0, const TensorMap* x_map,
                                           const TensorMap* w_map,
                                           float* __restrict__ partial = nullptr) {
  static_assert(!kTma || (kNHWC && kFused && kSwizzle), "TMA copies: NHWC, fused, swizzled");
  static_assert(SPLITS == 1 || (kTma && kPersistent), "split-K: TMA copies, persistent grid");
  static_assert(sizeof(T) == 2 || kTma, "float (TF32) runs with TMA copies only");
  static_assert(!kThree || same_type<T, float>::value, "3xTF32 splits float operands");
  static_assert(!kResident || (kTma && kPersistent && SPLITS == 1 && !kThree),
                "a resident filter: TMA copies, the persistent grid, no split, no 3xTF32");
  static_assert(!kPingPong || (kTma && kPersistent && !kThree),
                "ping-pong consumers: TMA copies, the persistent grid, no 3xTF32");
  static_assert(!kHalf || (kTma && sizeof(T) == 2), "32-channel boxes: TMA, 16-bit types");
  static_assert(!PROBE || (kTma && !kHalf && !kThree), "PROBE: x boxes of 64 channels only");
  static_assert(MC == 1 || (kTma && kPersistent && SPLITS == 1 && !kThree && !kResident &&
                            BN % (8 * MC) == 0),
                "a multicast filter: TMA copies, the persistent grid, no split, no 3xTF32, "
                "no resident filter, whole 8-row groups of the filter tile a CTA");
  constexpr int BK = 128 / (int)sizeof(T);           // elements per shared row (128 bytes)
  constexpr int K_STEPS = 4;                         // wgmma k-steps per row: 32 bytes each
  // m64 accumulators per consumer: half the tile's rows each, or (kPingPong) all of them.
  constexpr int MI = kPingPong ? BM / 64 : BM / 128;
  constexpr int A_BYTES = BM * 128, W_BYTES = BN * 128;   // one slice of each operand
  constexpr int SUB_BYTES = BM * 64;      // kHalf: one 32-channel box of the tile's pixels
  // What a stage's copies fill: the window tile, the filter tile (kThree: its big and small
  // parts), no filter with kResident.
  constexpr int STAGE_BYTES = A_BYTES + (kResident ? 0 : W_BYTES * (kThree ? 2 : 1));
  constexpr int ROWS_X = BM / 16, ROWS_W = BN / 16;  // rows per producer thread
  // Registers per thread: the block starts with 168 (__launch_bounds__(384, 1)); setmaxnreg
  // moves them between warpgroups within that pool (asking for more than it holds hangs).
  constexpr int POOL = 168 * 3;
  // kThree: the producer is one TMA thread, and the consumers hold x's split fragments too.
  constexpr int PRODUCER_REGS = kThree ? 40 : 96;
  constexpr int CONSUMER_REGS = ((POOL - PRODUCER_REGS) / 2) & ~7;
  static_assert(BM == 128 || BM == 256, "two consumer warpgroups of 64 or 128 pixel rows");
  static_assert(MI * BN <= 256, "at most 128 accumulators per consumer thread");
  static_assert(!kThree || MI * BN <= 128, "3xTF32 adds each slice's sum in a second set of "
                "accumulators: at most 64 + 64 per thread (128x128, 256x64)");
  static_assert(STAGES >= 1 && (kThree ? smem_bytes_three(BM, BN, STAGES)
                                        : smem_bytes(BM, BN, STAGES, kResident, !kTma)) <=
                                           227 * 1024,
                "the ring fits shared memory");

  const int groups = min(geo.K / geo.Kg - g0, 65535);
  const i64 ptiles = (geo.npix + BM - 1) / BM;
  const int ftiles = (geo.Kg + BN - 1) / BN;
  const i64 tiles = ptiles * ftiles * groups;
  // TMA: each tap's channels in blocks of 64 (C/G a multiple of 64), taps in (r, s) order:
  // the reduction order of fused NHWC windows.
  const int cblocks = (geo.Cg + BK - 1) / BK;
  // kHalf (C/G a multiple of 32, not of 64): units of 32 channels of one tap, two a slice (the
  // last slice holds one where the units are odd); the slice's 64 filter columns stay one run.
  const int units = kHalf ? geo.R * geo.S * (geo.Cg / 32) : 0;
  const int slices = kTma ? (kHalf ? (units + 1) / 2 : geo.R * geo.S * cblocks) : geo.redp / BK;

  // Shared memory: the ring; with kResident the whole filter tile (every slice, loaded once:
  // the plan takes it where the launch has one filter tile, so every work item shares it);
  // the mbarriers; the cp.async producer's pixel table (none with kTma).
  extern __shared__ unsigned char dynamic_smem[];
  const unsigned ring = smem_addr_1k(dynamic_smem);   // swizzle atoms: 1 KB
  const unsigned resident = ring + STAGES * STAGE_BYTES;
  const unsigned full = resident + (kResident ? slices * W_BYTES : 0), empty = full + 8 * STAGES;
  const unsigned w_full = empty + 8 * STAGES;        // kResident: the filter landed
  // kPingPong: done[c] completes a phase each time consumer c has waited for the last slice of
  // one of its work items (its main loop has no more stages to claim).
  const unsigned done = w_full + 8;
  const int4* pixels = reinterpret_cast<const int4*>(
      dynamic_smem + (w_full + 32 - smem_addr(dynamic_smem)));
  // PROBE & 16: each consumer warp's 2 KB staging of 8 pixels' y rows (TMA plans: no table).
  const unsigned staging = (w_full + 32 + 127) & ~127u;
  if (PROBE & 16) {
    unsigned size;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(size));
    if (staging + 8 * 2048 > smem_addr(dynamic_smem) + size) __trap();   // the plan's room
  }

  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, kTma ? 1 : 128);
      // the warps that read the stage (with MC > 1, those of every CTA it is copied to)
      mbar_init(empty + 8 * s, (kPingPong ? 4 : 8) * MC);
    }
    if (kResident) mbar_init(w_full, 1);
    if (kPingPong) {
      mbar_init(done, 1);
      mbar_init(done + 8, 1);
    }
  }
  if constexpr (MC > 1) cluster_sync_after_init();   // the peers' barriers before any copy
  else __syncthreads();
  // MC > 1: the cluster's CTAs (blockIdx.x = MC * cluster + rank) take items MC apart in step,
  // the peers' filter slices being theirs too; a CTA whose item lies past the last (`ghost`:
  // items is not a multiple of MC) copies and multiplies the last item's tile, for its
  // filter rows' sake, and stores nothing.
  const int rank = MC > 1 ? (int)cluster_rank() : 0;
  // Work items: tile-major, SPLITS ranges of `per` slices each (the last ones may be empty:
  // their partial sums are zeros).
  const i64 items = tiles * SPLITS;
  const int per = (slices + SPLITS - 1) / SPLITS;

  if (tid < 128) {  // ------------------------------------------------------------ producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
    if constexpr (kTma) {   // one thread issues both copies of every stage
      if (tid != 0) return;
      if (kResident) {     // the filter tile, once: rows g0*Kg.., every slice's BK columns
        mbar_expect_bytes(w_full, slices * W_BYTES);
        for (int j = 0; j < slices; ++j)
          tma_tile2d(resident + j * W_BYTES, w_map, j * BK, g0 * geo.Kg, w_full);
      }
      // The filter's slice: with MC > 1 this CTA's BN / MC rows of it, into every CTA.
      auto copy_w = [&](unsigned to, int t, int k, unsigned bar) {
        if constexpr (MC > 1)
          tma_tile2d_multicast(to + rank * (W_BYTES / MC), w_map, t, k + rank * (BN / MC), bar,
                               (1 << MC) - 1);
        else
          tma_tile2d(to, w_map, t, k, bar);
      };
      unsigned it = 0;
      for (i64 item = blockIdx.x; item - rank < items; item += kPersistent ? gridDim.x : items) {
        const i64 real = MC > 1 ? min(item, items - 1) : item;   // a ghost: the last item's
        const i64 tile = real / SPLITS;
        const int split = (int)(real - tile * SPLITS);
        const TileAt at = tile_at<BM, BN>(tile, ptiles, ftiles, g0);
        const i64 n = at.m0 / geo.PQ;                // the tile's first pixel (n, p, q)
        const int pq = (int)(at.m0 - n * geo.PQ), p = pq / geo.Q, q = pq - p * geo.Q;
        const int h0 = p * geo.sh - geo.pt, w0 = q * geo.sw - geo.pl;
        const int c_base = at.g * geo.Cg, k_base = at.g * geo.Kg + at.n0;
        const int j1 = min(slices, (split + 1) * per);
        for (int j = split * per; j < j1; ++j, ++it) {   // slice j: tap (r, s), block cb
          const int cb = j % cblocks, rs = j / cblocks, r = rs / geo.S, s = rs - r * geo.S;
          const int stage = it % STAGES;
          mbar_wait(empty + 8 * stage, ((it / STAGES) & 1) ^ 1);
          const unsigned a = ring + stage * STAGE_BYTES, bar = full + 8 * stage;
          if constexpr (kHalf) {   // units 2j and 2j + 1, each its own 64-byte-row box
            const int per_tap = geo.Cg / 32;
            mbar_expect_bytes(bar, STAGE_BYTES);
#pragma unroll
            for (int h = 0; h < 2; ++h) {   // past the last unit: channels past x's, zeros
              const int u = 2 * j + h, tap = u / per_tap, ur = tap / geo.S, us = tap - ur * geo.S;
              const int c = u < units ? c_base + (u - tap * per_tap) * 32 : 1 << 30;
              tma_im2col(a + h * SUB_BYTES, x_map, c, w0, h0, (int)n,
                         u < units ? us * geo.dw : 0, u < units ? ur * geo.dh : 0, bar);
            }
            if (!kResident) copy_w(a + A_BYTES, j * BK, k_base, bar);
            continue;
          }
          if (PROBE & 1) {         // timing probe: no x box (the stage keeps stale data)
            if (kResident) mbar_arrive(bar);
            else mbar_expect_bytes(bar, STAGE_BYTES - A_BYTES);
          } else {
            mbar_expect_bytes(bar, STAGE_BYTES);
            tma_im2col(a, x_map, c_base + cb * BK, w0, h0, (int)n, s * geo.dw, r * geo.dh, bar);
          }
          const int t = (r * geo.S + s) * geo.Cg + cb * BK;
          if (!kResident) copy_w(a + A_BYTES, t, k_base, bar);
          // kThree: the small parts, K rows further down the split filter. (A last tile's big
          // rows past K read small parts, and its small rows past 2K zeros: filters past K are
          // computed and not stored.)
          if (kThree) tma_tile2d(a + A_BYTES + W_BYTES, w_map, t, geo.K + k_base, bar);
        }
      }
      // MC > 1: the peers' consumers arrive on this CTA's `empty` barriers; it stays until
      // every stage is free again, so that none of them arrives on a CTA that has exited.
      if constexpr (MC > 1)
        for (int k = 0; k < STAGES; ++k, ++it)
          mbar_wait(empty + 8 * (it % STAGES), ((it / STAGES) & 1) ^ 1);
      return;
    } else {                // the producer warpgroup's copies (16-bit elements)
      const int chunk = tid % 8, row0 = tid / 8;       // rows row0 + 16 * i, chunk `chunk`
      unsigned it = 0;
      for (i64 tile = blockIdx.x; tile < tiles; tile += kPersistent ? gridDim.x : tiles) {
        const TileAt at = tile_at<BM, BN>(tile, ptiles, ftiles, g0);
        // The tile's pixels, once: {base (2 words), h0, w0}, h0 = w0 = INT_MIN past the last.
        producer_sync();                               // the previous tile's are no longer read
  #pragma unroll
        for (int r = tid; r < BM; r += 128) {
          const Pixel px = pixel_at(at.m0 + r, at.g, geo);
          const int h = px.valid ? px.h0 : INT_MIN_, wq = px.valid ? px.w0 : INT_MIN_;
          // 16-byte copies take the row's byte address, element gathers its element offset.
          const i64 base = kVecX ? (i64)reinterpret_cast<u64>(src + px.base) : px.base;
          const_cast<int4*>(pixels)[r] = make_int4((int)base, (int)(base >> 32), h, wq);
        }
        producer_sync();
        // This thread's filter rows: row0 + 16 * j for j < w_rows, each a run of red elements.
        const T* w_row0 = w + ((i64)at.g * geo.Kg + at.n0 + row0) * geo.red;
        const i64 w_step = (i64)16 * geo.red;
        const int w_rows = (geo.Kg - at.n0 - row0 + 15) / 16;
        for (int slice = 0; slice < slices; ++slice, ++it) {
          const int stage = it % STAGES;
          mbar_wait(empty + 8 * stage, ((it / STAGES) & 1) ^ 1);
          const unsigned a = ring + stage * STAGE_BYTES, b = a + A_BYTES;
          const int t0 = slice * BK + chunk * 8;
          const bool t_ok = t0 < geo.red;
          if (kVecX) {  // 8 consecutive t: one contiguous, aligned run of x or the window tensor
            const Tap tap = tap_at<kNHWC, !kFused, kTable>(t_ok ? t0 : 0, taps, geo);
            const i64 off = tap.off * (i64)sizeof(T);
            const unsigned H = geo.H, W = geo.W;
            // Rows 16 apart keep their swizzle (r % 8): 2048 bytes apart in shared memory.
            const unsigned to = a + chunk_offset<kSwizzle>(row0, chunk);
  #pragma unroll
            for (int i0 = 0; i0 < ROWS_X; i0 += 4) {   // 4 rows' pixels loaded, then copied
              PixelRow px[4];
  #pragma unroll
              for (int i = 0; i < 4; ++i) px[i] = pixel_row(pixels, row0 + 16 * (i0 + i));
  #pragma unroll
              for (int i = 0; i < 4; ++i) {
                bool ok = t_ok && px[i].w0 != INT_MIN_;
                if (kFused)
                  ok = ok && (unsigned)(px[i].h0 + tap.dr) < H && (unsigned)(px[i].w0 + tap.ds) < W;
                cp_async16_to(to + 2048 * (i0 + i),
                              ok ? reinterpret_cast<const void*>(px[i].base + off) : src, ok);
              }
            }
          } else {      // element by element (C = 3, NCHW): the chunk's 8 table entries at once
            int2 entries[8];
            if (kTable) taps_of<8>(taps, t0, entries);
  #pragma unroll
            for (int i = 0; i < ROWS_X; ++i) {
              const PixelRow px = pixel_row(pixels, row0 + 16 * i);
              unsigned short e[8];
  #pragma unroll
              for (int k = 0; k < 8; ++k) {
                const int t = t0 + k;
                e[k] = 0;
                if (px.w0 != INT_MIN_ && t < geo.red) {
                  const Tap tap = kTable ? tap_of(entries[k])
                                         : tap_at<kNHWC, !kFused, false>(t, taps, geo);
                  if (!kFused || ((unsigned)(px.h0 + tap.dr) < (unsigned)geo.H &&
                                  (unsigned)(px.w0 + tap.ds) < (unsigned)geo.W))
                    e[k] = src[px.base + tap.off].bits;
                }
              }
              st_shared16(a + chunk_offset<kSwizzle>(row0 + 16 * i, chunk), pack8(e));
            }
          }
          const unsigned to_w = b + chunk_offset<kSwizzle>(row0, chunk);
  #pragma unroll
          for (int j = 0; j < ROWS_W; ++j) {
            const bool row_ok = j < w_rows;
            const T* from = w_row0 + (row_ok ? j * w_step : 0);
            if (kVecW) {  // red % 8 == 0: the chunk lies wholly inside or wholly past the row
              const bool ok = row_ok && t_ok;
              cp_async16_to(to_w + 2048 * j, ok ? from + t0 : w, ok);
            } else {
              unsigned short e[8];
  #pragma unroll
              for (int k = 0; k < 8; ++k) e[k] = row_ok && t0 + k < geo.red ? from[t0 + k].bits : 0;
              st_shared16(to_w + 2048 * j, pack8(e));
            }
          }
          // Publish the stage: stores through registers are fenced for the Tensor Cores now;
          // the arrive itself happens when this thread's copies into it have landed.
          if (!kVecX || !kVecW) fence_async_shared();
          cp_async_arrive(full + 8 * stage);
        }
      }
      cp_async_wait_n<0>();
      return;
    }
  }
  // ------------------------------------------------------------------------------ consumers
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
  const int consumer = tid / 128 - 1, warp = (tid / 32) % 4, lane = tid % 32;
  const int rows_at = kPingPong ? 0 : consumer * (BM / 2);          // this consumer's rows
  const int row_base = rows_at + warp * 16 + lane / 4;               // + i*64 (+8)
  const int col_base = (lane % 4) * 2;                               // + j*8 (+1)
  if (kResident) mbar_wait(w_full, 0);
  // A warp is done reading a stage: it tells the producer of this CTA and (MC > 1) those of
  // its peers, whose filter rows the stage holds too.
  auto release = [&](int stage) {
    __syncwarp();
    if (lane == 0) {
      mbar_arrive(empty + 8 * stage);
#pragma unroll
      for (int peer = 1; peer < MC; ++peer)
        mbar_arrive_cluster(empty + 8 * stage, (rank + peer) % MC);
    }
  };
  unsigned it = 0;
  int turn = 0;      // kPingPong: the block's work items are the two consumers' in turn
  unsigned waits = 0;   // kPingPong: the other consumer's main loops waited for
  for (i64 item = blockIdx.x; item - rank < items; item += kPersistent ? gridDim.x : items) {
    const bool ghost = MC > 1 && item >= items;   // multiplied, not stored
    const i64 real = MC > 1 ? min(item, items - 1) : item;
    const i64 tile = real / SPLITS;
    const int split = (int)(real - tile * SPLITS);
    if (kPingPong && (turn++ & 1) != consumer) {   // the other's: skip its stages
      it += max(0, min(slices, (split + 1) * per) - split * per);
      continue;
    }
    // kPingPong: a wait on `full` tells phases apart by parity only, so it must not run more
    // than one phase ahead of the barrier: this main loop starts once the other consumer's
    // previous one has claimed its last stage (so every slice before ours has landed).
    if (kPingPong && turn > 1) mbar_wait(done + 8 * (consumer ^ 1), waits++ & 1);
    const TileAt at = tile_at<BM, BN>(tile, ptiles, ftiles, g0);
    float acc[MI][BN / 2];
    float part[kThree ? MI : 1][kThree ? BN / 2 : 1];   // kThree: one slice's sum
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int e = 0; e < BN / 2; ++e) acc[i][e] = 0.f;
    if constexpr (kThree) {
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int e = 0; e < BN / 2; ++e) part[i][e] = 0.f;
    }
    int previous = -1;
    const int j1 = min(slices, (split + 1) * per);
    for (int slice = split * per; slice < j1; ++slice, ++it) {
      const int stage = it % STAGES;
      mbar_wait(full + 8 * stage, (it / STAGES) & 1);
      // PROBE & 64 (kPingPong): the other consumer's main loop may start once this one has
      // claimed its last stage, one group of wgmmas earlier than after the loop (whose last
      // wait is for the next-to-last slice's, as in CUTLASS's ping-pong): its first wgmmas
      // queue behind these.
      if constexpr ((PROBE & 64) != 0 && kPingPong)
        if (slice == j1 - 1 && warp == 0 && lane == 0) mbar_arrive(done + 8 * consumer);
      // kHalf: the window tile is two boxes of 64-byte rows, this consumer's rows in each.
      const unsigned a = ring + stage * STAGE_BYTES + rows_at * (kHalf ? 64 : 128);
      const unsigned b = kResident ? resident + slice * W_BYTES
                                   : ring + stage * STAGE_BYTES + A_BYTES;
#pragma unroll
      for (int i = 0; i < MI; ++i) pin(acc[i]);
      wgmma_fence();
      if constexpr (kThree) {   // the slice's sum in `part`: the cross terms, then big * big
        // This thread's A fragments of its rows (warp * 16 + lane's ldmatrix row, matrix
        // lane / 8: rows + 8 for odd matrices, the k-step's second chunk for the last two),
        // split into big and small parts.
        unsigned xb[MI][K_STEPS][4], xs[MI][K_STEPS][4];
        const int lrow = warp * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int k = 0; k < K_STEPS; ++k) {
            unsigned v[4];
            ldmatrix_x4(a + chunk_offset<true>(i * 64 + lrow, 2 * k + (lane >> 4)), v);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const float f = __uint_as_float(v[e]), big = rna_tf32(f);
              xb[i][k][e] = __float_as_uint(big);
              xs[i][k][e] = __float_as_uint(rna_tf32(__fmaf_ieee_rn(big, -1.f, f)));  // f - big
            }
          }
#pragma unroll
        for (int i = 0; i < MI; ++i) pin(part[i]);
        wgmma_fence();                   // the fragments' registers are written
#pragma unroll
        for (int term = 0; term < 3; ++term)     // big*small, small*big, big*big
#pragma unroll
          for (int k = 0; k < K_STEPS; ++k)
#pragma unroll
            for (int i = 0; i < MI; ++i) {
              const unsigned bk = b + k * k16_advance<kSwizzle>() + (term == 0 ? W_BYTES : 0);
              wgmma_rs<BN>(part[i], term == 1 ? xs[i][k] : xb[i][k], descriptor<kSwizzle>(bk),
                           term + k > 0);      // the slice's first product overwrites
            }
        wgmma_commit();
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int k = 0; k < K_STEPS; ++k) {
            pin_regs(xb[i][k]);              // read by the wgmmas until the wait
            pin_regs(xs[i][k]);
          }
#pragma unroll
        for (int i = 0; i < MI; ++i) {
          pin(part[i]);
#pragma unroll
          for (int e = 0; e < BN / 2; ++e) acc[i][e] = add(acc[i][e], part[i][e]);
        }
        release(stage);
      } else {
#pragma unroll
        for (int k = 0; k < K_STEPS; ++k) {
#pragma unroll
          for (int i = 0; i < MI; ++i) {
            const unsigned bk = b + k * k16_advance<kSwizzle>();
            if constexpr (kHalf) {   // box k/2, 64-row block i, the k-step's 32 bytes of a row
              const unsigned ak = a + (k / 2) * SUB_BYTES + i * 64 * 64 + (k % 2) * 32;
              wgmma<BN, T>(acc[i], descriptor64(ak), descriptor<kSwizzle>(bk), 1);
            } else if (!(PROBE & 2)) {   // probe 2: no wgmmas (the ring's own rate)
              const unsigned ak = a + i * 64 * 128 + k * k16_advance<kSwizzle>();
              wgmma<BN, T>(acc[i], descriptor<kSwizzle>(ak), descriptor<kSwizzle>(bk), 1);
            }
          }
        }
        wgmma_commit();
#pragma unroll
        for (int i = 0; i < MI; ++i) pin(acc[i]);
        if (STAGES > 1) {
          wgmma_wait<1>();             // the previous slice's wgmmas have read their stage
          if (previous >= 0) release(previous);
          previous = stage;
        } else {
          wgmma_wait<0>();
          release(stage);
        }
      }
    }
    if (kPingPong && warp == 0 && lane == 0 && (!(PROBE & 64) || j1 <= split * per))
      mbar_arrive(done + 8 * consumer);
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < MI; ++i) pin(acc[i]);
    if (STAGES > 1 && previous >= 0) release(previous);
    if (ghost) continue;

    // Epilogue: accumulator (i, 4*j + e) is pixel at.m0 + row_base + 64*i (+8 for e >= 2) and
    // filter at.n0 + col_base + 8*j (+1 for odd e). y is overwritten, never added to. y is
    // (n, p, q, k) for NHWC x, or (n, k, p, q) for NCHW x and where geo.y_nchw says so (the
    // NHWC twin of an NCHW problem; never with SPLITS > 1). One store path for both (a
    // filter's next element `step` away): two paths compiled into every kernel took the wgmma
    // file's compile up by a quarter.
    // 16-bit y: the four threads of a quad hold filters 2t, 2t + 1 of each 8 (t = lane % 4);
    // a 4 x 4 transpose of their packed pairs across the quad (quad_transpose) gives thread t the
    // 8 consecutive filters 8t..8t+7 of each 32, so in NHWC a warp's store writes 64 whole
    // bytes of each of 8 pixels (16 bytes a thread): every 32-byte sector written whole by one
    // store, where the pairs wrote each in two 16-byte halves (cv7 under ncu: 49.6 M sectors
    // into L2 for 25.7 M of y, L2-bound at 83%). In NCHW each thread stores its 8 filters
    // element by element, 8 neighbouring pixels of a filter 16 bytes apart, as before.
    const bool nchw_y = !kNHWC || geo.y_nchw;
    const i64 step = nchw_y ? geo.PQ : 1;            // a filter's next in y: y[base + k*step]
    auto add_bias = [&](float& v0, float& v1, int m) {   // filters m, m + 1 of group at.g
      if (!bias) return;
      const int k = at.g * geo.Kg + m;
      if (m < geo.Kg) v0 = add(v0, to_acc(bias[k], 0.f));
      if (m + 1 < geo.Kg) v1 = add(v1, to_acc(bias[k + 1], 0.f));
    };
    // 16-bit y: this thread's 8 filters at.n0 + 32*jj + 4*col_base .. + 7 of rows (i, h), with
    // the bias, packed (quad_transpose); generic, so that float's kernels never instantiate it.
    auto pack8_of = [&](int i, int h, int jj, auto& u) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int j = 4 * jj + q;
        const int m = at.n0 + col_base + 8 * j;      // filters m, m + 1 of group at.g
        float v0 = acc[i][4 * j + 2 * h], v1 = acc[i][4 * j + 2 * h + 1];
        add_bias(v0, v1, m);
        u[q] = pack_pair<T>(v0, v1);
      }
      quad_transpose(u, lane);
    };
    // PROBE & 16 (16-bit NHWC y, one group of K = BN filters): each warp writes its 8 rows of
    // a half (i, h), pixels pix0 .. pix0 + 7, into its staging (y's own layout: 8 whole rows
    // of K elements, contiguous in y) and one bulk copy takes the valid ones to y.
    if constexpr ((PROBE & 16) && sizeof(T) == 2 && SPLITS == 1) {
      if (kNHWC && !geo.y_nchw && geo.K == BN && geo.Kg == BN &&
          reinterpret_cast<u64>(y) % 16 == 0) {
        const unsigned st = staging + (consumer * 4 + warp) * 2048;
        const int g = lane / 4;
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const i64 pix0 = at.m0 + rows_at + warp * 16 + 64 * i + 8 * h;
            if (lane == 0) bulk_wait_read<0>();     // the warp's last copy has read `st`
            __syncwarp();
#pragma unroll
            for (int jj = 0; jj < BN / 32; ++jj) {
              unsigned u[4];
              pack8_of(i, h, jj, u);
              st_shared16(st + g * (BN * 2) + (32 * jj + 4 * col_base) * 2,
                          make_uint4(u[0], u[1], u[2], u[3]));
            }
            fence_async_shared();
            __syncwarp();
            const i64 valid = min((i64)8, geo.npix - pix0);
            if (lane == 0 && valid > 0)
              bulk_store(y + pix0 * BN, st, (unsigned)valid * BN * 2);
          }
        continue;
      }
    }

    // PROBE & 32 (16-bit NHWC y): where the whole tile is inside y (every pixel and filter, K
    // and K/G multiples of 8, y 16-byte aligned; one test a tile, the same in every thread),
    // its 16-byte stores as straight-line code, with no per-store tests between them.
    if constexpr ((PROBE & 32) && sizeof(T) == 2 && SPLITS == 1) {
      if (kNHWC && !geo.y_nchw && at.m0 + BM <= geo.npix && at.n0 + BN <= geo.Kg &&
          geo.K % 8 == 0 && geo.Kg % 8 == 0 && reinterpret_cast<u64>(y) % 16 == 0) {
        T* yt = y + (at.m0 + row_base) * geo.K + at.g * geo.Kg + at.n0 + 4 * col_base;
        if (bias) {      // every filter of the tile is inside its group: no tests
          const T* b = bias + at.g * geo.Kg + at.n0 + col_base;
#pragma unroll
          for (int j = 0; j < BN / 8; ++j) {
            const float b0 = to_acc(b[8 * j], 0.f), b1 = to_acc(b[8 * j + 1], 0.f);
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                acc[i][4 * j + 2 * h] = add(acc[i][4 * j + 2 * h], b0);
                acc[i][4 * j + 2 * h + 1] = add(acc[i][4 * j + 2 * h + 1], b1);
              }
          }
        }
        // All of the tile's packing, then all of its transposes, then all of its stores:
        // independent steps side by side, not one 8-filter group's chain after another.
        unsigned u[MI][2][BN / 32][4];
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int j = 0; j < BN / 8; ++j)
              u[i][h][j / 4][j % 4] =
                  pack_pair<T>(acc[i][4 * j + 2 * h], acc[i][4 * j + 2 * h + 1]);
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int jj = 0; jj < BN / 32; ++jj) quad_transpose(u[i][h][jj], lane);
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int jj = 0; jj < BN / 32; ++jj) {
              const unsigned* v = u[i][h][jj];
              *reinterpret_cast<uint4*>(yt + (i64)(64 * i + 8 * h) * geo.K + 32 * jj) =
                  make_uint4(v[0], v[1], v[2], v[3]);
            }
        continue;
      }
    }

#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const i64 pix = at.m0 + row_base + 64 * i + 8 * h;
        const bool row_ok = pix < geo.npix;
        const i64 n = nchw_y ? pix / geo.PQ : 0;
        const i64 base = nchw_y ? n * geo.K * geo.PQ + (pix - n * geo.PQ) : pix * geo.K;
        if constexpr (SPLITS == 1 && sizeof(T) == 2) {
#pragma unroll
          for (int jj = 0; jj < BN / 32; ++jj) {
            unsigned u[4];
            pack8_of(i, h, jj, u);
            const int m = at.n0 + 32 * jj + 4 * col_base;  // thread's 8 filters: m .. m + 7
            if constexpr ((PROBE & 8) != 0) {   // streaming stores (st.global.cs), 16 bytes
              const i64 at_y = base + (i64)(at.g * geo.Kg + m) * step;
              if (row_ok && step == 1 && geo.Kg - m >= 8 &&
                  reinterpret_cast<u64>(y + at_y) % 16 == 0)
                __stcs(reinterpret_cast<uint4*>(y + at_y), make_uint4(u[0], u[1], u[2], u[3]));
              else if (row_ok)
                store8(y, at_y, step, geo.Kg - m, u);
            } else if (row_ok && !(PROBE & 4)) {   // probe 4: no stores of y
              store8(y, base + (i64)(at.g * geo.Kg + m) * step, step, geo.Kg - m, u);
            }
          }
          continue;
        }
        if (!row_ok) continue;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          const int m = at.n0 + col_base + 8 * j;          // filters m, m + 1 of group at.g
          const bool ok0 = m < geo.Kg, ok1 = m + 1 < geo.Kg;
          const int k = at.g * geo.Kg + m;
          float v0 = acc[i][4 * j + 2 * h], v1 = acc[i][4 * j + 2 * h + 1];
          if constexpr (SPLITS > 1) {    // FP32 partial sums; split_reduce adds the bias
            float* part = partial + ((i64)split * geo.npix + pix) * geo.K + k;
            if (ok0 && ok1 && reinterpret_cast<u64>(part) % 8 == 0) {
              *reinterpret_cast<float2*>(part) = make_float2(v0, v1);
            } else {
              if (ok0) part[0] = v0;
              if (ok1) part[1] = v1;
            }
            continue;
          }
          add_bias(v0, v1, m);
          store_adjacent(y, base + k * step, step, ok0, ok1, v0, v1);
        }
      }
  }
  // PROBE & 16: the warp's bulk copies done before its block's shared memory goes.
  if ((PROBE & 16) && lane == 0) bulk_wait<0>();
}

template <typename T, bool kNHWC, bool kFused, int BM, int BN, int STAGES, bool kVecX, bool kVecW,
          bool kSwizzle, bool kTable, bool kPersistent>
__global__ void __launch_bounds__(384, 1)
    im2win_wgmma(const T* __restrict__ src, const T* __restrict__ w, const T* __restrict__ bias,
                 T* __restrict__ y, const int2* __restrict__ taps, Geometry geo, int g0) {
  wgmma_conv<T, kNHWC, kFused, BM, BN, STAGES, kVecX, kVecW, kSwizzle, kTable, kPersistent,
             false>(src, w, bias, y, taps, geo, g0, nullptr, nullptr);
}

// Fused NHWC windows with both operands copied by the TMA: x through its im2col descriptor,
// w (K rows of the reduction) through a tiled one (im2win.cuda.tma; plan.py says when).
// kResident: the whole filter tile stays in shared memory (one filter tile and group a launch).
// kPingPong: each consumer warpgroup takes whole tiles, the two in turn, so that one's epilogue
// runs while the other's wgmmas do (the ring is filled in work-item order, so their main loops
// alternate).
// kHalf: C/G a multiple of 32, not of 64: x's boxes are 32 channels (64-byte swizzle), two a
// slice.
// PROBE (tools/wgmma_dev.py's ":probeN" tile switch; wrong results, for timing), bits: 1 the
// producer copies no x boxes (where kHalf is off), so the time left is the filter's copies,
// the barriers and the Tensor Cores; 2 the consumers issue no wgmmas, so the time left is the
// ring's (the copies and barriers) and the epilogue's; 4 the epilogue stores nothing; 8 its
// 16-byte stores are streaming ones (st.global.cs: results right); 16 each warp stages 8
// pixels' y rows in 2 KB of shared memory and bulk-copies them to y (results right, where y
// is NHWC with one group of K = BN filters; the ring of the plan's shared memory one stage
// shallower: ":stages4:probe16" on cv8); 32 a tile wholly inside y stores as straight-line
// code (results right); 64 a ping-pong consumer hands the Tensor Cores to the other once it
// has claimed its last stage, not after waiting for its wgmmas but the last (results right).
template <typename T, int BM, int BN, int STAGES, bool kPersistent, bool kResident = false,
          bool kPingPong = false, bool kHalf = false, int PROBE = 0>
__global__ void __launch_bounds__(384, 1)
    im2win_wgmma_tma(const T* __restrict__ src, const T* __restrict__ w,
                     const T* __restrict__ bias, T* __restrict__ y,
                     const int2* __restrict__ taps, Geometry geo, int g0,
                     const __grid_constant__ TensorMap x_map,
                     const __grid_constant__ TensorMap w_map) {
  wgmma_conv<T, true, true, BM, BN, STAGES, true, true, true, false, kPersistent, true, 1,
             false, kResident, kPingPong, kHalf, 1, PROBE>(src, w, bias, y, taps, geo, g0,
                                                           &x_map, &w_map);
}

// The TMA form with a multicast filter: clusters of MC CTAs (one filter tile and group a
// launch, so that the cluster's items share every filter slice), each CTA copying BN / MC rows
// of each slice into the whole cluster (w_map's box is BK x BN / MC), so that the L2 serves
// each slice once a cluster, not once a CTA.
template <typename T, int BM, int BN, int STAGES, bool kPingPong, bool kHalf, int MC>
__global__ void __cluster_dims__(MC, 1, 1) __launch_bounds__(384, 1)
    im2win_wgmma_tma_mc(const T* __restrict__ src, const T* __restrict__ w,
                        const T* __restrict__ bias, T* __restrict__ y,
                        const int2* __restrict__ taps, Geometry geo, int g0,
                        const __grid_constant__ TensorMap x_map,
                        const __grid_constant__ TensorMap w_map) {
  wgmma_conv<T, true, true, BM, BN, STAGES, true, true, true, false, true, true, 1, false, false,
             kPingPong, kHalf, MC>(src, w, bias, y, taps, geo, g0, &x_map, &w_map);
}

// Split-K (SPLITS of 2, 4 or 8) of the TMA form: FP32 partial sums into `partial`
// (SPLITS x N*P*Q x K), which split_reduce then adds into y.
template <typename T, int BM, int BN, int STAGES, int SPLITS, bool kHalf = false>
__global__ void __launch_bounds__(384, 1)
    im2win_wgmma_tma_split(const T* __restrict__ src, const T* __restrict__ w,
                           const T* __restrict__ bias, T* __restrict__ y,
                           float* __restrict__ partial, Geometry geo, int g0,
                           const __grid_constant__ TensorMap x_map,
                           const __grid_constant__ TensorMap w_map) {
  wgmma_conv<T, true, true, BM, BN, STAGES, true, true, true, false, true, true, SPLITS, false,
             false, false, kHalf>(src, w, bias, y, nullptr, geo, g0, &x_map, &w_map, partial);
}

// split_reduce (gemm.cuh) adds the partial sums of the split forms.

// "3xtf32"'s filter, split once a call: split[i] = big = rna_tf32(w[i]) and split[n + i] = the
// small part, rna_tf32(w[i] - big) (the kernel's filter map reads it as 2K rows).
__global__ void tf32_split(const float* __restrict__ w, float* __restrict__ split, i64 n) {
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
    const float f = w[i], big = rna_tf32(f);
    split[i] = big;
    split[n + i] = rna_tf32(__fmaf_ieee_rn(big, -1.f, f));
  }
}

// float32 on Tensor Cores ("tf32"; kThree: "3xtf32"), fused NHWC windows copied by the TMA
// (C/G a multiple of 32: each slice is 32 channels of one tap).
template <int BM, int BN, int STAGES, bool kPersistent, bool kThree>
__global__ void __launch_bounds__(384, 1)
    im2win_wgmma_tf32(const float* __restrict__ src, const float* __restrict__ w,
                      const float* __restrict__ bias, float* __restrict__ y,
                      const int2* __restrict__ taps, Geometry geo, int g0,
                      const __grid_constant__ TensorMap x_map,
                      const __grid_constant__ TensorMap w_map) {
  wgmma_conv<float, true, true, BM, BN, STAGES, true, true, true, false, kPersistent, true, 1,
             kThree>(src, w, bias, y, taps, geo, g0, &x_map, &w_map);
}

// ------------------------------------------------------------------ backward filter (wgrad)
// dw[k, (r, s, c)] = sum over output pixels m of dy[m, k] * x_win[m, (r, s, c)] (NHWC, one
// group's filters and channels): the window operand of the forward GEMM with the pixels as
// the reduction. A slice is 64 pixels. Its x tiles are TMA im2col boxes, each of one tap
// (r, s) and CB channels (64, or 8 for few channels): 64 pixel rows of CB*2 bytes, read by
// wgmma as B "MN-major" (channels contiguous, the reduction across rows: imm-trans-b). The dy
// tile is a tiled box of dy as a (N*P*Q) x K matrix: 64 pixel rows of 64 filters, A MN-major
// (imm-trans-a). The dw columns of a group are boxes f = rs * cblocks + cb (tap rs, channels
// cb*CB.. of C/G; C/G any multiple of 8: channels past the group's are computed from the
// next group's, or from zeros past C, and not stored, as filters are). A tile is KT filters
// by NB consecutive boxes (taps and channel blocks alike), so one slice of dy serves NB
// boxes: with KT = 128 two consumer warpgroups take 64 filters each, all the boxes; with
// KT = 64 (SPLIT_N: K/G <= 64) both take the 64 filters, half the boxes each. Either way a
// consumer issues one wgmma m64nNCk16 a k16 step over NC columns of boxes side by side in
// the stage. Boxes past the group's last are loaded as its last and not stored. Work items
// are (split, tile), tile fastest, so blocks running together read the same pixel rows of x
// and dy; a split's pixel range is `per` slices, and with geo.splits > 1 each item writes
// FP32 partial sums that split_reduce adds in order of the split (deterministic). The pixels
// past N*P*Q and the filters past K read as zeros (TMA bounds); filters of the next group in
// a box are computed and not stored.
struct WgradGeo {
  i64 npix;                   // N*P*Q
  int PQ, Q, sh, sw, pt, pl, dh, dw, R, S, Cg, Kg, K, G, splits;
};

// The descriptor of an MN-major tile (the reduction along rows) at byte `addr`. 128-byte
// swizzle (rows of 64 elements): the stride-byte-offset field holds the 1024 bytes between
// 8-row atoms along the reduction, the leading-byte-offset field the 8 KB between 64-element
// atoms along M/N (the next box of the stage). No swizzle (rows of 8 elements, CB = 8): core
// matrices of 8 rows of 16 bytes, the leading byte offset the 128 bytes between them along
// the reduction, the stride byte offset the 1024 bytes between them along M/N (the next box).
// As CUTLASS's make_gmma_desc sets them for MN-major operands.
template <int CB>
__device__ __forceinline__ u64 mn_descriptor(unsigned addr) {
  static_assert(CB == 64 || CB == 8, "boxes of 64 or 8 channels");
  const u64 start = (addr & 0x3FFFF) >> 4;
  if constexpr (CB == 64) return start | (u64)(8192 >> 4) << 16 | (u64)(1024 >> 4) << 32 | (u64)1 << 62;
  else return start | (u64)(128 >> 4) << 16 | (u64)(1024 >> 4) << 32;
}

// Bytes of a stage: dy's KT filters and the tile's x columns (XW of them), 64 pixels each.
__host__ __device__ constexpr int wgrad_stage_bytes(int NC, bool SPLIT_N) {
  return (SPLIT_N ? 64 : 128) * 128 + (SPLIT_N ? 2 * NC : NC) * 128;
}
constexpr int WGRAD_TABLE = 64 * 12;    // the producer's per-box copy coordinates (NB <= 64)
__host__ __device__ constexpr int wgrad_smem_bytes(int NC, bool SPLIT_N, int STAGES) {
  return WGRAD_TABLE + 1024 + STAGES * wgrad_stage_bytes(NC, SPLIT_N) + 16 * STAGES;
}

template <typename T, int NC, int CB, bool SPLIT_N, int STAGES>
__global__ void __launch_bounds__(384, 1)
    im2win_wgmma_wgrad(float* __restrict__ partial, T* __restrict__ dw, WgradGeo geo,
                       const __grid_constant__ TensorMap x_map,
                       const __grid_constant__ TensorMap dy_map) {
  static_assert(sizeof(T) == 2, "transposed wgmma operands are 16-bit");
  constexpr int KT = SPLIT_N ? 64 : 128;        // filters of a tile
  constexpr int XW = SPLIT_N ? 2 * NC : NC;     // x columns of a tile
  constexpr int NB = XW / CB;                   // boxes of a tile
  static_assert(NC % CB == 0 && NB * 12 <= WGRAD_TABLE, "whole boxes, the table holds them");
  static_assert(wgrad_smem_bytes(NC, SPLIT_N, STAGES) <= 227 * 1024, "the ring fits");
  constexpr int BK = 64;                        // pixels per slice
  constexpr int BOX_BYTES = 64 * CB * 2;        // 64 pixel rows of CB channels
  constexpr int DY_BYTES = KT * 128;            // 64 pixel rows of KT filters (64 a box)
  constexpr int STAGE_BYTES = wgrad_stage_bytes(NC, SPLIT_N);
  constexpr int K16 = 16 * CB * 2;              // 16 pixel rows of a box: a k16 step
  constexpr int POOL = 168 * 3, PRODUCER_REGS = 96;
  constexpr int CONSUMER_REGS = ((POOL - PRODUCER_REGS) / 2) & ~7;

  extern __shared__ unsigned char dynamic_smem[];
  int* table = reinterpret_cast<int*>(dynamic_smem);   // 3 ints a box: channel, offsets
  const unsigned ring = (smem_addr(dynamic_smem) + WGRAD_TABLE + 1023) & ~1023u;
  const unsigned full = ring + STAGES * STAGE_BYTES, empty = full + 8 * STAGES;
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, 8);
    }
  }
  __syncthreads();

  const int kblocks = (geo.Kg + KT - 1) / KT, cblocks = (geo.Cg + CB - 1) / CB;
  const int boxes = geo.R * geo.S * cblocks, fblocks = (boxes + NB - 1) / NB;
  const i64 tiles = (i64)kblocks * fblocks * geo.G;
  const i64 items = tiles * geo.splits;
  const i64 slices = (geo.npix + BK - 1) / BK;
  const i64 per = (slices + geo.splits - 1) / geo.splits;
  // Tile t: box block fastest, then filter block, group.
  auto decode = [&](i64 t, int& g, int& kb, int& fb) {
    fb = (int)(t % fblocks);
    t /= fblocks;
    kb = (int)(t % kblocks);
    g = (int)(t / kblocks);
  };

  if (tid < 128) {  // ------------------------------------------------------------ producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
    if (tid != 0) return;
    unsigned it = 0;
    for (i64 item = blockIdx.x; item < items; item += gridDim.x) {
      const i64 split = item / tiles;
      int g, kb, fb;
      decode(item - split * tiles, g, kb, fb);
      const int k0 = g * geo.Kg + kb * KT;
      for (int b = 0; b < NB; ++b) {                 // the boxes' channels and tap offsets
        const int f = min(fb * NB + b, boxes - 1), rs = f / cblocks, r = rs / geo.S;
        table[3 * b] = g * geo.Cg + (f - rs * cblocks) * CB;
        table[3 * b + 1] = (rs - r * geo.S) * geo.dw;
        table[3 * b + 2] = r * geo.dh;
      }
      const i64 j1 = min(slices, (split + 1) * per);
      for (i64 j = split * per; j < j1; ++j, ++it) {
        const int stage = it % STAGES;
        mbar_wait(empty + 8 * stage, ((it / STAGES) & 1) ^ 1);
        const unsigned a = ring + stage * STAGE_BYTES, bar = full + 8 * stage;
        mbar_expect_bytes(bar, STAGE_BYTES);
        const i64 m0 = j * BK, n = m0 / geo.PQ;
        const int pq = (int)(m0 - n * geo.PQ), p = pq / geo.Q, q = pq - p * geo.Q;
        const int w0 = q * geo.sw - geo.pl, h0 = p * geo.sh - geo.pt;
#pragma unroll
        for (int h = 0; h < KT / 64; ++h)            // filters k0 + 64h.., pixels m0..
          tma_tile2d(a + h * 8192, &dy_map, k0 + 64 * h, (int)m0, bar);
#pragma unroll 4
        for (int b = 0; b < NB; ++b)
          tma_im2col(a + DY_BYTES + b * BOX_BYTES, &x_map, table[3 * b], w0, h0, (int)n,
                     table[3 * b + 1], table[3 * b + 2], bar);
      }
    }
    return;
  }
  // ------------------------------------------------------------------------------ consumers
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
  const int consumer = tid / 128 - 1, warp = (tid / 32) % 4, lane = tid % 32;
  const int RS = geo.R * geo.S;
  const i64 total = (i64)geo.K * RS * geo.Cg;         // dw's elements
  const int a_at = SPLIT_N ? 0 : consumer * 8192;     // this consumer's filters ...
  const int b_at = DY_BYTES + (SPLIT_N ? consumer * NC * 128 : 0);   // ... and x columns
  unsigned it = 0;
  for (i64 item = blockIdx.x; item < items; item += gridDim.x) {
    const i64 split = item / tiles;
    int g, kb, fb;
    decode(item - split * tiles, g, kb, fb);
    float acc[NC / 2];
#pragma unroll
    for (int e = 0; e < NC / 2; ++e) acc[e] = 0.f;
    int previous = -1;
    const i64 j1 = min(slices, (split + 1) * per);
    for (i64 j = split * per; j < j1; ++j, ++it) {
      const int stage = it % STAGES;
      mbar_wait(full + 8 * stage, (it / STAGES) & 1);
      const unsigned a = ring + stage * STAGE_BYTES + a_at;
      const unsigned b = ring + stage * STAGE_BYTES + b_at;
      pin(acc);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < 4; ++k)                     // k16 steps: 16 pixel rows each
        wgmma<NC, T, true>(acc, mn_descriptor<64>(a + k * 2048),
                           mn_descriptor<CB>(b + k * K16), 1);
      wgmma_commit();
      pin(acc);
      wgmma_wait<1>();                                // the previous slice's have read it
      if (previous >= 0) {
        __syncwarp();
        if (lane == 0) mbar_arrive(empty + 8 * previous);
      }
      previous = stage;
    }
    wgmma_wait<0>();
    pin(acc);
    if (previous >= 0) {
      __syncwarp();
      if (lane == 0) mbar_arrive(empty + 8 * previous);
    }
    // Epilogue: accumulator 4*jj + e (jj < NC/8) is filter kb*KT (+ consumer*64 unless
    // SPLIT_N) + warp*16 + lane/4 (+8 for e >= 2) and tile column (consumer*NC if SPLIT_N)
    // + 8*jj + (lane%4)*2 (+1 for odd e): box column / CB of the tile, its channel column % CB.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = kb * KT + (SPLIT_N ? 0 : consumer * 64) + warp * 16 + lane / 4 + 8 * h;
      if (m >= geo.Kg) continue;
      const i64 row0 = (i64)(g * geo.Kg + m) * RS * geo.Cg;
#pragma unroll
      for (int jj = 0; jj < NC / 8; ++jj) {
        const int col = (SPLIT_N ? consumer * NC : 0) + 8 * jj + (lane % 4) * 2;
        const int f = fb * NB + col / CB, rs = f / cblocks;
        const int c = (f - rs * cblocks) * CB + col % CB;
        if (f >= boxes || c >= geo.Cg) continue;      // C/G even: c + 1 is in the group too
        const i64 at = row0 + (i64)rs * geo.Cg + c;
        const float v0 = acc[4 * jj + 2 * h], v1 = acc[4 * jj + 2 * h + 1];
        if (geo.splits > 1)               // an even index: 8-byte aligned float pairs
          *reinterpret_cast<float2*>(partial + split * total + at) = make_float2(v0, v1);
        else
          store_adjacent(dw, at, 1, true, true, v0, v1);
      }
    }
  }
}
