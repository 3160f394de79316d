// layout.cu: the copies around the kernels. Batched matrix transposes, the layout copies
// around a kernel that runs a problem in the other layout (plan "im2win_nhwc": an NCHW
// convolution on its NHWC twin); below them x's window columns (backward filter of few
// channels), a 5-D gather (backward data's phase filter) and strided rows (a strided out).
//
//   dst[b, c, r] = src[b*sb + r*sr + c*sc]     for b < batch, r < rows, c < cols
//
// dst is contiguous (batch, cols, rows); src is read through element strides. NCHW x to NHWC:
// batch N, rows C, cols H*W (sr = xc, sc = xw, with xh = W*xw); NHWC y back to NCHW: batch N,
// rows P*Q, cols K. A block of 32 x 8 threads moves a TR x TC tile (64 x 64, or 32 x 128 where
// those leave fewer elements idle, plan.transpose_launch: NCHW x of 32 channels, whose 64-row
// tiles left half the block idle) through shared memory, reading along src's columns and writing
// along dst's rows (both sides coalesced where their stride is 1: a warp covers 32 consecutive
// elements of one row a load or store), each thread 16 elements per image on each side, so that
// enough bytes are in flight: the 32 x 32 tiles of 2-byte elements moved about 1 TB/s on the
// H200 (cv10 float16 NCHW, 2026-12-01). Tile rows are TC + 1 elements apart: the warp that reads
// one tile column reads rows h*32 + tx, which puts 4-byte elements in distinct banks and 2-byte
// ones two to a bank (a 2-way conflict on the reads; reading rows 2*tx + h would avoid it, not
// yet measured). Tiles are flattened into blockIdx.x (up to 2^31 - 1), images loop over
// gridDim.y; 64-bit offsets throughout.

constexpr int TRANSPOSE_TILE = 64;

template <typename T, int TR>
__global__ void __launch_bounds__(256)
    transpose_batched(const T* __restrict__ src, T* __restrict__ dst, i64 batch, i64 rows,
                      i64 cols, i64 sb, i64 sr, i64 sc) {
  constexpr int TC = TRANSPOSE_TILE * TRANSPOSE_TILE / TR;   // the tile's columns
  static_assert(TR % 32 == 0 && TC % 32 == 0, "whole warps along both sides of the tile");
  __shared__ T tile[TR][TC + 1];
  const i64 col_tiles = (cols + TC - 1) / TC;
  const i64 r0 = (blockIdx.x / col_tiles) * TR, c0 = (blockIdx.x % col_tiles) * TC;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (i64 b = blockIdx.y; b < batch; b += gridDim.y) {
    const T* s = src + b * sb;
    T* d = dst + b * rows * cols;
    T v[TR / 8][TC / 32];                           // all 16 loads in flight, then stored
#pragma unroll
    for (int i = 0; i < TR / 8; ++i)                // tile row ty + 8i: src row r0 + ty + 8i
#pragma unroll
      for (int h = 0; h < TC / 32; ++h) {
        const i64 r = r0 + ty + 8 * i, c = c0 + h * 32 + tx;
        if (r < rows && c < cols) v[i][h] = s[r * sr + c * sc];
      }
#pragma unroll
    for (int i = 0; i < TR / 8; ++i)
#pragma unroll
      for (int h = 0; h < TC / 32; ++h) tile[ty + 8 * i][h * 32 + tx] = v[i][h];
    __syncthreads();
#pragma unroll
    for (int i = ty; i < TC; i += 8)                // dst row c0 + i: src column c0 + i
#pragma unroll
      for (int h = 0; h < TR / 32; ++h) {
        const i64 c = c0 + i, r = r0 + h * 32 + tx;
        if (r < rows && c < cols) d[c * rows + r] = tile[h * 32 + tx][i];
      }
    __syncthreads();                                // the tile is reused by the next image
  }
}

