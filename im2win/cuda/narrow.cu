// narrow.cu: float16 / bfloat16 convolutions of short reductions on Tensor Cores (mma.sync
// m16n8k16), NHWC: stems (one group of C <= 8 channels) and grouped convolutions of CG = C/G =
// K/G channels per group, CG of 8, 16 or 32. A general im2win tile wastes most of its Tensor-Core
// work on them (a 3x3 stem reduces over 27, a group of 8 over 72, and the groups' GEMMs are 8
// filters wide); here each warp's n8 tiles lie within one group, and each A fragment is loaded
// straight from the window.
//
//   y[n,p,q,k] = bias[k] + sum_{r<R, s<S, u<CG} x[n, p*sh + r*dh - pt, q*sw + s*dw - pl, g*CG + u]
//                                              * w[k, r, s, u]      (g = k / (K/G); window order)
//
// x is read through element strides (any view; VX: for groups, channels contiguous, every
// stride and the start aligned to 8-element vectors; for stems, each pixel's C channels
// contiguous and x 4-byte aligned); w is contiguous (K, R, S, CG); y contiguous (N, P, Q, K).
// Offsets into x and y are 64-bit.
//
// A block of 8 warps computes KB output channels (whole groups, or part of a stem's one group)
// for TP x TQ tiles of one image's outputs:
//   - It copies the tile's input window (zero outside x) into shared memory as
//     [row][column][channel], CP channels per group (a stem's C padded to 8 with zeros), at a
//     pixel pitch of an odd number of 16-byte rows, so the 8 rows of an ldmatrix (consecutive
//     pixels) hit distinct banks. At a column stride sw the columns are stored by phase
//     (column c at (c % sw) * ceil(cols / sw) + c / sw): consecutive output columns read
//     consecutive pixels at every stride.
//   - The reduction runs in window order, e = (r*S + s)*CP + u, in k16 steps; each 8-element
//     half of a step lies within one tap, so lane l's ldmatrix row (pixel l % 16, half l / 16)
//     is that pixel's window at the tap: the window tile is the A operand in place. Steps past
//     the reduction read a row of zeros.
//   - The filters sit in shared memory as [KB][E] (E: the reduction rounded up to 16, zeros
//     past it), B fragments by ldmatrix.
//   - Warps: KB / (8*NW) across the channels (NW n8 tiles each, one group's or a stem's), the
//     rest across the pixels (MT m16 tiles each).
//   - The grid holds as many blocks as fit the device at once (blockIdx.y: the channel block);
//     each loads its filters once and loops over output tiles blockIdx.x + i*gridDim.x. With
//     VX the next tile's window is copied (cp.async, a second buffer) while one is computed;
//     a stem's, as the raw rows x holds (C channels a pixel, 4-byte copies), which a pass
//     through shared memory then lays out as the window tile.

__device__ __forceinline__ unsigned narrow_smem_u32(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}

// A BYTES-wide global-to-shared copy by cp.async, zeros where !valid (nothing is read then).
template <int BYTES>
__device__ __forceinline__ void narrow_copy(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(narrow_smem_u32(dst)),
               "l"(src), "n"(BYTES), "r"(valid ? BYTES : 0));
}

// The pipeline's turn: commit the next tile's copies where they were issued and wait for this
// tile's (every group but the newest), else wait for all.
__device__ __forceinline__ void narrow_wait_this(bool next_issued) {
  if (next_issued) {
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 1;\n" ::);
  } else {
    asm volatile("cp.async.wait_group 0;\n" ::);
  }
}

// Pitches in elements: an odd number of 16-byte (8-element) rows.
__host__ __device__ constexpr int narrow_pitch(int elements) {
  return (elements / 8) % 2 ? elements : elements + 8;
}

