// narrow_ffma.cu: float32 stems on CUDA cores: one group of C <= 4 channels, NCHW or NHWC, any
// stride, padding and dilation. A GEMM tile pads such a reduction (a 3x3 stem of 3 channels
// reduces over 27, an 11x11 one over 363) to whole slices of its depth, and needs its window
// columns materialised first (plan.columns_stage); here each thread multiplies its pixels'
// windows, read in place from the tile's input rows in shared memory, by its filters.
//
//   y[n,k,p,q] = bias[k] + sum_{r<R, s<S, c<C} x[n, c, p*sh + r*dh - pt, q*sw + s*dw - pl]
//                                           * w[k, c, r, s]      (window order: r, s, then c)
//
// x is read through element strides (any view); w is contiguous in the problem's layout ((K,
// C, R, S) for kNCHW, else (K, R, S, C)); y contiguous in it ((N, K, P, Q) or (N, P, Q, K)).
// Offsets into x, w and y are 64-bit.
//
// A block computes KB filters (blockIdx.y: the filter block) of TP x TQ output pixels of one
// image, looping over the tiles blockIdx.x + i*gridDim.x:
//   - The tile's input window (its rows (TP-1)*sh + (R-1)*dh + 1 and columns (TQ-1)*sw +
//     (S-1)*dw + 1, zeros outside x: the R rows im2win's window interleaves under each output
//     row, each read once from x) sits in shared memory as [row][channel][column], or with
//     kPacked as [row][column][CP], a column's C channels in CP words (C rounded up to 2 or
//     4: a 3-channel column is one float4, its fourth word never read); the columns of a row
//     stored by phase (column c at (c % sw) * ceil(cols / sw) + c / sw), so that consecutive
//     output columns read consecutive words (entries) at every tap and stride. Copied by
//     cp.async, 4 bytes an element, a lane a column.
//   - kResident: the block's filters ([r][s][c][KB], zeros past K) are copied once, and each
//     next tile's window while one is computed (two window buffers, one barrier a tile).
//     Otherwise (filters too large to stay) they come a filter row at a time, [s][c][KB],
//     copied while the row before is computed: two row buffers, one barrier a row.
//   - A warp holds 32 filters (lane % 4: 8 of them) of TN*8 pixels (lane / 4: pixels j*8 +
//     lane/4, j < TN, of the warp's TN*8; TN = 8, or 7 where tiles of 56-pixel multiples fit
//     the output better, as 55 x 55 and 56 x 56 maps); the block's KB/32 x WP warps cover KB
//     filters of WP*TN*8 pixels, the idx-th pixel of the tile at (idx / TQ, idx % TQ) (past
//     TP*TQ: computed on word 0, not stored). For each (r, s, c) in window order a thread
//     loads its TN pixels' words (the 8 pixels of a load are consecutive columns: one 32-byte
//     run) and 2 float4 of its filters, for 8*TN fused multiply-adds (the C channels of a tap
//     unrolled); with kPacked, for each tap (r, s) its filters' 2 float4 a channel, then each
//     pixel's C channels as one load and their 8*C products, c innermost (fewer instructions,
//     but 4 lanes read each 16-byte entry: it pays on long reductions, plan.narrow_ffma_tile).
//   - The outputs, bias added last: NHWC, two float4 a pixel (8 filters; where K % 4 == 0 and
//     y is 16-byte aligned); NCHW, a filter's 8 consecutive pixels a store for 8 lanes, or
//     with kStage through 4 x 72 words of shared memory a warp, a filter row a pass, a store
//     32 consecutive pixels of one filter (of the warp's TN*8).

template <int TB>
__device__ __forceinline__ void narrow_ffma_copy(void* dst, const void* src, bool valid) {
  const unsigned to = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(to), "l"(src), "n"(TB),
               "r"(valid ? TB : 0));
}