// The same transpose for narrow matrices (cols < TRANSPOSE_TILE / 2: a filter's R*S taps,
// which the tiles above would fill a sixteenth of: ConvNeXt's 2 x 2 downsampling filter, 768
// x 384 x 4 floats, took 32 us on the H200 that way), one element a thread in dst's order:
// writes coalesced, reads sr elements apart, their lines shared by the neighbouring columns
// through the caches. Grid-stride over batch*rows*cols.
template <typename T>
__global__ void __launch_bounds__(256)
    transpose_narrow(const T* __restrict__ src, T* __restrict__ dst, i64 batch, i64 rows,
                     i64 cols, i64 sb, i64 sr, i64 sc) {
  const i64 total = batch * rows * cols;
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < total;
       i += (i64)gridDim.x * blockDim.x) {
    const i64 r = i % rows, bc = i / rows, c = bc % cols, b = bc / cols;
    dst[i] = src[b * sb + r * sr + c * sc];
  }
}

// The same transpose for narrow items of contiguous rows (cols < TRANSPOSE_TILE / 2, sr =
// cols, sc = 1: a filter's R*S taps of C/G channels, the twin's w copy; an image of fewer than
// 32 pixels): transpose_narrow reads such an item cols elements apart across a warp (the H200
// moved resnet50.16's 256 x 256 x 3 x 3 filter in 6.7 us, 0.7 TB/s, and cv12's 512 x 512 x 3
// x 3 copy is four times that). Here a block takes a pass at a time: as many consecutive rows
// of one item as TRANSPOSE_TAPS_BYTES hold at an odd pitch (plan.py: TRANSPOSE_TAPS_BYTES,
// transpose_launch), read along src (one contiguous run), stored into shared memory, then written
// along dst, the pass's part of each dst row a run of consecutive elements (consecutive
// threads read shared memory a pitch apart: distinct banks for 4-byte elements); each thread
// issues AHEAD = 8 loads before their stores (nvcc 13.0's sm_90 code keeps 4 in flight at a
// time). Quotients and remainders advance by addition; 64-bit offsets.
constexpr int TRANSPOSE_TAPS_BYTES = 16384;

template <typename T>
__global__ void __launch_bounds__(256)
    transpose_taps(const T* __restrict__ src, T* __restrict__ dst, i64 batch, i64 rows,
                   i64 cols, i64 sb) {
  constexpr int CELLS = TRANSPOSE_TAPS_BYTES / sizeof(T), AHEAD = 8;
  __shared__ T tile[CELLS];
  const int S = (int)cols, pitch = S | 1, chunk = CELLS / pitch;   // cols < 32: chunk >= 1
  const int t = threadIdx.x, nt = blockDim.x;
  const i64 passes = (rows + chunk - 1) / chunk;
  for (i64 u = blockIdx.x; u < batch * passes; u += gridDim.x) {
    const i64 b = u / passes, r0 = (u - b * passes) * chunk;    // item b, rows r0 ..
    const int m = (int)min((i64)chunk, rows - r0), n = m * S;   // the pass's rows, elements
    const T* run = src + b * sb + r0 * S;
    T* d = dst + b * rows * cols + r0;
    int r = t / S, c = t - r * S;                  // element i = r*S + c of the run
    const int dr = nt / S, dc = nt - dr * S;
    auto put = [&](T v) {                          // element r*S + c, then the next one's
      tile[r * pitch + c] = v;
      r += dr;
      c += dc;
      if (c >= S) {
        c -= S;
        ++r;
      }
    };
    int i = t;
    for (; i + (AHEAD - 1) * nt < n; i += AHEAD * nt) {
      T v[AHEAD];                                  // AHEAD loads in flight, then stored
#pragma unroll
      for (int k = 0; k < AHEAD; ++k) v[k] = run[i + k * nt];
#pragma unroll
      for (int k = 0; k < AHEAD; ++k) put(v[k]);
    }
    for (; i < n; i += nt) put(run[i]);
    __syncthreads();
    int q = t / m, e = t - q * m;                  // element j = q*m + e: dst row q, row r0 + e
    const int dq = nt / m, de = nt - dq * m;
    for (int j = t; j < n; j += nt) {
      d[q * rows + e] = tile[e * pitch + q];
      q += dq;
      e += de;
      if (e >= m) {
        e -= m;
        ++q;
      }
    }
    __syncthreads();                               // the tile is reused by the next pass
  }
}