// A stem's raw rows into `rows_to` (rows of raw_pitch elements) by cp.async (x's pixels are C
// contiguous channels, x 4-byte aligned), a warp per row: of the input rows h0 .. h0 + rows - 1
// and columns w0 .. w0 + cols - 1 of image xb, the columns inside x, as x holds them, placed
// as from the ALIGN-byte boundary at or below the first one's first channel (so a row's first
// element lies at raw index (its address % ALIGN) / 2), in 4-byte words, and with ALIGN = 16
// in 16-byte copies between the first and last 16-byte boundaries; the last element by itself
// where it ends a word early. Nothing outside the row's elements is read. The caller commits
// and waits.
template <int ALIGN, typename T>
__device__ __forceinline__ void narrow_fill_raw(const T* xb, int h0, int w0, int rows, int cols,
                                                int H, int W, int C, i64 xh, int raw_pitch,
                                                T* rows_to, int warp, int lane) {
  const int ca = max(w0, 0), cb = min(w0 + cols, W);
  for (int ri = warp; ri < rows; ri += 8) {
    const int h = h0 + ri;
    if (h < 0 || h >= H || ca >= cb) continue;
    const unsigned long long first = reinterpret_cast<unsigned long long>(xb + h * xh + ca * C);
    const unsigned long long end = reinterpret_cast<unsigned long long>(xb + h * xh + cb * C);
    const unsigned long long start = first & ~3ull, stop = end & ~3ull;
    unsigned char* row = reinterpret_cast<unsigned char*>(rows_to + ri * raw_pitch);
    const unsigned long long base = first & ~(unsigned long long)(ALIGN - 1);   // row[0]'s
    unsigned long long words_to = stop;                // 4-byte words: [start, words_to)
    if (ALIGN == 16) {
      const unsigned long long a16 = (start + 15) & ~15ull, e16 = stop & ~15ull;
      if (a16 < e16) {
        for (unsigned long long g = a16 + 16 * lane; g < e16; g += 16 * 32)
          narrow_copy<16>(row + (g - base), reinterpret_cast<const void*>(g), true);
        for (unsigned long long g = e16 + 4 * lane; g < stop; g += 4 * 32)
          narrow_copy<4>(row + (g - base), reinterpret_cast<const void*>(g), true);
        words_to = a16;
      }
    }
    for (unsigned long long g = start + 4 * lane; g < words_to; g += 4 * 32)
      narrow_copy<4>(row + (g - base), reinterpret_cast<const void*>(g), true);
    if (lane == 0 && end % 4) *reinterpret_cast<T*>(row + (stop - base)) = xb[h * xh + cb * C - 1];
  }
}

