// im2win_ffma.cu: float32 im2win convolution on CUDA cores for NHWC fused windows, built for
// issue efficiency: every reduction slice lies within one window tap.
//
// The GEMM of im2win_conv.cu (y[pixel, k] = bias[k] + sum_t w[k, t] * B[t, pixel], one group g
// per grid z), with t in w's own NHWC order t = (r*S + s)*(C/G) + c and C/G a multiple of BK:
// a BK-deep slice is then BK consecutive channels of one tap (r, s), so
//   - each pixel's part of the slice is one contiguous run of x, loaded as BK/4 float4 at
//     base(pixel) + r*sr + s*ss + c0, under one predicate per pixel and slice (the pixel, and
//     h0 + r*dh and w0 + s*dw inside x: the padding);
//   - the filter's part is BK consecutive floats of each row of w, float4 loads too;
//   - (r, s, c0) and the tap's offset advance by additions from slice to slice: no table, no
//     division in the main loop.
// base(pixel) is 64-bit, computed once per loaded pixel in the prologue (32-bit divisions while
// the launch's pixels fit 32 bits); the epilogue needs none: in NHWC y[pixel, k] is at
// pixel*K + k (im2win_ffma_to_nchw's NCHW y[n, k, pq]: one division for each thread's 4
// neighbouring pixels; staged: for each of the BN/32 pixels it stores from shared memory). The
// window semantics stay im2win's fused mode: the B tile in shared memory is the window tile
// built straight from x, and each output's sum runs over t in order.
//
// Tiles: BM filters x BN pixels (BM a multiple of 32, BN of 64), BM*BN/64 threads, each an 8 x 8
// register micro-tile made of two 4-wide halves in each direction (filters ty*4 + i and
// BM/2 + ty*4 + i, pixels tx*4 + j and BN/2 + tx*4 + j, tx < BN/8, ty < BM/8), read from shared
// memory as float4. The tiles are stored transposed (Xs[t][pixel], Ws[t][filter]); with kSwizzle
// the column of row t is XORed with (t/4 % (BK/4)) * (32/(BK/4)), which keeps float4 groups whole
// and makes both the transposing stores and the fragment reads free of bank conflicts. kDouble: two
// shared buffers, the next slice's loads in flight in registers (kStridedX's x: as cp.async
// copies into the other buffer) while this one is computed, one barrier per slice, and the
// shared fragments double-buffered in registers across it (off: load, barrier, compute,
// barrier).
//
// Split-K (im2win_ffma_split, SPLITS of 2, 4 or 8, one group): grid z holds SPLITS
// consecutive ranges of each tile's slices; each block writes its range's FP32 sums to
// partial[split][pixel][filter] (a range past the last slice writes zeros), and
// split_reduce (gemm.cuh) adds them in order of the split, then the bias, into y. With the
// fixup (im2win_ffma_fixup) no second launch: after writing its range's sums, a block counts
// itself in its tile's counter (after the partial sums, zeroed before the launch); the tile's
// last block to arrive adds the ranges' sums in order of the split (its own from registers),
// then the bias, and writes y through the epilogue of its y form, NHWC or NCHW: the same
// additions in the same order as split_reduce's, so the same bits, whichever block is last.
//
// kStridedX (every entry's last flag but kTail): x's channels geo.sc apart and each row's
// pixels contiguous, as an NCHW x lies: the NCHW problem's NHWC twin reads its x in place,
// with no channels-last copy. A pixel's part of a slice is then BK elements, sc apart, each copied
// straight to its place in the transposed tile by a 4-byte cp.async (zeros in the padding; no
// registers, no shared stores: 16 LDGSTS a 64 x 128 x 16 slice against the contiguous form's 4
// float4 loads and 16 stores), and a warp's lanes take consecutive pixels, so each copy
// instruction reads a run of one channel's row; the same predicate per pixel and slice, the
// same tile (docs/hopper.md, steps 21 and 22), written free of bank conflicts where a load pass
// covers a multiple of 32 pixels (a warp then writes one quad; plan.strided_tile keeps the
// others off this form). The copies land before the slice's barrier (cp.async.wait_group).
//
// kTail (the last flag of im2win_ffma and im2win_ffma_to_nchw, false unless named): one tap
// whose run is not a multiple of BK long, the materialised window's run of a pixel
// (plan.runs_plan: a 1 x 1 problem over x_win, C = S*R*C of the stem): slices up to
// Geometry.redp (red rounded up to BK), w's rows redp long (zeros past red), and x's elements
// of the last slice past red read as zeros (they are the next window column's x, which may be
// an infinity; a select, not a product by the filter's zero).
//
// kExact (the last flag of each entry, false unless named): every load inside x and w
// (plan.ffma_exact: no pixel's window reaches the padding, K/G a multiple of BM), so the loop
// loads without the bounds predicates and the zeros they select.
//
// kTaps (the last flag of im2win_ffma and im2win_ffma_to_nchw, false unless named): x read
// through the reduction table `taps` (gemm.cuh: taps[t] = {off(t), (r*dh) << 16 | s*dw}), a
// stem's fused window runs (plan.runs_plan with plan.runs_taps' table: the problem itself, its
// reduction t in window order, s then r then c, over w's rows in window order redp long, as
// kTail's): each element of a pixel's part of a slice copied straight from
// x[base(pixel) + off(t)] to its place in the transposed tile by a 4-byte cp.async, as
// kStridedX's (a warp's lanes along the pixels, one quad of t each, the quad's four table
// entries two 16-byte loads a slice), zeros past red and (without kExact) in the padding. So the window tile is built in shared memory
// straight from x: no window tensor, and the same products in the same order as the
// materialised runs' (kTail over x_win), bit for bit.
//
// Requires (im2win.cuda.plan.ffma_refusal): float32, NHWC (or kStridedX), fused, C/G % BK == 0,
// x 16-byte aligned with element strides (n, h, w) multiples of 4 and channels contiguous (or
// kStridedX: any 4-byte aligned x, C/G times the channel stride within 32 bits), w contiguous
// and 16-byte aligned. Stores are float4 where K/G % 4 == 0 and y is 16-byte aligned (checked
// here).

