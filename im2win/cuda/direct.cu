// direct.cu: direct convolution, one thread per output element. The simple GPU baseline and a
// second oracle for the im2win kernels (it shares no layout or table code with them).
//
//   y[n,k,p,q] = bias[k] + sum_{c<C/G, r<R, s<S} x[n, g*C/G + c, p*sh + r*dh - pt,
//                                                  q*sw + s*dw - pl] * w[k,c,r,s]
//   (g = k / (K/G); taps outside x read as zero).
//
// x and w are read through element strides (any layout, any view); y is contiguous in the
// layout's order (kNHWC: (N, P, Q, K), else (N, K, P, Q)). Indices are 64-bit throughout.
// Thread i of the grid-stride loop handles output element i in y's memory order.

template <typename T, typename Acc, bool kNHWC>
__global__ void direct_conv(const T* __restrict__ x, const T* __restrict__ w,
                            const T* __restrict__ bias, T* __restrict__ y,
                            i64 N, int K, int Kg, int Cg, int H, int W, int R, int S, int P,
                            int Q, int sh, int sw, int dh, int dw, int pt, int pl,
                            i64 xn, i64 xc, i64 xh, i64 xw,      // x strides, elements
                            i64 wk, i64 wc, i64 wr, i64 ws) {    // w strides, elements
  const i64 total = N * K * P * Q;
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < total;
       i += (i64)gridDim.x * blockDim.x) {
    i64 rest = i;
    int k, p, q;
    if (kNHWC) {
      k = (int)(rest % K); rest /= K;
      q = (int)(rest % Q); rest /= Q;
      p = (int)(rest % P); rest /= P;
    } else {
      q = (int)(rest % Q); rest /= Q;
      p = (int)(rest % P); rest /= P;
      k = (int)(rest % K); rest /= K;
    }
    const i64 n = rest;
    const int g = k / Kg;
    Acc acc = bias ? to_acc(bias[k], Acc()) : Acc(0);
    for (int c = 0; c < Cg; ++c) {
      const T* xc_ptr = x + n * xn + (i64)(g * Cg + c) * xc;
      for (int r = 0; r < R; ++r) {
        const int h = p * sh + r * dh - pt;
        if (h < 0 || h >= H) continue;
        for (int s = 0; s < S; ++s) {
          const int col = q * sw + s * dw - pl;
          if (col < 0 || col >= W) continue;
          acc = madd(to_acc(xc_ptr[h * xh + col * xw], Acc()),
                     to_acc(w[k * wk + c * wc + r * wr + s * ws], Acc()), acc);
        }
      }
    }
    y[i] = from_acc<T>(acc);
  }
}