template <typename T, int CP, int KB, int NW, int MT, bool STEM, bool VX>
__global__ void __launch_bounds__(256)
    narrow_nhwc(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                T* __restrict__ y, int N, int C, int H, int W, int K, int G, int R, int S, int P,
                int Q, int sh, int sw, int dh, int dw, int pt, int pl, int TP, int TQ,
                i64 xn, i64 xc, i64 xh, i64 xw) {
  constexpr int THREADS = 256, WN = KB / (8 * NW);
  constexpr int CB = STEM ? CP : KB;                 // channels per pixel in shared memory
  constexpr int PITCH = narrow_pitch(CB);
  static_assert(CP % 8 == 0 && KB % (8 * NW) == 0 && 8 % WN == 0 && (STEM || KB % CP == 0) &&
                (STEM || NW * 8 == CP), "tile");
  const int CG = C / G, RS = R * S;
  const int E = (RS * CP + 15) / 16 * 16, WP = narrow_pitch(E), steps = E / 16;
  const int k0 = blockIdx.y * KB;
  const int c0 = STEM ? 0 : k0;                      // the block's first input channel (K == C)

  const int tiles_q = (Q + TQ - 1) / TQ, tiles_p = (P + TP - 1) / TP;
  const int tiles = N * tiles_p * tiles_q;           // < 2^31: checked by the planner
  const int rows = (TP - 1) * sh + (R - 1) * dh + 1, cols = (TQ - 1) * sw + (S - 1) * dw + 1;
  const int cw = (cols + sw - 1) / sw, row_pitch = cw * sw;   // pixels per stored row

  extern __shared__ __align__(16) unsigned char narrow_smem[];
  T* ws = reinterpret_cast<T*>(narrow_smem);                  // [KB][WP]
  int* offsets = reinterpret_cast<int*>(ws + KB * WP);         // [steps][2], elements
  T* zeros = reinterpret_cast<T*>(offsets + (2 * steps + 3) / 4 * 4);   // one 16-byte row
  T* xs = zeros + 8;               // [rows][row_pitch][PITCH], twice for groups' cp.async
  const int buffer = rows * row_pitch * PITCH;
  // A stem's raw rows (VX): the columns of x it reads, as x holds them (C channels a pixel),
  // from the 4-byte word the first one lies in; two buffers, after xs.
  const int raw_pitch = (cols * C + 2 + 7) / 8 * 8;
  T* raw = xs + buffer;

  const T zero = from_acc<T>(0.f);
  for (int i = threadIdx.x; i < KB * E; i += THREADS) {
    const int kk = i / E, e = i - kk * E, tap = e / CP, u = e - tap * CP;
    ws[kk * WP + e] = tap < RS && u < CG ? w[(i64)(k0 + kk) * RS * CG + tap * CG + u] : zero;
  }
  for (int i = threadIdx.x; i < 2 * steps; i += THREADS) {   // where each half-step's rows are
    const int e = i * 8, tap = e / CP, r = tap / S, s = tap - r * S, col = s * dw;
    offsets[i] = tap < RS ? (r * dh * row_pitch + (col % sw) * cw + col / sw) * PITCH + e % CP
                          : -1;
  }
  if (threadIdx.x < 8) zeros[threadIdx.x] = zero;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Tile `tile`'s input window into `xs_tile`: a warp per stored row and phase (no division
  // per element), many loads in flight per thread: cp.async (VX: 8-channel vectors, CP == CG,
  // zero-filled; the caller commits and waits), or FILL loads into registers, then their
  // stores (element by element: a stem's C < 8, or unaligned x).
  auto fill = [&](int tile, T* xs_tile) {
    const int tq = tile % tiles_q, rest = tile / tiles_q, tp = rest % tiles_p;
    const T* xb = x + (i64)(rest / tiles_p) * xn;
    const int h0 = tp * TP * sh - pt, w0 = tq * TQ * sw - pl;
    for (int rp = warp; rp < rows * sw; rp += THREADS / 32) {
      const int ri = rp / sw, phase = rp - ri * sw, h = h0 + ri;
      const bool row_in = h >= 0 && h < H;
      const T* xrow = xb + h * xh;
      T* sphase = xs_tile + (ri * row_pitch + phase * cw) * PITCH;
      if constexpr (VX) {
        constexpr int V = CB / 8;
        for (int t = lane; t < cw * V; t += 32) {
          const int j = t / V, v = t - j * V, ci = j * sw + phase, c = w0 + ci;
          const bool ok = row_in && ci < cols && c >= 0 && c < W;
          narrow_copy<16>(sphase + j * PITCH + v * 8, ok ? xrow + c * xw + c0 + v * 8 : x, ok);
        }
      } else {
        constexpr int FILL = 16;
        const int real = STEM ? CG : CB;   // the elements of a pixel that x holds (stems: C)
        for (int t0 = lane; t0 < cw * real; t0 += 32 * FILL) {
          T value[FILL];
#pragma unroll
          for (int f = 0; f < FILL; ++f) {
            const int t = t0 + f * 32, j = t / real, e = t - j * real, ci = j * sw + phase;
            const int c = w0 + ci;
            value[f] = row_in && t < cw * real && ci < cols && c >= 0 && c < W
                           ? xrow[c * xw + (i64)(c0 + e) * xc] : zero;
          }
#pragma unroll
          for (int f = 0; f < FILL; ++f) {
            const int t = t0 + f * 32, j = t / real;
            if (t < cw * real) sphase[j * PITCH + t - j * real] = value[f];
          }
        }
        if (STEM)                        // a stem's channels past C: zeros
          for (int t = lane; t < cw * (CP - CG); t += 32) {
            const int j = t / (CP - CG);
            sphase[j * PITCH + CG + t - j * (CP - CG)] = zero;
          }
      }
    }
  };

  // A stem's raw rows of tile `tile` into `rows_to` (narrow_fill_raw).
  auto fill_raw = [&](int tile, T* rows_to) {
    const int tq = tile % tiles_q, rest = tile / tiles_q, tp = rest % tiles_p;
    narrow_fill_raw<4>(x + (i64)(rest / tiles_p) * xn, tp * TP * sh - pt, tq * TQ * sw - pl, rows,
                    cols, H, W, C, xh, raw_pitch, rows_to, warp, lane);
  };
  // ... and from the raw rows into the window tile, a pixel (16 bytes, zeros past C) a thread.
  auto convert = [&](int tile, const T* rows_from) {
    const int tq = tile % tiles_q, rest = tile / tiles_q, tp = rest % tiles_p;
    const T* xb = x + (i64)(rest / tiles_p) * xn;
    const int h0 = tp * TP * sh - pt, w0 = tq * TQ * sw - pl;
    const int ca = max(w0, 0), cb = min(w0 + cols, W);
    for (int i = threadIdx.x; i < rows * row_pitch; i += THREADS) {
      const int ri = i / row_pitch, rem = i - ri * row_pitch, phase = rem / cw;
      const int c = w0 + (rem - phase * cw) * sw + phase, h = h0 + ri;
      union { uint4 word; T e[8]; } px;
      px.word = make_uint4(0, 0, 0, 0);
      if (h >= 0 && h < H && c >= ca && c < cb) {
        const int shift = (int)(reinterpret_cast<unsigned long long>(xb + h * xh + ca * C) / 2 % 2);
        const T* from = rows_from + ri * raw_pitch + shift + (c - ca) * C;
#pragma unroll
        for (int u = 0; u < CP; ++u)
          if (u < C) px.e[u] = from[u];
      }
      *reinterpret_cast<uint4*>(xs + i * PITCH) = px.word;
    }
  };

  const int wn = warp % WN, wm = warp / WN;
  const int nb = wn * NW * 8;                        // the warp's first channel in the block
  const int channel0 = STEM ? 0 : (nb / CP) * CP;    // its group's first channel in a pixel
  // Lane l's ldmatrix row in m16 tile t: pixel (wm*MT + t)*16 + l % 16 of the tile (a pixel
  // past the tile reads row 0: computed, never stored), 8-element half l / 16 of a step.
  int a_row[MT];
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    const int idx = (wm * MT + t) * 16 + lane % 16, pr = idx / TQ, pc = idx - pr * TQ;
    a_row[t] = idx < TP * TQ ? (pr * sh * row_pitch + pc) * PITCH + channel0 : 0;
  }
  const unsigned zero_row = narrow_smem_u32(zeros);
  // B by ldmatrix.x2: rows (channels) nb + j*8 + l % 8, half (l / 8) % 2 of the step.
  const unsigned b_row = narrow_smem_u32(ws + (nb + lane % 8) * WP + ((lane / 8) % 2) * 8);
  float bias_pair[NW][2];