__device__ __forceinline__ float4 load4(const float* __restrict__ p) {
  return __ldg(reinterpret_cast<const float4*>(p));
}

// kStridedX's copy of one element of x straight into the shared tile: a 4-byte cp.async through
// L1 (a window reads each element once a tap), zeros where !valid (nothing read from src).
__device__ __forceinline__ void copy4(void* dst, const void* src, bool valid) {
  constexpr int TB = 4;
  const unsigned to = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(to), "l"(src), "n"(TB),
               "r"(valid ? TB : 0));
}

// Launch pixel `pix`'s image n and its index pq within the image (32-bit division while the
// launch's pixels fit 32 bits).
__device__ __forceinline__ void image_of(const Geometry& geo, i64 pix, i64& n, int& pq) {
  if (geo.npix <= 0x7fffffff) {
    n = (int)pix / geo.PQ;
    pq = (int)pix - (int)n * geo.PQ;
  } else {
    n = pix / geo.PQ;
    pq = (int)(pix - n * geo.PQ);
  }
}

// The kernel's body; the entry points below give it y (NHWC, or NCHW in two forms), or
// split-K's partial sums.
template <int BM, int BN, int BK, bool kDouble, bool kSwizzle, int SPLITS, int kNCHWY,
          bool kStridedX, bool kTail = false, bool kExact = false, bool kTaps = false,
          bool kFixup = false>
