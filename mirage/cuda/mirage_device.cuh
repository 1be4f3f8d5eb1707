// mirage device library: included as source at the top of every generated translation unit.
// Tile copies (16-byte cp.async), tensor-core fragments (mma.sync m16n8k16, f16/bf16 in, f32
// accumulate), element-wise functions, warp reductions, the argmax order and the element pairs of
// rotary embeddings used by the generated kernels.
#ifndef MIRAGE_DEVICE_CUH
#define MIRAGE_DEVICE_CUH
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

namespace mirage {

// ---- element conversion ---------------------------------------------------------------------
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
// i32 tensors hold indices (below 2^24 where they address anything): exact as f32.
__device__ __forceinline__ float to_f32(int v) { return static_cast<float>(v); }

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ int from_f32<int>(float v) { return __float2int_rn(v); }

// ---- asynchronous copies ---------------------------------------------------------------------
// The L2::256B hint has L2 fetch the aligned 256 bytes around each copy: the weight tiles of the
// weight-bound kernels are 64- or 96-byte row segments, and the neighbouring blocks (or the next
// iteration of the same block) read the rest of those 256 bytes, so DRAM serves longer bursts.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
// 8- and 4-byte copies (tiles whose rows are not a whole number of 16-byte vectors): `.ca`, the
// only cache mode cp.async has below 16 bytes.
__device__ __forceinline__ void cp_async8(void* smem, const void* gmem) {
  unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global.L2::256B [%0], [%1], 8;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
  unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global.L2::256B [%0], [%1], 4;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ---- window copies -----------------------------------------------------------------------------
// A copy unit of VEC elements (4, 8 or 16 bytes) starting at `src`, which is aligned to the element
// only (a row of a tensor whose runtime-sized contiguous dim is not a multiple of the vector): the
// first `valid` elements are read through 16-byte loads of the aligned chunks around them (at most
// two), shifted into place in registers (a select network over words, then __byte_perm), the rest
// zeroed, and stored as one vector at `dst` (shared memory, aligned to the unit). A chunk is loaded
// only when it lies wholly inside the tensor's bytes [lo, hi); a unit that needs one that does not
// is copied element by element. The formula is `planner::window::WindowPlan` (tested there).
template <int VEC, typename T>
__device__ __forceinline__ void window_copy(T* dst, const T* src, int valid, const T* lo, const T* hi) {
  constexpr int UNIT = VEC * static_cast<int>(sizeof(T));
  static_assert(UNIT == 4 || UNIT == 8 || UNIT == 16, "a window unit is 4, 8 or 16 bytes");
  const uintptr_t a = reinterpret_cast<uintptr_t>(src);
  const unsigned b = static_cast<unsigned>(a & 15u);
  const uintptr_t c = a - b;
  const unsigned vb = static_cast<unsigned>(valid) * static_cast<unsigned>(sizeof(T));
  const bool need0 = vb > 0u, need1 = b + vb > 16u;
  const uintptr_t l = reinterpret_cast<uintptr_t>(lo), h = reinterpret_cast<uintptr_t>(hi);
  const bool whole = (!need0 || (c >= l && c + 16u <= h)) && (!need1 || c + 32u <= h);
  if (!whole) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) dst[k] = k < valid ? src[k] : from_f32<T>(0.0f);
    return;
  }
  uint4 x = make_uint4(0u, 0u, 0u, 0u), y = make_uint4(0u, 0u, 0u, 0u);
  if (need0) x = *reinterpret_cast<const uint4*>(c);
  if (need1) y = *reinterpret_cast<const uint4*>(c + 16u);
  const unsigned w[8] = {x.x, x.y, x.z, x.w, y.x, y.y, y.z, y.w};
  const unsigned q = b >> 2, r = b & 3u;
  unsigned s2[6], s1[5], o[UNIT / 4];
#pragma unroll
  for (int j = 0; j < 6; ++j) s2[j] = (q & 2u) ? w[j + 2] : w[j];
#pragma unroll
  for (int j = 0; j < 5; ++j) s1[j] = (q & 1u) ? s2[j + 1] : s2[j];
  const unsigned sel = 0x3210u + 0x1111u * r;
#pragma unroll
  for (int j = 0; j < UNIT / 4; ++j) {
    const unsigned keep = vb > 4u * j ? min(vb - 4u * j, 4u) : 0u;
    const unsigned mask = keep >= 4u ? 0xffffffffu : ((1u << (8u * keep)) - 1u);
    o[j] = __byte_perm(s1[j], s1[j + 1], sel) & mask;
  }
  if constexpr (UNIT == 16) {
    *reinterpret_cast<uint4*>(dst) = make_uint4(o[0], o[1], o[2], o[3]);
  } else if constexpr (UNIT == 8) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(o[0], o[1]);
  } else {
    *reinterpret_cast<unsigned*>(dst) = o[0];
  }
}

