// Session 35: how fast can one SM pull bytes from DRAM, by copy mechanism? (issue 14)
// Every block streams its own bytes of a 192 MiB buffer (4x the L2) into shared memory through a
// pipeline of S stages and touches one word of each stage; timed with CUDA events, L2 flushed
// before each launch, median of 15. Modes:
//   ld      plain 16-byte loads into registers (no shared memory), 4 in flight per thread
//   cpasync 16-byte cp.async per thread, S stages of T bytes, contiguous chunk per block
//   bulk    one cp.async.bulk (1-D) of T bytes per stage, mbarrier per stage, contiguous chunk
//   rows    cp.async of a column strip: rows of R bytes at a 9216-byte pitch (the 16-row
//           projections' weight tiles: W [K, 4608] bf16, 64 columns per block)
//   tma     the same strip by one 2-D tensor-map copy (cp.async.bulk.tensor) per stage
// Per-SM rate = bytes / time / min(blocks, SMs).
#include <cuda.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

__device__ __forceinline__ unsigned sptr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void cp16(void* s, const void* g) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sptr(s)), "l"(g));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void wait_groups() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }
__device__ __forceinline__ void bar_init(uint64_t* b) {
  asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(sptr(b)));
}
__device__ __forceinline__ void bar_expect(uint64_t* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(sptr(b)), "r"(bytes));
}
__device__ __forceinline__ void bar_wait(uint64_t* b, unsigned phase) {
  asm volatile(
      "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared.b64 p, [%0], %1;\n @!p bra W;\n}" ::"r"(sptr(b)),
      "r"(phase));
}
__device__ __forceinline__ void bulk(void* s, const void* g, unsigned bytes, uint64_t* b) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(sptr(s)),
               "l"(g), "r"(bytes), "r"(sptr(b))
               : "memory");
}
__device__ __forceinline__ void tma2d(void* s, const CUtensorMap* m, int c0, int c1, uint64_t* b) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          sptr(s)),
      "l"(reinterpret_cast<uint64_t>(m)), "r"(c0), "r"(c1), "r"(sptr(b))
      : "memory");
}

__global__ void __launch_bounds__(256) k_ld(const int4* __restrict__ in, size_t per_block, float* out) {
  const int4* p = in + blockIdx.x * (per_block / 16);
  const size_t n = per_block / 16;
  float acc = 0.f;
  for (size_t i = threadIdx.x; i < n; i += 4 * 256) {
    int4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = i + u * 256 < n ? __ldg(p + i + u * 256) : make_int4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc += __int_as_float(v[u].x ^ v[u].w);
  }
  if (acc == 1234.5f) out[blockIdx.x] = acc;
}

template <int S, int T>
__global__ void __launch_bounds__(256) k_cpasync(const char* __restrict__ in, size_t per_block, float* out) {
  extern __shared__ __align__(128) char smem[];
  const char* base = in + blockIdx.x * per_block;
  const int iters = (int)(per_block / T);
  auto issue = [&](int s) {
    char* d = smem + (s % S) * T;
    const char* g = base + (size_t)s * T;
    for (int v = threadIdx.x; v < T / 16; v += 256) cp16(d + v * 16, g + v * 16);
  };
  for (int s = 0; s < S - 1; ++s) { if (s < iters) issue(s); commit(); }
  float acc = 0.f;
  for (int it = 0; it < iters; ++it) {
    wait_groups<S - 2>();
    __syncthreads();
    if (it + S - 1 < iters) issue(it + S - 1);
    commit();
    acc += reinterpret_cast<const float*>(smem + (it % S) * T)[threadIdx.x];
  }
  if (acc == 1234.5f) out[blockIdx.x] = acc;
}

template <int S, int T>
__global__ void __launch_bounds__(256) k_bulk(const char* __restrict__ in, size_t per_block, float* out) {
  extern __shared__ __align__(128) char smem[];
  __shared__ __align__(8) uint64_t bars[S];
  const char* base = in + blockIdx.x * per_block;
  const int iters = (int)(per_block / T);
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) bar_init(&bars[s]);
    asm volatile("fence.mbarrier_init.release.cluster;");
  }
  __syncthreads();
  auto issue = [&](int s) {
    bar_expect(&bars[s % S], T);
    bulk(smem + (s % S) * T, base + (size_t)s * T, T, &bars[s % S]);
  };
  if (threadIdx.x == 0)
    for (int s = 0; s < S - 1 && s < iters; ++s) issue(s);
  float acc = 0.f;
  for (int it = 0; it < iters; ++it) {
    bar_wait(&bars[it % S], (it / S) & 1);
    acc += reinterpret_cast<const float*>(smem + (it % S) * T)[threadIdx.x];
    __syncthreads();  // every thread read the stage refilled next
    if (threadIdx.x == 0 && it + S - 1 < iters) issue(it + S - 1);
  }
  if (acc == 1234.5f) out[blockIdx.x] = acc;
}