__device__ __forceinline__ void ffma_conv(const float* __restrict__ x, const float* __restrict__ w,
                                          const float* __restrict__ bias, float* __restrict__ y,
                                          const int2* __restrict__ taps, const Geometry& geo,
                                          int g0, float* __restrict__ partial = nullptr) {
  constexpr int NT = BM * BN / 64;         // threads
  constexpr int Q4 = BK / 4;               // float4 per pixel (or filter) and slice
  constexpr int ROWS = NT / Q4;            // pixels (or filters) the block loads in one pass
  // float4 loads per thread and slice; where ROWS does not divide the tile (96 filters: 192
  // threads), the last pass loads only rows row + i*ROWS < BN (or BM).
  constexpr int XL = (BN + ROWS - 1) / ROWS, WL = (BM + ROWS - 1) / ROWS;
  constexpr int NBUF = kDouble ? 2 : 1;
  static_assert(BK % 4 == 0 && NT % Q4 == 0, "tile must divide into float4 loads");
  static_assert(!kTail || (!kStridedX && SPLITS == 1), "kTail: contiguous x, no split-K");
  static_assert(!kTaps || (!kStridedX && !kTail && SPLITS == 1), "kTaps: x by the table");
  static_assert(!kFixup || SPLITS > 1, "the fixup is split-K's");
  constexpr bool kCopyX = kStridedX || kTaps;   // x by 4-byte cp.async into the tile
  constexpr bool kRowsP = kTail || kTaps;       // w's rows redp long, slices up to redp
  static_assert(BM % 32 == 0 && BN % 64 == 0,
                "warp tiles of 64 pixels x 32 filters, 4-wide halves, 32-word swizzle");
  __shared__ __align__(16) float Xs[NBUF][BK][BN];
  __shared__ __align__(16) float Ws[NBUF][BK][BM];

  // Warps of 8 x 4 threads, each a 64-pixel x 32-filter warp tile: a fragment read touches 8
  // distinct float4 of Xs and 4 of Ws per half, few shared-memory wavefronts per FFMA.
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int tx = (warp % (BN / 64)) * 8 + lane % 8, ty = (warp / (BN / 64)) * 4 + lane / 8;
  const int quad = tid % Q4, row = tid / Q4;     // this thread's float4 of its loaded rows
  // x's: the same, or with kStridedX (channels geo.sc apart, a row's pixels contiguous: an
  // NCHW x read in place) a warp's lanes along the pixels, so that each of the four 4-byte
  // copies of a quad reads consecutive pixels of one channel.
  const int xquad = kCopyX ? tid / ROWS : quad, xrow = kCopyX ? tid % ROWS : row;
  const int xc = kStridedX ? (int)geo.sc : 1;    // x's channel stride (ffma_refusal: 32 bits)
  // Whether load i's row is in the tile (known at compile time but for a partial last pass).
  auto x_loads = [&](int i) { return BN % ROWS == 0 || i + 1 < XL || xrow + i * ROWS < BN; };
  auto w_loads = [&](int i) { return BM % ROWS == 0 || i + 1 < WL || row + i * ROWS < BM; };
  const int g = g0 + blockIdx.z / SPLITS, split = blockIdx.z % SPLITS;
  const int m0 = blockIdx.y * BM;
  const i64 j0 = (i64)blockIdx.x * BN;
  if (SPLITS > 1 && !kFixup) y += (i64)split * geo.npix * geo.K;   // this range's partial sums

  // The pixels and filters this thread loads: rows row + i*ROWS of the tile.
  i64 xbase[XL];
  int h0[XL], w0[XL];
#pragma unroll
  for (int i = 0; i < XL; ++i) {
    // A pixel past the launch's (or a filter past the group's) loads its last one's data: its
    // outputs are never stored, and no predicate is needed for it.
    const i64 j = min(j0 + xrow + i * ROWS, geo.npix - 1);
    i64 n;
    int p, q;
    if (geo.npix <= 0x7fffffff) {
      const int jj = (int)j, nn = jj / geo.PQ, pq = jj - nn * geo.PQ;
      n = nn;
      p = pq / geo.Q;
      q = pq - p * geo.Q;
    } else {
      n = j / geo.PQ;
      const int pq = (int)(j - n * geo.PQ);
      p = pq / geo.Q;
      q = pq - p * geo.Q;
    }
    xbase[i] = n * geo.sn + g * geo.sg + p * geo.sp + q * geo.sq + geo.base0 +
               (kTaps ? 0 : xquad * 4 * xc);
    h0[i] = p * geo.sh - geo.pt;
    w0[i] = q * geo.sw - geo.pl;
  }
  const float* wrow[WL];
  bool wok[WL];
#pragma unroll
  for (int i = 0; i < WL; ++i) {
    const int f = m0 + row + i * ROWS;
    wok[i] = f < geo.Kg;
    wrow[i] = w + ((i64)g * geo.Kg + (wok[i] ? f : 0)) * (kRowsP ? geo.redp : geo.red) +
              quad * 4;                  // (kTail, kTaps: w's rows redp long)
  }

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

  // The slice's tap and channel offset, advanced by additions.
  int c0 = 0, s = 0, dr = 0, ds = 0, t0 = 0, toff = 0;
  constexpr int SW = 32 / Q4;                    // the swizzle's step between float4 columns
  auto col = [&](int c, int kk) { return kSwizzle ? c ^ ((kk / 4) % Q4) * SW : c; };
  // The next slice's loads: into registers (stored by `store` after this slice's products),
  // or with kStridedX x's part by cp.async straight into the tile Xs[xbuf], transposed (each
  // element to its own place), where `landed` waits for it before the barrier.
  float4 xv[kCopyX ? 1 : XL], wv[WL];
  auto load = [&](int xbuf) {
    if constexpr (kTaps) {
      // This thread's quad of the slice: four entries {off, (dr << 16) | ds}, two 16-byte loads.
      const int tq = t0 + xquad * 4;
      const int4 e01 = __ldg(reinterpret_cast<const int4*>(taps + tq));
      const int4 e23 = __ldg(reinterpret_cast<const int4*>(taps + tq) + 1);
      const int off[4] = {e01.x, e01.z, e23.x, e23.z}, tap[4] = {e01.y, e01.w, e23.y, e23.w};
#pragma unroll
      for (int i = 0; i < XL; ++i) {
        if (!x_loads(i)) continue;
        float* to = &Xs[xbuf][xquad * 4][col(xrow + i * ROWS, xquad * 4)];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          bool in = tq + e < geo.red;
          if (!kExact)
            in = in && (unsigned)(h0[i] + (tap[e] >> 16)) < (unsigned)geo.H &&
                 (unsigned)(w0[i] + (tap[e] & 0xffff)) < (unsigned)geo.W;
          copy4(to + e * BN, x + xbase[i] + off[e], in);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < XL; ++i) {
        const bool in = kExact || ((unsigned)(h0[i] + dr) < (unsigned)geo.H &&
                                   (unsigned)(w0[i] + ds) < (unsigned)geo.W);
        if (!x_loads(i)) continue;
        if constexpr (kStridedX) {
          const float* at = x + xbase[i] + toff;
          float* to = &Xs[xbuf][xquad * 4][col(xrow + i * ROWS, xquad * 4)];
#pragma unroll
          for (int e = 0; e < 4; ++e) copy4(to + e * BN, at + e * xc, in);
        } else {
          xv[i] = in ? load4(x + xbase[i] + toff) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
      }
    }
    if constexpr (kTail) {
      if (t0 + BK > geo.red) {       // the last slice: its elements past red are zeros
        const int left = geo.red - t0 - xquad * 4;   // valid elements of this float4
#pragma unroll
        for (int i = 0; i < XL; ++i) {
          if (left < 4) xv[i].w = 0.f;
          if (left < 3) xv[i].z = 0.f;
          if (left < 2) xv[i].y = 0.f;
          if (left < 1) xv[i].x = 0.f;
        }
      }
    }
    if constexpr (kCopyX) asm volatile("cp.async.commit_group;\n" ::);
#pragma unroll
    for (int i = 0; i < WL; ++i)
      if (w_loads(i))
        wv[i] = kExact || wok[i] ? load4(wrow[i] + t0) : make_float4(0.f, 0.f, 0.f, 0.f);
  };
  auto landed = [&]() {
    if constexpr (kCopyX) asm volatile("cp.async.wait_group 0;\n" ::);
  };
  auto advance = [&]() {
    t0 += BK;
    if constexpr (kTaps) return;       // the table holds every slice's offsets
    c0 += BK;
    toff += BK * xc;
    if (c0 == geo.Cg) {
      c0 = 0;
      toff += geo.ss - geo.Cg * xc;
      ds += geo.dw;
      if (++s == geo.S) {
        s = 0;
        ds = 0;
        dr += geo.dh;
        toff += geo.sr - geo.S * geo.ss;
      }
    }
  };
  // v, four consecutive t of tile column c, down rows q*4 .. q*4 + 3 (transposed).
  auto put = [&](float* tile, int width, int q, int c, float4 v) {
    float* at = tile + q * 4 * width + col(c, q * 4);
    at[0] = v.x;
    at[width] = v.y;
    at[2 * width] = v.z;
    at[3 * width] = v.w;
  };
  auto store = [&](int buf) {
    if constexpr (!kCopyX)
#pragma unroll
      for (int i = 0; i < XL; ++i)
        if (x_loads(i)) put(&Xs[buf][0][0], BN, xquad, xrow + i * ROWS, xv[i]);
#pragma unroll
    for (int i = 0; i < WL; ++i)
      if (w_loads(i)) put(&Ws[buf][0][0], BM, quad, row + i * ROWS, wv[i]);
  };
  auto compute = [&](int buf) {
#pragma unroll
    for (int kk = 0; kk < BK; ++kk)
      outer_8x8(&Ws[buf][kk][col(ty * 4, kk)], &Ws[buf][kk][col(BM / 2 + ty * 4, kk)],
                &Xs[buf][kk][col(tx * 4, kk)], &Xs[buf][kk][col(BN / 2 + tx * 4, kk)], acc);
  };

  // This block's slices: all, or (split-K) the split's range of ceil(slices / SPLITS).
  const int slices = (kRowsP ? geo.redp : geo.red) / BK, per = (slices + SPLITS - 1) / SPLITS;
  const int k0 = min(slices, split * per), k1 = min(slices, k0 + per);
  if (k0 > 0) {                    // the range's first slice: where k0 advances would end
    t0 = k0 * BK;
    const int tap = t0 / geo.Cg, r = tap / geo.S;
    c0 = t0 - tap * geo.Cg;
    s = tap - r * geo.S;
    dr = r * geo.dh;
    ds = s * geo.dw;
    toff = (int)(r * geo.sr + s * geo.ss + (i64)c0 * xc);   // within 32 bits: ffma_refusal
  }
  if (k0 < k1) {
    load(0);
    store(0);
    landed();
    __syncthreads();
  }
  if (kDouble) {
    // Register double buffering of the fragments too: kk + 1's are read while kk's products
    // run, and the next slice's first ones right after the barrier, before this slice's last
    // products, which cover their latency. The products go in 2 x 2 blocks (outer_8x8's
    // kBlocks). H200, tools/ffma_dev.py, TFLOPS, in one process against the loop before
    // (fragments read slice by slice, products row by row): cv4 45.5 against 40.4, cv8 43.6
    // against 40.1; the prefetch alone gave 41.3 and 40.4.
    float4 fa[2][2], fb[2][2];
    auto frag = [&](int set, int buf, int kk) {
      fa[set][0] = *reinterpret_cast<const float4*>(&Ws[buf][kk][col(ty * 4, kk)]);
      fa[set][1] = *reinterpret_cast<const float4*>(&Ws[buf][kk][col(BM / 2 + ty * 4, kk)]);
      fb[set][0] = *reinterpret_cast<const float4*>(&Xs[buf][kk][col(tx * 4, kk)]);
      fb[set][1] = *reinterpret_cast<const float4*>(&Xs[buf][kk][col(BN / 2 + tx * 4, kk)]);
    };
    auto math = [&](int set) {
      outer_8x8<true>(fa[set][0], fa[set][1], fb[set][0], fb[set][1], acc);
    };
    if (k0 < k1) frag(0, 0, 0);
    for (int k = k0; k < k1; ++k) {
      const bool more = k + 1 < k1;
      const int buf = (k - k0) & 1;
      if (more) {
        advance();
        load(buf ^ 1);             // in flight while this slice is computed (kStridedX's
                                   // copies write buf ^ 1 already: see store's comment)
      }
#pragma unroll
      for (int kk = 0; kk + 1 < BK; ++kk) {
        frag((kk + 1) & 1, buf, kk + 1);
        math(kk & 1);
      }
      if (more) store(buf ^ 1);    // buf ^ 1 was last read before the last barrier
      landed();
      __syncthreads();
      if (more) frag(0, buf ^ 1, 0);
      math((BK - 1) & 1);          // BK is even: the next slice's kk = 0 went to set 0
    }
  } else {
    for (int k = k0; k < k1; ++k) {
      compute(0);
      __syncthreads();
      if (k + 1 < k1) {
        advance();
        load(0);
        store(0);
        landed();
        __syncthreads();
      }
    }
  }

  if constexpr (kFixup) {
    // Split-K's fixup (see the top): this range's sums into partial[split] (pixel-major, as
    // im2win_ffma_split writes them), then the tile's count; the last block sums the ranges.
    const i64 range = geo.npix * geo.K;
    const bool vec = geo.Kg % 4 == 0;               // partial: 16-byte aligned (the workspace)
    // fn(j, half, pixel's offset + first filter, first filter) for this thread's 8 pixels in
    // the launch and two 4-filter halves
    auto each = [&](auto&& fn) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const i64 pix = j0 + (j < 4 ? tx * 4 + j : BN / 2 + tx * 4 + j - 4);
        if (pix >= geo.npix) continue;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int f = m0 + half * (BM / 2) + ty * 4;
          fn(j, half, pix * geo.K + f, f);
        }
      }
    };
    float* const mine = partial + split * range;
    each([&](int j, int half, i64 at, int f) {
      if (vec && f + 3 < geo.Kg) {
        *reinterpret_cast<float4*>(mine + at) = make_float4(
            acc[half * 4][j], acc[half * 4 + 1][j], acc[half * 4 + 2][j], acc[half * 4 + 3][j]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (f + e < geo.Kg) mine[at + e] = acc[half * 4 + e][j];
      }
    });
    __threadfence();                                // the sums visible before the count
    __syncthreads();
    __shared__ int last;
    if (tid == 0) {
      int* const count = reinterpret_cast<int*>(partial + SPLITS * range) +
                         blockIdx.y * gridDim.x + blockIdx.x;
      last = atomicAdd(count, 1) == SPLITS - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    // The last block: each output the ranges' sums in order of the split from zero (as
    // split_reduce adds them), its own range's from its registers (the bits it wrote), read
    // past L1 (__ldcg: written by other SMs); into acc for the epilogue below.
    each([&](int j, int half, i64 at, int f) {
      float v[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int r = 0; r < SPLITS; ++r) {
        if (r == split) {
#pragma unroll
          for (int e = 0; e < 4; ++e) v[e] = add(v[e], acc[half * 4 + e][j]);
        } else if (vec && f + 3 < geo.Kg) {
          const float4 p = __ldcg(reinterpret_cast<const float4*>(partial + r * range + at));
          v[0] = add(v[0], p.x);
          v[1] = add(v[1], p.y);
          v[2] = add(v[2], p.z);
          v[3] = add(v[3], p.w);
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (f + e < geo.Kg) v[e] = add(v[e], __ldcg(partial + r * range + at + e));
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[half * 4 + e][j] = v[e];
    });
  }

  if constexpr (kNCHWY == 1) {
    static_assert(SPLITS == 1 || kFixup, "split-K's partial sums are pixel-major");
    // Epilogue into an NCHW y (an NCHW problem's NHWC twin, or a stem's window columns):
    // y[n, k, pq]. Each filter's 4 neighbouring pixels are one float4 where PQ is a multiple of
    // 4 and y 16-byte aligned (the 4 then lie in one image): a warp's store writes 128
    // contiguous bytes of each of 4 filters. Else scalars, the image advanced by comparison.
    const bool vec = geo.PQ % 4 == 0 && ((unsigned long long)y & 15) == 0;
    auto value = [&](int i, int j) {
      return bias ? add(acc[i][j], bias[g * geo.Kg + m0 + (i / 4) * (BM / 2) + ty * 4 + i % 4])
                  : acc[i][j];
    };
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const i64 pix = j0 + h * (BN / 2) + tx * 4;
      if (pix >= geo.npix) continue;
      i64 n;
      int pq;
      image_of(geo, pix, n, pq);
      if (vec) {
        // y's place of this thread's first filter, once; its other filters' rows PQ apart
        // from it (in place of each row's 64-bit index: H200, tools/nchw_dev.py, TFLOPS
        // against the loop before: cv8 45.3 / 44.9, cv9 42.0 / 41.5, cv10 41.2 / 40.7)
        const int f0 = m0 + ty * 4;
        float* const at = y + (n * geo.K + g * geo.Kg + f0) * geo.PQ + pq;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          if (f0 + (i / 4) * (BM / 2) + i % 4 >= geo.Kg) continue;
          *reinterpret_cast<float4*>(at + (i64)((i / 4) * (BM / 2) + i % 4) * geo.PQ) =
              make_float4(value(i, h * 4), value(i, h * 4 + 1), value(i, h * 4 + 2),
                          value(i, h * 4 + 3));
        }
        continue;
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int f = m0 + (i / 4) * (BM / 2) + ty * 4 + i % 4;
        if (f >= geo.Kg) continue;
        const int k = g * geo.Kg + f;
        i64 ne = n;
        int pe = pq;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (pix + e >= geo.npix) break;
          y[(ne * geo.K + k) * geo.PQ + pe] = value(i, h * 4 + e);
          if (++pe == geo.PQ) {
            pe = 0;
            ++ne;
          }
        }
      }
    }
    return;
  }
  if constexpr (kNCHWY == 2) {
    static_assert(SPLITS == 1 || kFixup, "split-K's partial sums are pixel-major");
    // kNCHWY == 2 (im2win_ffma_to_nchw's kStaged, where P*Q is not a multiple of 4): the tile
    // passes through shared memory, RP of each thread's 8 filter rows a pass, and a warp
    // stores 32 consecutive pixels of one filter an instruction (form 1's scalar stores 16
    // bytes apart write every sector 4 times).
    auto value = [&](int i, int j, int f) {
      return bias ? add(acc[i][j], bias[g * geo.Kg + f]) : acc[i][j];
    };
    // The stage is Xs, free after the main loop's last barrier (RP row indices a pass, as
    // many as it holds). A 16 KB buffer of its own, in one kernel with form 1, cost form 1's
    // layers 7-11% (H200, tools/ab_bench.py, NCHW: cv8 42.4 -> 39.1 TFLOPS, cv10 37.4 -> 33.3).
    constexpr int FL = BM / 8;                              // filter rows a row index i spans
    constexpr int FIT = NBUF * BK / FL;                     // row indices Xs holds
    constexpr int RP = FIT >= 8 ? 8 : FIT >= 4 ? 4 : FIT >= 2 ? 2 : 1;
    constexpr int LANES = BN / 32, WARPS = NT / 32;
    static_assert(8 % RP == 0, "passes of whole row indices");
    float(*stage)[BN];
    if constexpr (FIT >= 1) {
      stage = reinterpret_cast<float(*)[BN]>(&Xs[0][0][0]);
    } else {                                                // one 8-deep buffer of 128 filters
      __shared__ __align__(16) float own[FL][BN];
      stage = own;
    }
    i64 base[LANES];                                        // y's offset of this lane's pixels
#pragma unroll
    for (int m = 0; m < LANES; ++m) {
      const i64 pix = j0 + lane + 32 * m;
      i64 n;
      int pq;
      image_of(geo, pix < geo.npix ? pix : 0, n, pq);
      base[m] = pix < geo.npix ? n * geo.K * geo.PQ + pq : -1;
    }
#pragma unroll
    for (int pass = 0; pass < 8 / RP; ++pass) {
      __syncthreads();                       // Xs's last reads, or the last pass's stores
#pragma unroll
      for (int r = 0; r < RP; ++r) {
        const int i = pass * RP + r;
        const int f = m0 + (i / 4) * (BM / 2) + ty * 4 + i % 4;
        float* row = stage[r * FL + ty];
        const bool ok = f < geo.Kg;
        *reinterpret_cast<float4*>(row + tx * 4) = ok ?
            make_float4(value(i, 0, f), value(i, 1, f), value(i, 2, f), value(i, 3, f)) :
            make_float4(0.f, 0.f, 0.f, 0.f);
        *reinterpret_cast<float4*>(row + BN / 2 + tx * 4) = ok ?
            make_float4(value(i, 4, f), value(i, 5, f), value(i, 6, f), value(i, 7, f)) :
            make_float4(0.f, 0.f, 0.f, 0.f);
      }
      __syncthreads();
      for (int q = warp; q < RP * FL; q += WARPS) {
        const int i = pass * RP + q / FL, fl = q % FL;
        const int f = m0 + (i / 4) * (BM / 2) + fl * 4 + i % 4;
        if (f >= geo.Kg) continue;
        const i64 k = (i64)(g * geo.Kg + f) * geo.PQ;
#pragma unroll
        for (int m = 0; m < LANES; ++m)
          if (base[m] >= 0) y[base[m] + k] = stage[q][lane + 32 * m];
      }
    }
    return;
  }

  // Epilogue: overwrite y, masking the tails; float4 stores of 4 filters where they can be.
  const bool vec = geo.Kg % 4 == 0 && ((unsigned long long)y & 15) == 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const i64 pix = j0 + (j < 4 ? tx * 4 + j : BN / 2 + tx * 4 + j - 4);
    if (pix >= geo.npix) continue;
    float* out = y + pix * geo.K + g * geo.Kg;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int f = m0 + half * (BM / 2) + ty * 4;
      float v[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        v[e] = acc[half * 4 + e][j];
        if (bias && f + e < geo.Kg) v[e] = add(v[e], bias[g * geo.Kg + f + e]);
      }
      if (vec && f + 3 < geo.Kg) {
        *reinterpret_cast<float4*>(out + f) = make_float4(v[0], v[1], v[2], v[3]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (f + e < geo.Kg) out[f + e] = v[e];
      }
    }
  }
}

