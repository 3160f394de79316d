// wgrad_ffma.cu: the float32 w-gradient of NHWC problems on CUDA cores.
//
//   dw[g*Kg + k, t] = sum over pixels j of dy[j, g*Kg + k] * B[t, j],   t = (r*S + s)*Cg + c,
// B[t, j] = x[n, p*sh - pt + r*dh, q*sw - pl + s*dw, g*Cg + c] (zero outside x): the window
// operand of the forward convolution with the pixels as the reduction. A block computes BM
// filters x BN columns t of one group over one range of pixels (a split): each BK-pixel slice
// loads dy's rows (BM consecutive filters of a pixel: float4) and the window rows (BN
// consecutive columns of a pixel, four columns of one tap a float4 where Cg % 4 == 0, kVecX;
// else one float a column) straight into shared memory tiles Ds[pixel][filter] and
// Xs[pixel][column], no transposition, then an 8 x 8 micro-tile a thread (outer_8x8, as
// im2win_ffma.cu's).
// A thread's columns are fixed, so their taps and offsets are computed once; its pixels
// advance by BK a slice, (n, p, q) by additions. Each block writes its FP32 sums to
// partial[split] (dw itself when there is one split); wgrad_sum adds the splits in order:
// the same bits every run, no atomics.

struct WgradFfmaArgs {          // im2win/cuda/wgrad_ffma.py, ARGS: 64-bit fields first
  i64 npix, chunk;              // pixels, and pixels a split (a multiple of BK)
  i64 sn, sp, sq, sg, base0;    // base(n, g, p, q) = n*sn + g*sg + p*sp + q*sq + base0
  i64 sr, ss;                   // a tap's offset: r*sr + s*ss + c
  int K, Kg, red, Q, P, sh, sw, pt, pl, H, W, Cg, S, dh, dw, G;
};