// ---- bulk copies (sm_90 and later) -------------------------------------------------------------
// With the code generator's `bulk_copies` option (off by default), a pipelined weight tile's rows
// are moved by the bulk-copy engine (`cp.async.bulk`, one instruction per row) and counted in
// bytes on the stage's mbarrier, instead of by the threads' 16-byte `cp.async`; with `bulk_runs`
// (off by default), a tile that is one contiguous run by one instruction. Generated kernels
// use them under `#if MIRAGE_BULK`; other architectures keep `cp.async`. On the H200 rows of
// 64-256 bytes moved this way were 1.3-1.8x slower than `cp.async` (docs/DECISIONS.md, change 21).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define MIRAGE_BULK 1
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// Makes the initialized barriers visible to the bulk-copy engine (then a block barrier).
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// Ends a barrier's life (every phase complete, no thread waiting): a megakernel task body's
// barriers before the worker's next task initializes them again.
__device__ __forceinline__ void mbar_inval(unsigned long long* bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// One arrival that also expects `bytes` of bulk copies in the barrier's current phase.
__device__ __forceinline__ void mbar_expect_tx(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// Waits until the phase of parity `parity` of the barrier has completed.
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "MIRAGE_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@p bra.uni MIRAGE_DONE;\n"
      "bra.uni MIRAGE_WAIT;\n"
      "MIRAGE_DONE:\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
// Orders this thread's earlier shared-memory accesses (the previous use of a stage buffer,
// behind a block barrier) before the bulk copies it issues next (the async proxy).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Orders this thread's view of memory through the generic proxy (global data other blocks
// released and this one acquired) before the bulk copies it issues next: a megakernel task
// body's operands written by earlier tasks of the same launch.
__device__ __forceinline__ void fence_proxy_async_all() { asm volatile("fence.proxy.async;\n" ::: "memory"); }
// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) to shared memory; completion
// is counted on `bar`.
__device__ __forceinline__ void bulk_copy(void* smem, const void* gmem, unsigned bytes, unsigned long long* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_addr(smem)),
               "l"(gmem), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}
#else
#define MIRAGE_BULK 0
#endif

// ---- element-wise functions (f32) -------------------------------------------------------------
__device__ __forceinline__ float silu(float x) { return x / (1.0f + __expf(-x)); }
__device__ __forceinline__ float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float relu(float x) { return fmaxf(x, 0.0f); }
__device__ __forceinline__ float clampf(float x, float lo, float hi) { return fminf(fmaxf(x, lo), hi); }
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): the tanh approximation of GELU.
__device__ __forceinline__ float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}

// ---- argmax ------------------------------------------------------------------------------------
// Whether value a at position i beats value b at position j: the larger value, NaN above every
// number, ties to the lower position (the order of mirage's reference interpreter).
__device__ __forceinline__ bool argmax_beats(float a, int i, float b, int j) {
  const bool an = isnan(a), bn = isnan(b);
  if (an != bn) return an;
  if (!an && a != b) return a > b;
  return i < j;
}