template <int BM, int BN, int BK, bool kDouble, bool kSwizzle, bool kStridedX,
          bool kTail = false, bool kExact = false, bool kTaps = false>
__global__ void __launch_bounds__(BM * BN / 64, BM * BN / 64 >= 256 ? 2 : 65536 / (BM * BN / 64) / 168)
    im2win_ffma(const float* __restrict__ x, const float* __restrict__ w,
                const float* __restrict__ bias, float* __restrict__ y,
                const int2* __restrict__ taps, Geometry geo, int g0) {
  ffma_conv<BM, BN, BK, kDouble, kSwizzle, 1, 0, kStridedX, kTail, kExact, kTaps>(
      x, w, bias, y, taps, geo, g0);
}

// The same writing the NCHW y[n, k, pq] (Geometry.y_nchw: an NCHW problem's NHWC twin, or a
// stem's window columns), in place of a channels-last y transposed after it: float4 along the
// pixels (scalars where y is not 16-byte aligned), or with kStaged, for P*Q not a multiple of
// 4, through shared memory. An entry of its own, so that im2win_ffma's code (whose speed hangs
// on ptxas's register choice) stays as it was, and each form's main loop too.
template <int BM, int BN, int BK, bool kDouble, bool kSwizzle, bool kStaged, bool kStridedX,
          bool kTail = false, bool kExact = false, bool kTaps = false>