#pragma unroll
  for (int j = 0; j < NW; ++j) {
    const int k = k0 + nb + j * 8 + (lane % 4) * 2;
    bias_pair[j][0] = bias ? to_acc(bias[k], float()) : 0.f;
    bias_pair[j][1] = bias ? to_acc(bias[k + 1], float()) : 0.f;
  }
  const bool aligned = reinterpret_cast<unsigned long long>(y) % 4 == 0 && K % 2 == 0;

  // The block's tiles, blockIdx.x + i*gridDim.x: with VX the next tile's window is copied
  // (cp.async, into the other buffer) while this one's is computed.
  if (VX && blockIdx.x < tiles) {
    if constexpr (STEM) fill_raw(blockIdx.x, raw);
    else fill(blockIdx.x, xs);
    asm volatile("cp.async.commit_group;\n" ::);
  }
  int step_in = 0;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, step_in ^= 1) {
    T* current = xs + (VX && !STEM ? step_in * buffer : 0);
    if constexpr (VX && STEM) {          // the next tile's raw rows while this one's converts
      const bool next = tile + gridDim.x < tiles;
      if (next) fill_raw(tile + gridDim.x, raw + (step_in ^ 1) * rows * raw_pitch);
      narrow_wait_this(next);
      __syncthreads();
      convert(tile, raw + step_in * rows * raw_pitch);
    } else if constexpr (VX) {
      if (tile + gridDim.x < tiles) fill(tile + gridDim.x, xs + (step_in ^ 1) * buffer);
      narrow_wait_this(tile + gridDim.x < tiles);
    } else {
      fill(tile, current);
    }
    __syncthreads();

    float acc[MT][NW][4];
#pragma unroll
    for (int t = 0; t < MT; ++t)
#pragma unroll
      for (int j = 0; j < NW; ++j) {
        acc[t][j][0] = acc[t][j][2] = bias_pair[j][0];
        acc[t][j][1] = acc[t][j][3] = bias_pair[j][1];
      }
    const unsigned a_base = narrow_smem_u32(current);
    for (int step = 0; step < steps; ++step) {
      const int offset = offsets[2 * step + lane / 16];
      unsigned b[NW][2];
#pragma unroll
      for (int j = 0; j < NW; ++j)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                     : "=r"(b[j][0]), "=r"(b[j][1])
                     : "r"(b_row + 2 * (j * 8 * WP + step * 16)));
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        unsigned a[4];
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                     : "r"(offset < 0 ? zero_row : a_base + 2 * (a_row[t] + offset)));
#pragma unroll
        for (int j = 0; j < NW; ++j) mma_m16n8k16<T>(acc[t][j], a, b[j]);
      }
    }

    // acc[t][j]: rows (pixels) l / 4 and l / 4 + 8, channels (l % 4) * 2 + {0, 1} of n8 tile j.
    const int tq = tile % tiles_q, rest = tile / tiles_q, tp = rest % tiles_p;
    const i64 n = rest / tiles_p;
    const int p0 = tp * TP, q0 = tq * TQ;