// ---- warp reductions ---------------------------------------------------------------------------
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// One step of an argmax over lanes `off` apart: every lane keeps the better (value, position).
__device__ __forceinline__ void shfl_argmax(float& v, int& k, int off) {
  const float ov = __shfl_xor_sync(0xffffffffu, v, off);
  const int ok = __shfl_xor_sync(0xffffffffu, k, off);
  if (argmax_beats(ov, ok, v, k)) { v = ov; k = ok; }
}
__device__ __forceinline__ void warp_argmax(float& v, int& k) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) shfl_argmax(v, k, o);
}

// ---- rotary embeddings -------------------------------------------------------------------------
// Element j of a head of h elements: its partner in the rotated pair, the pair's angle, and
// whether j is the pair's first element (y_j = x_j cos - x_partner sin) or its second
// (y_j = x_j cos + x_partner sin). The same pairs as mirage_core::ops::RopeLayout::pair.
struct RopePair {
  int partner;
  int angle;
  bool first;
};
__device__ __forceinline__ RopePair rope_pair_half_split(int j, int h) {
  const int half = h >> 1;
  return j < half ? RopePair{j + half, j, true} : RopePair{j - half, j - half, false};
}
__device__ __forceinline__ RopePair rope_pair_interleaved(int j, int h) {
  (void)h;
  return (j & 1) == 0 ? RopePair{j + 1, j >> 1, true} : RopePair{j - 1, j >> 1, false};
}

// ---- tensor cores ------------------------------------------------------------------------------
// Packs two values into the 32-bit register layout of an f16x2 / bf16x2 operand.
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
// The 16 bits of an f16 / bf16 value, and two such bit patterns as one operand register (`lo` in
// the low half, as pack2 places it). For operands already held in the mma's type: no conversion
// through f32 and back (the same bits; two instructions fewer per element).
__device__ __forceinline__ uint32_t bits16(__half v) { return __half_as_ushort(v); }
__device__ __forceinline__ uint32_t bits16(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
__device__ __forceinline__ uint32_t pack_bits(uint32_t lo, uint32_t hi) { return lo | (hi << 16); }

// The B operand (16x8, col) of an m16n8k16 mma from a row-major [k][n] shared-memory tile of
// 16-bit elements: lanes 0-15 give the addresses of rows k0..k0+15 (16-byte aligned, 8 consecutive
// n each); ldmatrix transposes the two 8x8 matrices into the fragment layout.
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t b[2], const void* row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(b[0]), "=r"(b[1]) : "r"(addr) : "memory");
}

// D = A(16x16, row) * B(16x8, col) + D, f32 accumulate.
template <typename T> __device__ __forceinline__ void mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2]);
template <> __device__ __forceinline__ void mma_16816<__half>(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <> __device__ __forceinline__ void mma_16816<__nv_bfloat16>(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ---- CUDA-core matmul rows ---------------------------------------------------------------------
// The two elements of a 32-bit pair of 16-bit values, as f32.
__device__ __forceinline__ float2 pair_f32(uint32_t w, const __nv_bfloat16*) {
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}
__device__ __forceinline__ float2 pair_f32(uint32_t w, const __half*) {
  __half2 h;
  memcpy(&h, &w, 4);
  return __half22float2(h);
}
// lo[0..4) += a * v[0..4), hi[0..4) += a * v[4..8): the eight 16-bit elements of a 16-byte vector.
template <typename T> __device__ __forceinline__ void fma8(float (&lo)[4], float (&hi)[4], uint4 v, float a) {
  const T* tag = nullptr;
  float2 p = pair_f32(v.x, tag);
  lo[0] = fmaf(a, p.x, lo[0]); lo[1] = fmaf(a, p.y, lo[1]);
  p = pair_f32(v.y, tag);
  lo[2] = fmaf(a, p.x, lo[2]); lo[3] = fmaf(a, p.y, lo[3]);
  p = pair_f32(v.z, tag);
  hi[0] = fmaf(a, p.x, hi[0]); hi[1] = fmaf(a, p.y, hi[1]);
  p = pair_f32(v.w, tag);
  hi[2] = fmaf(a, p.x, hi[2]); hi[3] = fmaf(a, p.y, hi[3]);
}

}  // namespace mirage
#endif  // MIRAGE_DEVICE_CUH