__global__ void __launch_bounds__(BM * BN / 64, BM * BN / 64 >= 256 ? 2 : 65536 / (BM * BN / 64) / 168)
    im2win_ffma_to_nchw(const float* __restrict__ x, const float* __restrict__ w,
                        const float* __restrict__ bias, float* __restrict__ y,
                        const int2* __restrict__ taps, Geometry geo, int g0) {
  ffma_conv<BM, BN, BK, kDouble, kSwizzle, 1, kStaged ? 2 : 1, kStridedX, kTail, kExact, kTaps>(
      x, w, bias, y, taps, geo, g0);
}

// Split-K: FP32 partial sums into `partial` (SPLITS x N*P*Q x K, no bias), which split_reduce
// then adds into y; one group.
template <int BM, int BN, int BK, bool kDouble, bool kSwizzle, int SPLITS, bool kStridedX,
          bool kExact = false>
__global__ void __launch_bounds__(BM * BN / 64, BM * BN / 64 >= 256 ? 2 : 65536 / (BM * BN / 64) / 168)
    im2win_ffma_split(const float* __restrict__ x, const float* __restrict__ w,
                      const float* __restrict__ bias, float* __restrict__ y,
                      float* __restrict__ partial, Geometry geo, int g0) {
  (void)bias;
  (void)y;
  ffma_conv<BM, BN, BK, kDouble, kSwizzle, SPLITS, 0, kStridedX, false, kExact>(
      x, w, nullptr, partial, nullptr, geo, g0);
}

// Split-K with its fixup (Options.split_fixup): the same ranges and partial sums, the
// tile's last block adding them into y (kNCHWY: 0 NHWC, 1 and 2 im2win_ffma_to_nchw's forms)
// with the bias. `partial`: SPLITS x N*P*Q x K floats, then an int per tile (grid x by y)
// zeroed before the launch. One group.
template <int BM, int BN, int BK, bool kDouble, bool kSwizzle, int SPLITS, int kNCHWY,
          bool kStridedX, bool kExact = false>
__global__ void __launch_bounds__(BM * BN / 64, BM * BN / 64 >= 256 ? 2 : 65536 / (BM * BN / 64) / 168)
    im2win_ffma_fixup(const float* __restrict__ x, const float* __restrict__ w,
                      const float* __restrict__ bias, float* __restrict__ y,
                      float* __restrict__ partial, Geometry geo, int g0) {
  ffma_conv<BM, BN, BK, kDouble, kSwizzle, SPLITS, kNCHWY, kStridedX, false, kExact, false,
            true>(x, w, bias, y, nullptr, geo, g0, partial);
}