// The same transpose in 16-byte words, for 2-byte elements whose src rows and dst rows are
// whole words: sc = 1, and sr, sb, rows and cols multiples of 8, both pointers 16-byte aligned
// (plan.transpose_launch checks; the kernel above does the rest). A block of 256
// threads moves a 64 x 64 tile: each thread loads two words of src rows (8 neighbouring
// columns; 8 threads read a row's 128 bytes), stores them into shared memory with word j of
// tile row r at j ^ (r / 8) % 8, then gathers 8 neighbouring rows of one column (the 8 threads
// of a dst row read 8 distinct words of 8 distinct banks) into one word of dst (8 threads
// write a dst row's 128 bytes). The scalar kernel moved 0.6 TB/s (cv12's x) to 2.2 TB/s
// (cv8's) in float16 NCHW on the H200, 2-byte accesses on both sides.
template <typename T>
__global__ void __launch_bounds__(256)
    transpose_words(const T* __restrict__ src, T* __restrict__ dst, i64 batch, i64 rows,
                    i64 cols, i64 sb, i64 sr) {
  static_assert(sizeof(T) == 2, "8 elements a 16-byte word");
  constexpr int TILE = TRANSPOSE_TILE, WORDS = TILE / 8;
  __shared__ uint4 tile[TILE][WORDS];
  const i64 col_tiles = (cols + TILE - 1) / TILE;
  const i64 r0 = (blockIdx.x / col_tiles) * TILE, c0 = (blockIdx.x % col_tiles) * TILE;
  const int t = threadIdx.x, j = t % WORDS;
  const T* cells = reinterpret_cast<const T*>(&tile[0][0]);
  for (i64 b = blockIdx.y; b < batch; b += gridDim.y) {
    const T* s = src + b * sb;
    T* d = dst + b * rows * cols;
    uint4 v[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {                  // tile rows t/8 and t/8 + 32, word j
      const i64 r = r0 + t / WORDS + 32 * i, c = c0 + 8 * j;
      v[i] = r < rows && c < cols ? *reinterpret_cast<const uint4*>(s + r * sr + c)
                                  : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = t / WORDS + 32 * i;
      tile[r][j ^ (r / 8) % 8] = v[i];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 2; ++i) {                  // dst row c0 + c: tile rows 8j .. 8j + 7
      const int c = t / WORDS + 32 * i;
      alignas(16) T out[8];
#pragma unroll
      for (int e = 0; e < 8; ++e)                  // tile row 8j + e keeps its words at ^ j
        out[e] = cells[(8 * j + e) * TILE + 8 * ((c / 8) ^ j) + c % 8];
      const i64 dc = c0 + c, dr = r0 + 8 * j;
      if (dc < cols && dr < rows)
        *reinterpret_cast<uint4*>(d + dc * rows + dr) = *reinterpret_cast<const uint4*>(out);
    }
    __syncthreads();                               // the tile is reused by the next image
  }
}

// Window columns: x2[n, h, q, s*C + c] = x[n, h, q*sw + s*dw - pl, c] for s*C + c < S*C, and 0
// where that column lies outside x or past S*C (x2's channels padded to C2): each output
// column's S window columns side by side as channels, as im2win lays a window's columns out.
// The backward-filter kernel's input for one group with few channels (im2win.cuda.wgrad
// .window_columns): an R x 1 problem over x2 with S*C channels in place of S taps of C. Rows
// (n, h) loop over the grid (a few blocks per SM), each row's W*C elements into shared memory
// (read along x's unit stride: channels for NHWC, columns for a view of NCHW), then x2's row
// of Q*C2 elements written in order, 16 bytes a store (8 elements of 2 bytes, 4 of float32):
// C2 is a multiple of 8, so a store's elements lie in one output column; with dw = 1 (every
// benchmark stem) a column's S*C values are one run of the row, one bounds test an element,
// where dilated columns track (column, channel). The next row is on its way while the current
// one is written (two row buffers), so that a block's reads and writes overlap: 4-byte
// elements by cp.async, an element a copy, straight into the buffer; 2-byte ones loaded into
// registers and stored after. Through registers, cv1's float32 columns took 240 us from NCHW
// x against 140 from NHWC; by cp.async 151 and 139 (H100, tools/columns_copy_dev.py: the
// NCHW element's index arithmetic before its load seems to have kept the loads from being
// issued early, not verified in SASS).
// 32-bit arithmetic inside a row, 64-bit row offsets. ROW: the most elements of a row a block
// holds (W*C <= ROW; wgrad checks), ROW / 256 of them a thread.
constexpr int WINDOW_ROW = 4096;

template <typename T>
__global__ void __launch_bounds__(256)
    window_columns(const T* __restrict__ x, T* __restrict__ x2, i64 rows, int H, int W, int Q,
                   int C2, int C, int S, int sw, int dw, int pl, i64 xn, i64 xh, i64 xw, i64 xc) {
  constexpr int VEC = 16 / (int)sizeof(T);          // elements a 16-byte store
  static_assert(VEC == 8 || VEC == 4, "2- or 4-byte elements");
  constexpr int PER = WINDOW_ROW / 256;            // a thread's elements of a row
  constexpr bool kAsync = sizeof(T) == 4;          // 4-byte elements: cp.async, one each
  __shared__ __align__(16) T row[2][WINDOW_ROW];
  const int WC = W * C, SC = S * C, words = Q * (C2 / VEC);
  const bool nchw = xc != 1, dense = xc == 1 && xw == C;
  // Element e of row nh (in (column, channel) order: e = column * C + channel for NHWC, or
  // channel * W + column as NCHW stores it) and where it goes in the row buffer: column * C +
  // channel.
  auto element = [&](const T* src, int e, int& to) -> const T* {
    to = e;
    if (dense) return src + e;
    if (!nchw) {
      const int v = e / C;
      return src + (i64)v * xw + (e - v * C);
    }
    const int c = e / W;                           // columns innermost (a view of NCHW)
    to = (e - c * W) * C + c;
    return src + (i64)c * xc + (i64)(e - c * W) * xw;
  };
  auto source = [&](i64 nh) { return x + (nh / H) * xn + (nh % H) * xh; };
  T held[kAsync ? 1 : PER];
  // kAsync: row nh straight into `buffer` (a 4-byte cp.async an element, a commit group a
  // row), so that its loads are in flight while the row before is written out; else into
  // registers (fetch), then into the buffer (put).
  auto copy = [&](i64 nh, T* buffer) {
    const T* src = source(nh);
    for (int e = threadIdx.x; e < WC; e += 256) {
      int to;
      const T* from = element(src, e, to);
      const unsigned dst = (unsigned)__cvta_generic_to_shared(buffer + to);
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(from));
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
  auto fetch = [&](i64 nh) {
    const T* src = source(nh);
#pragma unroll
    for (int k = 0; k < PER; ++k) {
      const int e = threadIdx.x + 256 * k;
      int to;
      if (e < WC) held[k] = *element(src, e, to);
    }
  };
  auto put = [&](i64 nh, T* buffer) {
    const T* src = source(nh);
#pragma unroll
    for (int k = 0; k < PER; ++k) {
      const int e = threadIdx.x + 256 * k;
      int to;
      if (e < WC) {
        element(src, e, to);
        buffer[to] = held[k];
      }
    }
  };
  // Row nh's x2 row from the row buffer `current`.
  auto write = [&](i64 nh, const T* current) {
    uint4* dst = reinterpret_cast<uint4*>(x2 + nh * Q * C2);
    for (int i = threadIdx.x; i < words; i += blockDim.x) {
      const int q = i / (C2 / VEC);
      int j = (i - q * (C2 / VEC)) * VEC;
      alignas(16) T v[VEC];
      if (dw == 1) {     // a column's S*C values are one run of the row, from (q*sw - pl)*C
        const int e = (q * sw - pl) * C + j;
#pragma unroll
        for (int k = 0; k < VEC; ++k)
          v[k] = j + k < SC && (unsigned)(e + k) < (unsigned)WC ? current[e + k] : T{};
      } else {
        int c = j % C, col = q * sw + j / C * dw - pl;
#pragma unroll
        for (int k = 0; k < VEC; ++k, ++j) {
          v[k] = j < SC && col >= 0 && col < W ? current[col * C + c] : T{};   // +0 for any T
          if (++c == C) {
            c = 0;
            col += dw;
          }
        }
      }
      dst[i] = *reinterpret_cast<const uint4*>(v);
    }
  };
  i64 nh = blockIdx.x;
  if constexpr (kAsync) {
    if (nh < rows) copy(nh, row[0]);
    for (int b = 0; nh < rows; nh += gridDim.x, b ^= 1) {
      asm volatile("cp.async.wait_group 0;\n" ::);
      __syncthreads();             // row nh landed; row[b ^ 1] was last read before this barrier
      if (nh + gridDim.x < rows) copy(nh + gridDim.x, row[b ^ 1]);
      write(nh, row[b]);
    }
  } else {
    if (nh < rows) {
      fetch(nh);
      put(nh, row[0]);
    }
    __syncthreads();
    for (int b = 0; nh < rows; nh += gridDim.x, b ^= 1) {
      const i64 next = nh + gridDim.x;
      if (next < rows) fetch(next);                // in flight while this row is written
      write(nh, row[b]);
      if (next < rows) put(next, row[b ^ 1]);      // row[b ^ 1] was last read before the
      __syncthreads();                             // previous barrier
    }
  }
}

// A 5-D gather: dst (contiguous, d0 x d1 x d2 x d3 x d4) = src read through element strides
// s0..s4 (any sign; src points at dst's first element). Backward data's filter for its phase
// (im2win.gradients), groups' K/G and C/G exchanged and the taps reversed, in one launch
// (api's direct path): a thread per element, the index split by 64-bit divisions.
template <typename T>
__global__ void __launch_bounds__(256)
    gather5(const T* __restrict__ src, T* __restrict__ dst, i64 total, int d1, int d2, int d3,
            int d4, i64 s0, i64 s1, i64 s2, i64 s3, i64 s4) {
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < total;
       i += (i64)gridDim.x * blockDim.x) {
    i64 rest = i;
    const int i4 = rest % d4;
    rest /= d4;
    const int i3 = rest % d3;
    rest /= d3;
    const int i2 = rest % d2;
    rest /= d2;
    const int i1 = rest % d1;
    dst[i] = src[rest / d1 * s0 + i1 * s1 + i2 * s2 + i3 * s3 + i4 * s4];
  }
}

// A strided 4-D out written from a contiguous result (launch.copy_into): dst's rows (n, i, j),
// each L 16-byte words at dst + n*s0 + i*s1 + j*s2 (in words), from src's rows in order. The
// phases of backward data at a stride write their views of dx so (im2win.gradients).
__global__ void __launch_bounds__(256)
    copy_rows(const uint4* __restrict__ src, uint4* __restrict__ dst, i64 words, int L, int d1,
              int d2, i64 s0, i64 s1, i64 s2) {
  for (i64 i = blockIdx.x * 256ll + threadIdx.x; i < words; i += (i64)gridDim.x * 256) {
    const i64 row = i / L, rest = row / d2;
    dst[rest / d1 * s0 + rest % d1 * s1 + row % d2 * s2 + (i - row * L)] = src[i];
  }
}