#pragma unroll
    for (int t = 0; t < MT; ++t) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int idx = (wm * MT + t) * 16 + lane / 4 + half * 8, pr = idx / TQ;
        const int pc = idx - pr * TQ;
        if (idx >= TP * TQ || p0 + pr >= P || q0 + pc >= Q) continue;
        T* out = y + ((n * P + p0 + pr) * Q + q0 + pc) * K + k0 + nb + (lane % 4) * 2;
#pragma unroll
        for (int j = 0; j < NW; ++j) {
          const T v0 = from_acc<T>(acc[t][j][2 * half]);
          const T v1 = from_acc<T>(acc[t][j][2 * half + 1]);
          if (aligned) {
            *reinterpret_cast<unsigned*>(out + j * 8) = v0.bits | (unsigned)v1.bits << 16;
          } else {
            out[j * 8] = v0;
            out[j * 8 + 1] = v1;
          }
        }
      }
    }
    __syncthreads();                     // the buffer just read is filled again next
  }
}

// Dense stems: narrow_dense<T, KB, MT> takes the stems narrow_nhwc pads to 8 channels (C < 8)
// where the taps of a filter row are adjacent columns (dw == 1) and x's raw rows come by
// cp.async (x's pixels C contiguous channels, x 4-byte aligned). At a tap of filter row r, an
// output pixel's window then reads S*C consecutive elements of one x row, and the reduction
// packs them densely in window order: e = r*ER + j, j < S*C (tap j / C, channel j % C), ER =
// S*C rounded up to even, so a 7x7 stem of 3 channels reduces over 7*22 = 154 -> 160 instead
// of 49*8 = 392 -> 400.
//   - The tile's input rows (columns w0 .. w0 + cols - 1, zeros outside x) are stored twice,
//     as x holds them (win0: element v of a stored row is column w0 + v / C, channel v % C) and
//     one element later (win1[v + 1] = win0[v]), so that every pair of elements starts a 4-byte
//     word in one of them: A fragments are loaded word by word straight from these rows (the
//     pair (e, e + 1) of pixel p at element a = base(p) + offset(e), from win0 at a when a is
//     even, from win1 at a + 1 when odd), no window tile is built.
//   - A table (parity of base(p), step, l % 4) holds each lane's two pairs of the step as
//     byte offsets from win0's element base(p) (r*dh*row + j elements, to win1 where the pair
//     starts at an odd element) and their masks: the half past a filter row's S*C values (S*C
//     odd) and whole steps past R*ER read as zero, whatever the stored row holds there. Where
//     sw*C is even every base is even and one table row serves a step.
//   - The filters sit in shared memory as [KB][E] in the same order, B fragments by ldmatrix;
//     8 warps split the tile's pixels, each multiplying by all KB channels (NW = KB / 8 n8
//     tiles).
//   - The next tile's raw rows are copied while one is computed (narrow_fill_raw<16>: 16-byte
//     cp.async between the row's 16-byte boundaries), then turned into win0 and win1 16 bytes
//     a thread; each warp's outputs pass through shared memory of its own to 16-byte stores.
template <bool B> struct narrow_flag { static constexpr bool value = B; };

