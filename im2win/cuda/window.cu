// window.cu: image_to_window on the GPU, bit for bit the reference's tensor; below it
// window_to_image for backward data's window gradients (im2win.cuda.dgrad).
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

// Backward data through window gradients (im2win.cuda.dgrad), window_to_image's GPU form for
// one group, NHWC: g[n, p, q, (r, s, c)] (Acc: float, double for double) is each output pixel's
// gradient times the filter, its window's gradient in w's order (cuBLAS's product of dy and w);
//
//   dx[n, h, v, c] = sum over r, then s, of g[n, p, q, r, s, c]
//                    for h = p*sh + r*dh - pt, v = q*sw + s*dw - pl, p < P, q < Q,
//
// summed in that fixed order in Acc and rounded once. The taps that reach row h are every
// tr-th (tr = sh / gcd(sh, dh)) from the first; likewise columns (ts). One thread per dx
// element of the images g holds, grid-stride, 64-bit offsets.
template <typename T, typename Acc>
__global__ void __launch_bounds__(256)
    window_to_image(const Acc* __restrict__ g, T* __restrict__ dx, i64 total, int H, int W,
                    int C, int P, int Q, int R, int S, int sh, int sw, int dh, int dw, int pt,
                    int pl, int tr, int ts) {
  const int RSC = R * S * C;
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < total;
       i += (i64)gridDim.x * blockDim.x) {
    const int c = (int)(i % C);
    i64 rest = i / C;
    const int v = (int)(rest % W);
    rest /= W;
    const int h = (int)(rest % H);
    const i64 n = rest / H;
    int r0 = -1, s0 = -1;
    for (int r = 0; r < R && r < tr && r0 < 0; ++r)
      if (((h + pt - r * dh) % sh + sh) % sh == 0) r0 = r;
    for (int s = 0; s < S && s < ts && s0 < 0; ++s)
      if (((v + pl - s * dw) % sw + sw) % sw == 0) s0 = s;
    Acc sum = 0;
    if (r0 >= 0 && s0 >= 0) {
      for (int r = r0; r < R; r += tr) {
        const int a = h + pt - r * dh;           // decreases with r: past row 0, no more
        if (a < 0) break;
        const int p = a / sh;
        if (p >= P) continue;
        for (int s = s0; s < S; s += ts) {
          const int b = v + pl - s * dw;
          if (b < 0) break;
          const int q = b / sw;
          if (q >= Q) continue;
          sum = add(sum, g[((n * P + p) * Q + q) * RSC + (r * S + s) * C + c]);
        }
      }
    }
    dx[i] = from_acc<T>(sum);
  }
}