template <int BM, int BN, int BK, bool kVecX>
__global__ void __launch_bounds__(BM * BN / 64, BM * BN / 64 >= 256 ? 2 : 3)
    wgrad_ffma(const float* __restrict__ x, const float* __restrict__ dy,
               float* __restrict__ out, WgradFfmaArgs a) {
  constexpr int NT = BM * BN / 64;
  constexpr int XQ = BN / 4, DQ = BM / 4;          // float4 a pixel row of each tile
  constexpr int XROWS = NT / XQ, DROWS = NT / DQ;  // pixel rows a pass of the block loads
  constexpr int XL = BK / XROWS, DL = BK / DROWS;  // loads a thread and slice
  static_assert(NT % XQ == 0 && NT % DQ == 0 && BK % XROWS == 0 && BK % DROWS == 0,
                "tile must divide into float4 loads");
  static_assert(BM % 64 == 0 && BN % 64 == 0, "two 4-wide halves per thread");
  __shared__ __align__(16) float Ds[2][BK][BM];
  __shared__ __align__(16) float Xs[2][BK][BN];

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int tx = (warp % (BN / 64)) * 8 + lane % 8, ty = (warp / (BN / 64)) * 4 + lane / 8;
  const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
  const int g = blockIdx.z % a.G, split = blockIdx.z / a.G;
  const i64 begin = split * a.chunk;
  const i64 end = min(begin + a.chunk, a.npix);

  // This thread's window columns: four of them from n0 + 4*xq, each its tap's offset and
  // (r*dh, s*dw); one tap for all four where kVecX.
  const int xq = tid % XQ, xrow = tid / XQ;
  constexpr int NCOL = kVecX ? 1 : 4;
  i64 coff[NCOL];
  int cdr[NCOL], cds[NCOL];
#pragma unroll
  for (int e = 0; e < NCOL; ++e) {
    const int t = n0 + 4 * xq + e;
    const int tap = min(t, a.red - 1) / a.Cg, c = min(t, a.red - 1) - tap * a.Cg;
    const int r = tap / a.S, s = tap - r * a.S;
    coff[e] = r * a.sr + s * a.ss + c + g * a.sg;
    cdr[e] = t < a.red ? r * a.dh : -(1 << 30);      // a column past the reduction: zeros
    cds[e] = s * a.dw;
  }
  // This thread's pixel rows of x: begin + xrow + i*XROWS, their (p, q), base(pixel) and
  // (h0, w0), advanced by BK pixels a slice with additions only.
  int xp[XL], xqq[XL], xh0[XL], xw0[XL];
  i64 xbase[XL];
#pragma unroll
  for (int i = 0; i < XL; ++i) {
    const i64 j = begin + xrow + i * XROWS;
    const i64 PQ = (i64)a.P * a.Q;
    const i64 n = j / PQ;
    const int pq = (int)(j - n * PQ);
    xp[i] = pq / a.Q;
    xqq[i] = pq - xp[i] * a.Q;
    xbase[i] = n * a.sn + xp[i] * a.sp + xqq[i] * a.sq + a.base0;
    xh0[i] = xp[i] * a.sh - a.pt;
    xw0[i] = xqq[i] * a.sw - a.pl;
  }
  const int dq = tid % DQ, drow = tid / DQ;
  const bool dok = m0 + 4 * dq < a.Kg;
  const float* dyp = dy + (begin + drow) * a.K + g * a.Kg + m0 + 4 * dq;

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

  float4 xv[XL], dv[DL];
  i64 j0 = begin;                         // first pixel of the slice being loaded
  auto load = [&]() {
#pragma unroll
    for (int i = 0; i < XL; ++i) {
      const bool live = j0 + xrow + i * XROWS < end;
      const i64 base = xbase[i];
      const int h0 = xh0[i], w0 = xw0[i];
      float v[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int k = kVecX ? 0 : e;
        const bool in = live && (unsigned)(h0 + cdr[k]) < (unsigned)a.H &&
                        (unsigned)(w0 + cds[k]) < (unsigned)a.W;
        if (kVecX) {
          if (e == 0) {
            const float4 f = in ? __ldg(reinterpret_cast<const float4*>(x + base + coff[0]))
                                : make_float4(0.f, 0.f, 0.f, 0.f);
            v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
          }
        } else {
          v[e] = in ? __ldg(x + base + coff[k]) : 0.f;
        }
      }
      xv[i] = make_float4(v[0], v[1], v[2], v[3]);
    }
#pragma unroll
    for (int i = 0; i < DL; ++i) {
      const bool live = dok && j0 + drow + i * DROWS < end;
      dv[i] = live ? __ldg(reinterpret_cast<const float4*>(dyp + (i64)i * DROWS * a.K))
                   : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  auto advance = [&]() {
    j0 += BK;
    dyp += (i64)BK * a.K;
#pragma unroll
    for (int i = 0; i < XL; ++i) {
      xqq[i] += BK;
      xw0[i] += BK * a.sw;
      xbase[i] += BK * a.sq;
      while (xqq[i] >= a.Q) {             // the next output row (and image)
        xqq[i] -= a.Q;
        xw0[i] -= a.Q * a.sw;
        xbase[i] += a.sp - a.Q * a.sq;
        xh0[i] += a.sh;
        if (++xp[i] == a.P) {
          xp[i] = 0;
          xh0[i] = -a.pt;
          xbase[i] += a.sn - a.P * a.sp;
        }
      }
    }
  };
  auto store = [&](int buf) {
#pragma unroll
    for (int i = 0; i < XL; ++i)
      *reinterpret_cast<float4*>(&Xs[buf][xrow + i * XROWS][4 * xq]) = xv[i];
#pragma unroll
    for (int i = 0; i < DL; ++i)
      *reinterpret_cast<float4*>(&Ds[buf][drow + i * DROWS][4 * dq]) = dv[i];
  };
  auto compute = [&](int buf) {
#pragma unroll
    for (int kk = 0; kk < BK; ++kk)
      outer_8x8(&Ds[buf][kk][ty * 4], &Ds[buf][kk][BM / 2 + ty * 4], &Xs[buf][kk][tx * 4],
                &Xs[buf][kk][BN / 2 + tx * 4], acc);
  };

  const int slices = (int)((end - begin + BK - 1) / BK);
  if (slices > 0) {
    load();
    store(0);
  }
  __syncthreads();
  for (int k = 0; k < slices; ++k) {
    const int buf = k & 1;
    const bool more = k + 1 < slices;
    if (more) {
      advance();
      load();                     // in flight while this slice is computed
    }
    compute(buf);
    if (more) store(buf ^ 1);     // buf ^ 1 was last read before the last barrier
    __syncthreads();
  }

  // Epilogue: this split's sums (zeros for an empty range) for the block's filters x columns.
  float* dst = out + (i64)split * a.K * a.red;
  const bool vec = a.red % 4 == 0 && ((unsigned long long)dst & 15) == 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int f = m0 + (i < 4 ? ty * 4 + i : BM / 2 + ty * 4 + i - 4);
    if (f >= a.Kg) continue;
    float* row = dst + (i64)(g * a.Kg + f) * a.red;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int t = n0 + half * (BN / 2) + tx * 4;
      if (vec && t + 3 < a.red) {
        *reinterpret_cast<float4*>(row + t) = make_float4(
            acc[i][half * 4], acc[i][half * 4 + 1], acc[i][half * 4 + 2], acc[i][half * 4 + 3]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (t + e < a.red) row[t + e] = acc[i][half * 4 + e];
      }
    }
  }
}

// dw[e] = sum over the splits s, in order, of partial[s*size + e].
__global__ void wgrad_sum(const float* __restrict__ partial, float* __restrict__ dw, i64 size,
                          int splits) {
  for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < size;
       e += (i64)gridDim.x * blockDim.x) {
    float v = partial[e];
    for (int s = 1; s < splits; ++s) v = add(v, partial[s * size + e]);
    dw[e] = v;
  }
}