template <typename T, int KB, int MT>
__global__ void __launch_bounds__(256, 2)
    narrow_dense(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                 T* __restrict__ y, int N, int C, int H, int W, int K, int G, int R, int S, int P,
                 int Q, int sh, int sw, int dh, int dw, int pt, int pl, int TP, int TQ,
                 i64 xn, i64 xc, i64 xh, i64 xw) {
  constexpr int THREADS = 256, NW = KB / 8, PIXELS = 8 * MT * 16;
  static_assert(KB % 8 == 0 && NW >= 1, "tile");
  const int SC = S * C, ER = (SC + 1) / 2 * 2;
  const int E = (R * ER + 15) / 16 * 16, WP = narrow_pitch(E), steps = E / 16;
  const int k0 = blockIdx.y * KB;
  const int tiles_q = (Q + TQ - 1) / TQ, tiles_p = (P + TP - 1) / TP;
  const int tiles = N * tiles_p * tiles_q;
  const int rows = (TP - 1) * sh + (R - 1) * dh + 1, cols = (TQ - 1) * sw + S;
  const int L = cols * C;                            // a stored row's elements
  const int WR = (L + 2 + 7) / 8 * 8;                // its pitch: L + 2 rounded up to 8
  const int WIN = rows * WR;                         // win0's elements (win1 follows)
  const int raw_pitch = (L + 16 + 7) / 8 * 8;        // a raw row: L and up to 7 before it

  extern __shared__ __align__(16) unsigned char narrow_smem[];
  T* ws = reinterpret_cast<T*>(narrow_smem);                         // [KB][WP]
  int4* table = reinterpret_cast<int4*>(ws + KB * WP);               // [2][steps][4]
  float* bias_s = reinterpret_cast<float*>(table + 8 * steps);       // [KB]
  int* pixel = reinterpret_cast<int*>(bias_s + KB);                  // [PIXELS]: pr << 16 | pc
  T* win = reinterpret_cast<T*>(pixel + PIXELS);                     // win0, win1: [rows][WR]
  T* raw = win + 2 * WIN;                                            // two [rows][raw_pitch]
  constexpr int SP = KB + 8;                         // a staged pixel's pitch (output)
  T* stage = raw + 2 * rows * raw_pitch;                             // [8][MT*16][SP]
  const int win_at = (int)(reinterpret_cast<unsigned char*>(win) - narrow_smem);

  const T zero = from_acc<T>(0.f);
  for (int i = threadIdx.x; i < KB * E; i += THREADS) {
    const int kk = i / E, e = i - kk * E, r = e / ER, j = e - r * ER;
    ws[kk * WP + e] = r < R && j < SC ? w[((i64)(k0 + kk) * R + r) * SC + j] : zero;
  }
  // table[p][step][l % 4]: lane l's two element pairs of the step (e = step*16 + (l % 4)*2,
  // and + 8) as byte offsets from win0's element base(pixel) for pixels of base parity p (to
  // win1's element + 1 where the pair starts at an odd element), and their masks.
  for (int i = threadIdx.x; i < 8 * steps; i += THREADS) {
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
  for (int i = threadIdx.x; i < KB; i += THREADS)
    bias_s[i] = bias ? to_acc(bias[k0 + i], float()) : 0.f;
  for (int i = threadIdx.x; i < PIXELS; i += THREADS)
    pixel[i] = i / TQ << 16 | i % TQ;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  auto origin = [&](int tile) {       // (image, first output row, first output column)
    const int tq = tile % tiles_q, rest = tile / tiles_q;
    return make_int3(rest / tiles_p, rest % tiles_p * TP, tq * TQ);
  };
  auto fill_raw = [&](int tile, T* rows_to) {
    const int3 o = origin(tile);
    narrow_fill_raw<16>(x + (i64)o.x * xn, o.y * sh - pt, o.z * sw - pl, rows, cols, H, W, C, xh,
                    raw_pitch, rows_to, warp, lane);
  };
  // The raw rows into win0 and win1, 16 bytes of each a thread (zeros outside x and past L):
  // inside x, one of the two is four words of the raw row and the other the halves of five.
  auto store_rows = [&](int tile, const T* rows_from) {
    const int3 o = origin(tile);
    const T* xb = x + (i64)o.x * xn;
    const int h0 = o.y * sh - pt, w0 = o.z * sw - pl;
    const int ca = max(w0, 0), cb = min(w0 + cols, W);
    const int lo = (ca - w0) * C, hi = (cb - w0) * C;     // the stored elements x holds
    // a row's element lo lies at raw index (its address % 16) / 2 (narrow_fill_raw<16>)
    const unsigned first = (unsigned)(reinterpret_cast<unsigned long long>(xb) / 2) +
                           (unsigned)(ca * C);
    const int chunks = WR / 8;
    int ri = threadIdx.x / chunks, m = threadIdx.x - ri * chunks;
    for (; ri < rows;) {
      const int h = h0 + ri, v = 8 * m;
      const bool row_in = h >= 0 && h < H && ca < cb;
      // element v's raw index: v + shift
      const int shift = (int)((first + (unsigned)h * (unsigned)xh) & 7) - lo;
      const T* from = rows_from + ri * raw_pitch;
      uint4 c0, c1;                                      // win0's, win1's
      if (row_in && v - 1 >= lo && v + 7 < hi) {
        const int a = v - 1 + shift;                     // element v - 1's raw index
        const unsigned* words = reinterpret_cast<const unsigned*>(from) + (a >> 1);
        const unsigned u0 = words[0], u1 = words[1], u2 = words[2], u3 = words[3],
                       u4 = words[4];
        const uint4 whole = (a & 1) ? make_uint4(u1, u2, u3, u4) : make_uint4(u0, u1, u2, u3);
        const uint4 halves = make_uint4(__byte_perm(u0, u1, 0x5432), __byte_perm(u1, u2, 0x5432),
                                        __byte_perm(u2, u3, 0x5432), __byte_perm(u3, u4, 0x5432));
        c0 = (a & 1) ? whole : halves;                   // elements v .. v + 7
        c1 = (a & 1) ? halves : whole;                   // elements v - 1 .. v + 6
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
      reinterpret_cast<uint4*>(win + ri * WR)[m] = c0;
      reinterpret_cast<uint4*>(win + WIN + ri * WR)[m] = c1;
      for (m += THREADS; m >= chunks; m -= chunks) ++ri;
    }
  };

  // Lane l's rows in m16 tile t: pixels (warp*MT + t)*16 + l / 4 (+ 8); at[t][h]: the byte
  // offset of their windows' first element in win0 (a pixel past the tile reads pixel 0's),
  // plus 1 where that element is odd.
  const int g = lane / 4, c4 = lane % 4;
  int at[MT][2];
#pragma unroll
  for (int t = 0; t < MT; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int idx = (warp * MT + t) * 16 + g + 8 * h, pr = idx / TQ, pc = idx - pr * TQ;
      const int base = idx < TP * TQ ? pr * sh * WR + pc * sw * C : 0;
      at[t][h] = win_at + 2 * base + (base & 1);
    }
  // B by ldmatrix: rows (channels) j*8 + l % 8, half (l / 8) % 2 of the step; .x4 two n8 tiles.
  const unsigned b_row = narrow_smem_u32(ws + ((lane / 16) * 8 + lane % 8) * WP +
                                         ((lane / 8) % 2) * 8);
  const bool vector_y = reinterpret_cast<unsigned long long>(y) % 16 == 0;   // K % KB == 0

  // The reduction of one tile; EVEN: every base even (sw*C even), one table row a step.
  float acc[MT][NW][4];
  auto multiply = [&](auto even) {
    for (int step = 0; step < steps; ++step) {
      unsigned b[NW][2];
#pragma unroll
      for (int j = 0; j + 1 < NW; j += 2)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(b[j][0]), "=r"(b[j][1]), "=r"(b[j + 1][0]), "=r"(b[j + 1][1])
                     : "r"(b_row + 2 * (j * 8 * WP + step * 16)));
      if constexpr (NW % 2)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                     : "=r"(b[NW - 1][0]), "=r"(b[NW - 1][1])
                     : "r"(b_row + 2 * ((NW - 1) * 8 * WP + step * 16)));
      const int4 u0 = table[step * 4 + c4];
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        unsigned a[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {    // a[q]: row g + 8*(q % 2), elements of half q / 2
          int4 u = u0;
          int from = at[t][q % 2];
          if constexpr (!decltype(even)::value) {
            if (from & 1) u = table[(steps + step) * 4 + c4];
            from &= ~1;
          }
          a[q] = *reinterpret_cast<const unsigned*>(narrow_smem + from + (q / 2 ? u.y : u.x)) &
                 (unsigned)(q / 2 ? u.w : u.z);
        }
#pragma unroll
        for (int j = 0; j < NW; ++j) mma_m16n8k16<T>(acc[t][j], a, b[j]);
      }
    }
  };

  if (blockIdx.x < tiles) {
    fill_raw(blockIdx.x, raw);
    asm volatile("cp.async.commit_group;\n" ::);
  }
  int step_in = 0;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, step_in ^= 1) {
    // the next tile's raw rows while this one's is computed
    const bool next = tile + gridDim.x < tiles;
    if (next) fill_raw(tile + gridDim.x, raw + (step_in ^ 1) * rows * raw_pitch);
    narrow_wait_this(next);
    __syncthreads();
    store_rows(tile, raw + step_in * rows * raw_pitch);
    __syncthreads();

#pragma unroll
    for (int j = 0; j < NW; ++j) {
      const float b0 = bias_s[j * 8 + c4 * 2], b1 = bias_s[j * 8 + c4 * 2 + 1];
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        acc[t][j][0] = acc[t][j][2] = b0;
        acc[t][j][1] = acc[t][j][3] = b1;
      }
    }
    if (sw * C % 2 == 0) multiply(narrow_flag<true>());
    else multiply(narrow_flag<false>());

    // acc[t][j]: rows (pixels) l / 4 and l / 4 + 8, channels (l % 4) * 2 + {0, 1} of n8 tile
    // j, through the warp's own rows of shared memory to y in 16-byte vectors (y 16-byte
    // aligned; element by element otherwise): a pixel's KB channels are one run of y.
    T* st = stage + warp * MT * 16 * SP;
#pragma unroll
    for (int t = 0; t < MT; ++t)
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int j = 0; j < NW; ++j)
          *reinterpret_cast<unsigned*>(st + (t * 16 + g + half * 8) * SP + j * 8 + c4 * 2) =
              pack2<T>(acc[t][j][2 * half], acc[t][j][2 * half + 1]);
    __syncwarp();
    const int3 o = origin(tile);
    T* y_tile = y + (((i64)o.x * P + o.y) * Q + o.z) * K + k0;
#pragma unroll
    for (int i = lane; i < MT * 16 * NW; i += 32) {      // NW 16-byte vectors a pixel
      const int r = i / NW, v = i % NW, idx = warp * MT * 16 + r;
      const int pr = pixel[idx] >> 16, pc = pixel[idx] & 0xffff;
      if (idx >= TP * TQ || o.y + pr >= P || o.z + pc >= Q) continue;
      T* out = y_tile + ((i64)pr * Q + pc) * K + v * 8;
      const T* from = st + r * SP + v * 8;
      if (vector_y) {
        *reinterpret_cast<uint4*>(out) = *reinterpret_cast<const uint4*>(from);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) out[e] = from[e];
      }
    }
    __syncthreads();                     // the rows just read are stored again next
  }
}