// Column strips: block b reads columns [strip*R, strip*R+R) of rows [split*rows, (split+1)*rows)
// of a [K, PITCH] byte matrix, `RS` rows per stage.
constexpr int PITCH = 9216;
template <int S, int R, int RS>
__global__ void __launch_bounds__(256) k_rows(const char* __restrict__ in, int rows, float* out) {
  extern __shared__ __align__(128) char smem[];
  constexpr int strips = PITCH / R;
  const int strip = blockIdx.x % strips, split = blockIdx.x / strips;
  const char* base = in + (size_t)split * rows * PITCH + strip * R;
  const int iters = rows / RS;
  constexpr int T = RS * R;
  auto issue = [&](int s) {
    char* d = smem + (s % S) * T;
    for (int v = threadIdx.x; v < T / 16; v += 256) {
      const int r = v / (R / 16), c = v % (R / 16);
      cp16(d + v * 16, base + (size_t)(s * RS + r) * PITCH + c * 16);
    }
  };
  for (int s = 0; s < S - 1; ++s) { if (s < iters) issue(s); commit(); }
  float acc = 0.f;
  for (int it = 0; it < iters; ++it) {
    wait_groups<S - 2>();
    __syncthreads();
    if (it + S - 1 < iters) issue(it + S - 1);
    commit();
    acc += reinterpret_cast<const float*>(smem + (it % S) * T)[threadIdx.x];
  }
  if (acc == 1234.5f) out[blockIdx.x] = acc;
}

template <int S, int R, int RS>
__global__ void __launch_bounds__(256) k_tma(const __grid_constant__ CUtensorMap map, int rows, float* out) {
  extern __shared__ __align__(128) char smem[];
  __shared__ __align__(8) uint64_t bars[S];
  constexpr int strips = PITCH / R;
  const int strip = blockIdx.x % strips, split = blockIdx.x / strips;
  const int iters = rows / RS;
  constexpr int T = RS * R;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) bar_init(&bars[s]);
    asm volatile("fence.mbarrier_init.release.cluster;");
  }
  __syncthreads();
  auto issue = [&](int s) {
    bar_expect(&bars[s % S], T);
    tma2d(smem + (s % S) * T, &map, strip * (R / 2), split * rows + s * RS, &bars[s % S]);
  };
  if (threadIdx.x == 0)
    for (int s = 0; s < S - 1 && s < iters; ++s) issue(s);
  float acc = 0.f;
  for (int it = 0; it < iters; ++it) {
    bar_wait(&bars[it % S], (it / S) & 1);
    acc += reinterpret_cast<const float*>(smem + (it % S) * T)[threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0 && it + S - 1 < iters) issue(it + S - 1);
  }
  if (acc == 1234.5f) out[blockIdx.x] = acc;
}

__global__ void flush(int4* buf, size_t n) {
  for (size_t i = blockIdx.x * 256 + threadIdx.x; i < n; i += (size_t)gridDim.x * 256) buf[i] = make_int4(1, 2, 3, 4);
}

static int sms;
static int4* fbuf;
static size_t fn;

template <class F>
static double time_us(F launch) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> ts;
  for (int r = 0; r < 17; ++r) {
    flush<<<sms * 4, 256>>>(fbuf, fn);
    CK(cudaEventRecord(a));
    launch();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (r >= 2) ts.push_back(ms * 1000.f);
  }
  CK(cudaGetLastError());
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

static void report(const char* mode, int blocks, double bytes, double us) {
  const int used = std::min(blocks, sms);
  printf("%-34s blocks %4d  %7.1f us  %6.0f GB/s  per SM %5.1f GB/s\n", mode, blocks, us, bytes / us / 1e3,
         bytes / us / 1e3 / used);
}

