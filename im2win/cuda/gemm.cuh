// gemm.cuh: what the two im2win GEMM kernels (im2win_conv.cu, im2win_mma.cu) share: the
// launch geometry, the reduction table, and the operand addressing
//   B[t, pixel] = src[base(pixel) + off(t)]
// with base(pixel) 64-bit and computed once per thread, and off(t) and the taps (r*dh, s*dw)
// from the table (or computed, where offsets do not fit 32 bits or the table is switched off).
//
// The table is a device buffer owned by the launch's plan, passed as a kernel argument
// (`taps`: taps[t] = {off(t), (r*dh) << 16 | s*dw}, zero past the reduction up to a multiple of
// 32 entries) and read through the read-only data cache.
// Nothing here is module-global state, so launches of different problems never wait for each
// other and a captured CUDA graph replays with its own tables.

// Passed by value; Python builds the same layout as a NumPy structured scalar
// (im2win/cuda/launch.py, GEOMETRY): the 64-bit fields first, so there is no inner padding.
struct Geometry {
  i64 npix;                   // N*P*Q pixels in this launch
  i64 sn, sg, sp, sq, base0;  // base(n, g, p, q) = n*sn + g*sg + p*sp + q*sq + base0
  i64 sc, sr, ss;             // off(t) = c*sc + r*sr + s*ss (table-free path)
  int K, Kg, red, redp;       // filters, filters per group, reduction length, and its padded
                              // length (the Tensor-Core kernel's filter row length)
  int PQ, Q;
  int sh, sw, pt, pl, H, W;   // fused: h0 = p*sh - pt, w0 = q*sw - pl, bounds H x W
  int Cg, R, S, dh, dw;       // table-free decomposition of t
  int y_nchw;                 // 1: y written (n, k, p, q) by the wgmma kernel from NHWC x (an
                              // NCHW problem's NHWC twin writes the NCHW y itself); else 0
};

struct Pixel {
  i64 base;
  int h0, w0;
  bool valid;
};

__device__ __forceinline__ Pixel pixel_at(i64 j, int g, const Geometry& geo) {
  Pixel px;
  px.valid = j < geo.npix;
  if (!px.valid) j = 0;
  const i64 n = j / geo.PQ;
  const int pq = (int)(j - n * geo.PQ);
  const int p = pq / geo.Q, q = pq - p * geo.Q;
  px.base = n * geo.sn + g * geo.sg + p * geo.sp + q * geo.sq + geo.base0;
  px.h0 = p * geo.sh - geo.pt;
  px.w0 = q * geo.sw - geo.pl;
  return px;
}

struct Tap {
  i64 off;
  int dr, ds;
};

__device__ __forceinline__ Tap tap_of(int2 entry) {
  Tap tap;
  tap.off = entry.x;
  tap.dr = entry.y >> 16;
  tap.ds = entry.y & 0xffff;
  return tap;
}

// The N table entries of t0 .. t0 + N - 1 in 16-byte loads (N even, t0 even); the table is
// padded with zeros to whole 32-entry slices, so loads within a slice never leave it.
template <int N>
__device__ __forceinline__ void taps_of(const int2* __restrict__ taps, int t0, int2 (&out)[N]) {
  static_assert(N % 2 == 0, "entries come in pairs");
  const int4* p = reinterpret_cast<const int4*>(taps + t0);
#pragma unroll
  for (int q = 0; q < N / 2; ++q) {
    const int4 v = __ldg(p + q);
    out[2 * q] = make_int2(v.x, v.y);
    out[2 * q + 1] = make_int2(v.z, v.w);
  }
}

template <bool kNHWC, bool kWindowOrder, bool kTable>
__device__ __forceinline__ Tap tap_at(int t, const int2* __restrict__ taps, const Geometry& geo) {
  Tap tap;
  if (kTable) {
    tap = tap_of(__ldg(taps + t));
  } else {
    int c, rs, r, s;
    if (kNHWC) {
      rs = t / geo.Cg;
      c = t - rs * geo.Cg;
    } else {
      c = t / (geo.R * geo.S);
      rs = t - c * geo.R * geo.S;
    }
    if (kWindowOrder) {  // rs = s*R + r
      s = rs / geo.R;
      r = rs - s * geo.R;
    } else {             // rs = r*S + s
      r = rs / geo.S;
      s = rs - r * geo.S;
    }
    tap.off = c * geo.sc + r * geo.sr + s * geo.ss;
    tap.dr = r * geo.dh;
    tap.ds = s * geo.dw;
  }
  return tap;
}

