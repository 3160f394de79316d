// layout.cu: batched matrix transposes, the layout copies around a kernel that runs a problem
// in the other layout (plan "im2win_nhwc": an NCHW convolution on its NHWC twin).
//
//   dst[b, c, r] = src[b*sb + r*sr + c*sc]     for b < batch, r < rows, c < cols
//
// dst is contiguous (batch, cols, rows); src is read through element strides. NCHW x to NHWC:
// batch N, rows C, cols H*W (sr = xc, sc = xw, with xh = W*xw); NHWC y back to NCHW: batch N,
// rows P*Q, cols K. A block moves a 32 x 32 tile through shared memory (a padded row, so the
// transposed reads do not conflict in whole), reading along src's columns and writing along
// dst's rows: both sides coalesced where their stride is 1. Tiles are flattened into
// blockIdx.x (up to 2^31 - 1), images loop over gridDim.y; 64-bit offsets throughout.

template <typename T>
__global__ void __launch_bounds__(256)
    transpose_batched(const T* __restrict__ src, T* __restrict__ dst, i64 batch, i64 rows,
                      i64 cols, i64 sb, i64 sr, i64 sc) {
  __shared__ T tile[32][33];
  const i64 col_tiles = (cols + 31) / 32;
  const i64 r0 = (blockIdx.x / col_tiles) * 32, c0 = (blockIdx.x % col_tiles) * 32;
  for (i64 b = blockIdx.y; b < batch; b += gridDim.y) {
    const T* s = src + b * sb;
    T* d = dst + b * rows * cols;
#pragma unroll
    for (int i = threadIdx.y; i < 32; i += 8) {     // tile row i: src row r0 + i
      const i64 r = r0 + i, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[i][threadIdx.x] = s[r * sr + c * sc];
    }
    __syncthreads();
#pragma unroll
    for (int i = threadIdx.y; i < 32; i += 8) {     // dst row c0 + i: src column c0 + i
      const i64 c = c0 + i, r = r0 + threadIdx.x;
      if (r < rows && c < cols) d[c * rows + r] = tile[threadIdx.x][i];
    }
    __syncthreads();                                // the tile is reused by the next image
  }
}
