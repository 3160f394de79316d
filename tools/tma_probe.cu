// tma_probe.cu: one TMA im2col copy into shared memory, written back to global memory as it
// landed (swizzled or not), so that tools/tma_probe.py can check the descriptor's semantics
// (dimension order, corners, traversal strides, zero fill, the walk across rows and images,
// the 128-byte swizzle) against a NumPy gather before the wgmma producer relies on them.
// sm_90a (CI compiles it: tests/test_kernel_sources.py). One block; thread 0 issues the copy and waits on an mbarrier for its bytes.

struct __align__(64) TensorMap {
  unsigned long long words[16];
};

__global__ void tma_im2col_probe(const __grid_constant__ TensorMap map, int c, int w, int h,
                                 int n, int w_offset, int h_offset, int bytes,
                                 unsigned char* __restrict__ out) {
  extern __shared__ __align__(16) unsigned char dynamic[];   // bytes + 1024 (alignment slack)
  __shared__ __align__(8) unsigned long long landed;
  const unsigned bar = static_cast<unsigned>(__cvta_generic_to_shared(&landed));
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(dynamic));
  const unsigned dst = (base + 1023u) & ~1023u;             // the 128-byte swizzle's atom
  const unsigned char* tile = dynamic + (dst - base);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(bytes) : "memory");
    const unsigned short wo = static_cast<unsigned short>(w_offset);
    const unsigned short ho = static_cast<unsigned short>(h_offset);
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8};\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c), "r"(w), "r"(h), "r"(n),
        "r"(bar), "h"(wo), "h"(ho) : "memory");
    unsigned done = 0;
    while (!done) {
      asm volatile(
          "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n"
          " selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar) : "memory");
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < bytes; i += blockDim.x) out[i] = tile[i];
}