int main() {
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs\n", prop.name, sms);
  const size_t total = 192ull << 20;
  char* buf;
  float* out;
  CK(cudaMalloc(&buf, total));
  CK(cudaMemset(buf, 1, total));
  CK(cudaMalloc(&out, 1 << 20));
  fn = (256ull << 20) / 16;
  CK(cudaMalloc(&fbuf, fn * 16));

  // contiguous chunks: the same 132 MiB read by 66 .. 1056 blocks
  const size_t bytes = 132ull << 20;
  for (int blocks : {66, 132, 264, 528, 1056}) {
    const size_t per = bytes / blocks;
    report("ld (registers)", blocks, bytes, time_us([&] { k_ld<<<blocks, 256>>>((const int4*)buf, per, out); }));
  }
#define CPA(S, T)                                                                                          \
  for (int blocks : {66, 132, 264}) {                                                                      \
    const size_t per = bytes / blocks / (T) * (T);                                                         \
    auto k = k_cpasync<S, T>;                                                                              \
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (S) * (T)));                   \
    report("cpasync S" #S " T" #T, blocks, (double)per * blocks,                                          \
           time_us([&] { k<<<blocks, 256, (S) * (T)>>>(buf, per, out); }));                                \
  }
  CPA(2, 65536) CPA(4, 32768) CPA(4, 16384) CPA(8, 16384) CPA(12, 16384)
#define BLK(S, T)                                                                                          \
  for (int blocks : {66, 132, 264}) {                                                                      \
    const size_t per = bytes / blocks / (T) * (T);                                                         \
    auto k = k_bulk<S, T>;                                                                                 \
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (S) * (T)));                   \
    report("bulk S" #S " T" #T, blocks, (double)per * blocks,                                             \
           time_us([&] { k<<<blocks, 256, (S) * (T)>>>(buf, per, out); }));                                \
  }
  BLK(2, 65536) BLK(4, 32768) BLK(4, 16384) BLK(8, 16384) BLK(12, 16384) BLK(6, 32768)

  // column strips of W [K, 4608] bf16 (pitch 9216 bytes), K = 3584 * 4 (so it overflows L2)
  const int K = 3584 * 4;
  CUtensorMap map128, map256;
  {
    auto encode = [&](CUtensorMap* m, int box_cols, int box_rows) {
      cuuint64_t dims[2] = {PITCH / 2, (cuuint64_t)K};
      cuuint64_t strides[1] = {PITCH};
      cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
      cuuint32_t es[2] = {1, 1};
      CUresult r = cuTensorMapEncodeTiled(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, buf, dims, strides, box, es,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
      if (r != CUDA_SUCCESS) { printf("cuTensorMapEncodeTiled: %d\n", (int)r); exit(1); }
    };
    encode(&map128, 64, 128);
    encode(&map256, 128, 64);
  }
  const double strip_bytes = (double)K * PITCH;
#define ROWS(S, R, RS, SPLITS)                                                                             \
  {                                                                                                        \
    const int blocks = (PITCH / (R)) * (SPLITS), rows = K / (SPLITS);                                      \
    auto k = k_rows<S, R, RS>;                                                                             \
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (S) * (R) * (RS)));            \
    report("rows cp.async R" #R " RS" #RS " S" #S, blocks, strip_bytes,                                  \
           time_us([&] { k<<<blocks, 256, (S) * (R) * (RS)>>>(buf, rows, out); }));                        \
  }
#define TMA(S, R, RS, SPLITS, MAP)                                                                         \
  {                                                                                                        \
    const int blocks = (PITCH / (R)) * (SPLITS), rows = K / (SPLITS);                                      \
    auto k = k_tma<S, R, RS>;                                                                              \
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (S) * (R) * (RS)));            \
    report("rows tma R" #R " RS" #RS " S" #S, blocks, strip_bytes,                                       \
           time_us([&] { k<<<blocks, 256, (S) * (R) * (RS)>>>(MAP, rows, out); }));                        \
  }
  ROWS(2, 128, 448, 1) ROWS(4, 128, 128, 1) ROWS(4, 128, 128, 2) ROWS(4, 128, 128, 4) ROWS(8, 128, 128, 4)
  ROWS(4, 256, 64, 2) ROWS(4, 256, 64, 4) ROWS(4, 256, 64, 8)
  TMA(4, 128, 128, 1, map128) TMA(8, 128, 128, 1, map128) TMA(4, 128, 128, 2, map128) TMA(8, 128, 128, 2, map128)
  TMA(4, 128, 128, 4, map128) TMA(4, 256, 64, 2, map256) TMA(8, 256, 64, 2, map256) TMA(4, 256, 64, 4, map256)
  TMA(8, 256, 64, 4, map256)
  printf("done\n");
  return 0;
}