// A window entry's CP words (a column's channels) as one shared load: v[u] = channel u's.
template <int CP>
__device__ __forceinline__ void narrow_ffma_entry(const char* p, float (&v)[CP]) {
  if constexpr (CP == 4) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
  } else if constexpr (CP == 2) {
    const float2 t = *reinterpret_cast<const float2*>(p);
    v[0] = t.x, v[1] = t.y;
  } else {
    v[0] = *reinterpret_cast<const float*>(p);
  }
}

template <int C, int KB, int WP, int TN, bool kNCHW, bool kResident, bool kStage,
          bool kPacked>
__global__ void __launch_bounds__(KB * WP, 2)
    narrow_ffma(const float* __restrict__ x, const float* __restrict__ w,
                const float* __restrict__ bias, float* __restrict__ y, int N, int Cx, int H,
                int W, int K, int G, int R, int S, int P, int Q, int sh, int sw, int dh, int dw,
                int pt, int pl, int TP, int TQ, i64 xn, i64 xc, i64 xh, i64 xw) {
  constexpr int THREADS = KB * WP, FW = KB / 32;
  constexpr int CP = C == 3 ? 4 : C;                 // kPacked: words a window entry
  constexpr int EW = kPacked ? CP : 1, PW = kPacked ? 1 : C;   // an entry's words, planes a row
  static_assert(C >= 1 && C <= 4 && KB % 32 == 0 && THREADS <= 256 && (TN == 7 || TN == 8),
                "form");
  const int slice = S * C * KB;                      // one filter row's weights, [s][c][KB]
  const int rows = (TP - 1) * sh + (R - 1) * dh + 1, cols = (TQ - 1) * sw + (S - 1) * dw + 1;
  const int cw = (cols + sw - 1) / sw, row_pitch = cw * sw;   // entries per stored row
  const int window = rows * PW * row_pitch * EW;     // a tile's window, words
  const int tiles_q = (Q + TQ - 1) / TQ, tiles_p = (P + TP - 1) / TP;
  const int tiles = N * tiles_p * tiles_q;           // < 2^31: checked by the planner
  if ((int)blockIdx.x >= tiles) return;              // (no copy left in flight at exit)
  const int k0 = blockIdx.y * KB;

  extern __shared__ __align__(16) unsigned char narrow_ffma_smem[];
  float* ws = reinterpret_cast<float*>(narrow_ffma_smem);    // kResident: R, else 2 filter rows
  // the window: [rows][C][row_pitch], or kPacked [rows][row_pitch][CP]
  float* xs = ws + (kResident ? R : 2) * slice;
  // kStage (NCHW): each warp's outputs pass through 4 x 72 words of its own, a filter row a
  // pass, so that a store writes 32 consecutive pixels of one filter
  float* stage = xs + (kResident ? 2 : 1) * window + (threadIdx.x / 32) * 4 * 72;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int f0 = (warp % FW) * 32 + (lane % 4) * 8;      // the thread's 8 filters in the block
  int base[TN];                                   // its pixels' first words, as bytes
#pragma unroll
  for (int j = 0; j < TN; ++j) {
    const int idx = ((warp / FW) * TN + j) * 8 + lane / 4, pr = idx / TQ, pc = idx - pr * TQ;
    base[j] = 4 * EW * (idx < TP * TQ ? pr * sh * PW * row_pitch + pc : 0);
  }
  const bool vector_y = !kNCHW && K % 4 == 0 && reinterpret_cast<unsigned long long>(y) % 16 == 0;

  // Filter row r into `to` ([s][c][KB], zeros past K): thread t copies filter t % KB's
  // elements t / KB + i*WP, consecutive threads consecutive words.
  const int kk = threadIdx.x % KB;
  const bool k_in = k0 + kk < K;
  const float* wk = w + (k_in ? (i64)(k0 + kk) * R * S * C : 0);
  auto copy_row = [&](int r, float* to) {
    for (int e = threadIdx.x / KB; e < S * C; e += WP) {
      const int s = e / C, c = e - s * C;
      narrow_ffma_copy<4>(to + e * KB + kk, wk + (kNCHW ? (c * R + r) * S + s : r * S * C + e),
                          k_in);
    }
  };
  // Tile `tile`'s input window into `to`: a warp per stored row and phase, a lane per column.
  auto fill = [&](int tile, float* to) {
    const int tq = tile % tiles_q, rest = tile / tiles_q, tp = rest % tiles_p;
    const float* xb = x + (i64)(rest / tiles_p) * xn;
    const int h0 = tp * TP * sh - pt, w0 = tq * TQ * sw - pl;
    for (int rp = warp; rp < rows * sw; rp += THREADS / 32) {
      const int ri = rp / sw, phase = rp - ri * sw, h = h0 + ri;
      float* srow = to + (ri * PW * row_pitch + phase * cw) * EW;
      for (int j = lane; j < cw; j += 32) {
        const int ci = j * sw + phase, c = w0 + ci;
        const bool in = ci < cols && h >= 0 && h < H && c >= 0 && c < W;
        const float* from = in ? xb + h * xh + c * xw : x;
#pragma unroll
        for (int u = 0; u < C; ++u)
          narrow_ffma_copy<4>(srow + (kPacked ? j * CP + u : u * row_pitch + j),
                              from + (in ? u * xc : 0), in);
      }
    }
  };
  float acc[8][TN];
  // Filter row r's taps ([s][c][KB] at wr, the thread's filters) on the window at xt. The
  // tap's word offset is the same for the whole block (kept out of the per-pixel addresses):
  // column s*dw at phase (s*dw) % sw, entry (s*dw) / sw, advanced by dw a tap.
  const int step_phase = dw % sw, step_entry = dw / sw;
  auto row_products = [&](int r, const float* wr, const float* xt) {
    int phase = 0, entry = 0;
#pragma unroll 1
    for (int s = 0; s < S; ++s) {
      const char* xtap = reinterpret_cast<const char*>(
          xt + (r * dh * PW * row_pitch + phase * cw + entry) * EW);
      if constexpr (kPacked) {
        float wv[C][8];
#pragma unroll
        for (int c = 0; c < C; ++c) {
          const float4 wa = *reinterpret_cast<const float4*>(wr + (s * C + c) * KB);
          const float4 wb = *reinterpret_cast<const float4*>(wr + (s * C + c) * KB + 4);
          wv[c][0] = wa.x, wv[c][1] = wa.y, wv[c][2] = wa.z, wv[c][3] = wa.w;
          wv[c][4] = wb.x, wv[c][5] = wb.y, wv[c][6] = wb.z, wv[c][7] = wb.w;
        }
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          float xv[CP];                         // the pixel's C channels at the tap: one load
          narrow_ffma_entry<CP>(xtap + base[j], xv);
#pragma unroll
          for (int c = 0; c < C; ++c)
#pragma unroll
            for (int f = 0; f < 8; ++f) acc[f][j] = madd(wv[c][f], xv[c], acc[f][j]);
        }
      } else {
#pragma unroll
        for (int c = 0; c < C; ++c) {
          const float4 wa = *reinterpret_cast<const float4*>(wr + (s * C + c) * KB);
          const float4 wb = *reinterpret_cast<const float4*>(wr + (s * C + c) * KB + 4);
          const float wv[8] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
          const char* xch = xtap + 4 * c * row_pitch;
#pragma unroll
          for (int j = 0; j < TN; ++j) {
            const float xval = *reinterpret_cast<const float*>(xch + base[j]);
#pragma unroll
            for (int f = 0; f < 8; ++f) acc[f][j] = madd(wv[f], xval, acc[f][j]);
          }
        }
      }
      phase += step_phase;
      entry += step_entry;
      if (phase >= sw) {
        phase -= sw;
        ++entry;
      }
    }
  };
  auto store = [&](int tile) {
    const int tq = tile % tiles_q, rest = tile / tiles_q, tp = rest % tiles_p;
    const i64 n = rest / tiles_p;
    const int p0 = tp * TP, q0 = tq * TQ, k = k0 + f0;
    float b[8];
#pragma unroll
    for (int f = 0; f < 8; ++f) b[f] = bias && k + f < K ? bias[k + f] : 0.f;
    if constexpr (kNCHW && kStage) {
      // lane's pixels in the passes' stores: the warp's (lane + 32*h)-th, h < 2, of its TN*8
      int at[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int idx = (warp / FW) * TN * 8 + lane + 32 * h, pr = idx / TQ, pc = idx - pr * TQ;
        at[h] = lane + 32 * h < TN * 8 && idx < TP * TQ && p0 + pr < P && q0 + pc < Q
                    ? (p0 + pr) * Q + q0 + pc
                    : -1;
      }
      const int kw = k0 + (warp % FW) * 32;          // the warp's first filter
#pragma unroll
      for (int f = 0; f < 8; ++f) {
#pragma unroll
        for (int j = 0; j < TN; ++j)
          stage[(lane % 4) * 72 + j * 8 + lane / 4] = add(acc[f][j], b[f]);
        __syncwarp();
#pragma unroll
        for (int g = 0; g < 4; ++g)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            if (at[h] >= 0 && kw + g * 8 + f < K)
              y[(n * K + kw + g * 8 + f) * P * Q + at[h]] = stage[g * 72 + lane + 32 * h];
        __syncwarp();
      }
    } else {
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int idx = ((warp / FW) * TN + j) * 8 + lane / 4, pr = idx / TQ, pc = idx - pr * TQ;
        const int p = p0 + pr, q = q0 + pc;
        if (idx >= TP * TQ || p >= P || q >= Q) continue;
        if (kNCHW) {
#pragma unroll
          for (int f = 0; f < 8; ++f)
            if (k + f < K) y[((n * K + k + f) * P + p) * Q + q] = add(acc[f][j], b[f]);
        } else {
          float* out = y + ((n * P + p) * Q + q) * K + k;
          if (vector_y && k + 8 <= K) {
            float4* out4 = reinterpret_cast<float4*>(out);
            out4[0] = make_float4(add(acc[0][j], b[0]), add(acc[1][j], b[1]), add(acc[2][j], b[2]),
                                  add(acc[3][j], b[3]));
            out4[1] = make_float4(add(acc[4][j], b[4]), add(acc[5][j], b[5]), add(acc[6][j], b[6]),
                                  add(acc[7][j], b[7]));
          } else {
#pragma unroll
            for (int f = 0; f < 8; ++f)
              if (k + f < K) out[f] = add(acc[f][j], b[f]);
          }
        }
      }
    }
  };
  auto clear = [&] {
#pragma unroll
    for (int f = 0; f < 8; ++f)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[f][j] = 0.f;
  };

  if constexpr (kResident) {
    // The whole filter once; the next tile's window copied while this one's is computed (two
    // buffers, one barrier a tile).
    for (int r = 0; r < R; ++r) copy_row(r, ws + r * slice);
    fill(blockIdx.x, xs);
    asm volatile("cp.async.commit_group;\n" ::);
    int buffer = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, buffer ^= 1) {
      asm volatile("cp.async.wait_group 0;\n" ::);
      __syncthreads();                   // this tile's window landed; the last one computed
      if (tile + gridDim.x < tiles) {
        fill(tile + gridDim.x, xs + (buffer ^ 1) * window);
        asm volatile("cp.async.commit_group;\n" ::);
      }
      clear();
#pragma unroll 1
      for (int r = 0; r < R; ++r) row_products(r, ws + r * slice + f0, xs + buffer * window);
      store(tile);
    }
  } else {
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      copy_row(0, ws);
      fill(tile, xs);
      asm volatile("cp.async.commit_group;\n" ::);
      clear();
#pragma unroll 1
      for (int r = 0; r < R; ++r) {
        asm volatile("cp.async.wait_group 0;\n" ::);
        __syncthreads();                 // row r (and the window) landed; row r - 1 computed
        if (r + 1 < R) {
          copy_row(r + 1, ws + ((r + 1) & 1) * slice);
          asm volatile("cp.async.commit_group;\n" ::);
        }
        row_products(r, ws + (r & 1) * slice + f0, xs);
      }
      store(tile);
      __syncthreads();                   // the window and filter row 0 are copied again next
    }
  }
}
