// window.cu: image_to_window on the GPU, bit for bit the reference's tensor.
//
//   NCHW: x_win[n, c, p, m*R + r] = xp[n, c, p*sh + r*dh, m]      shape (N, C, P, Wp*R)
//   NHWC: x_win[n, p, m*R + r, c] = xp[n, p*sh + r*dh, m, c]      shape (N, P, Wp*R, C)
//
// xp is x zero-padded by (pt, pl) at the top/left (padding zeros are written, never read).
// x is read through element strides (any view). One thread per x_win element in memory order,
// grid-stride, 64-bit indices; consecutive threads write consecutive elements.

template <typename T, bool kNHWC>
__global__ void image_to_window(const T* __restrict__ x, T* __restrict__ x_win, i64 N, int C,
                                int H, int W, int P, int Wp, int R, int sh, int dh, int pt,
                                int pl, i64 xn, i64 xc, i64 xh, i64 xw) {
  const i64 total = N * C * P * (i64)Wp * R;
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < total;
       i += (i64)gridDim.x * blockDim.x) {
    i64 rest = i;
    int c, mr, p;
    if (kNHWC) {
      c = (int)(rest % C); rest /= C;
      mr = (int)(rest % ((i64)Wp * R)); rest /= (i64)Wp * R;
      p = (int)(rest % P); rest /= P;
    } else {
      mr = (int)(rest % ((i64)Wp * R)); rest /= (i64)Wp * R;
      p = (int)(rest % P); rest /= P;
      c = (int)(rest % C); rest /= C;
    }
    const i64 n = rest;
    const int h = p * sh + (mr % R) * dh - pt;
    const int col = mr / R - pl;
    T v{};  // +0.0 in every element type
    if (h >= 0 && h < H && col >= 0 && col < W) v = x[n * xn + c * xc + h * xh + col * xw];
    x_win[i] = v;
  }
}
