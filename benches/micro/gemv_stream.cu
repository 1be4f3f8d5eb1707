// Weight-streaming micro-benchmark for decode GEMV, y[M, N] = x[M, K] · W[K, N] (bf16 in, f32
// out, W row-major [in, out] as the µGraphs read it): which way of moving W's column strips
// reaches the bandwidth a plain read reaches? (DECISIONS change 32; issue 14.)
//
//  - "read": every block sums 16-byte vectors of W, grid-stride, U loads in flight per thread:
//    the read ceiling of the same bytes (no compute, no shared memory).
//  - "cp.async": each block owns C columns; [R, C] tiles pass through shared memory in a
//    4-stage 16-byte `cp.async` pipeline (what generated kernels do today), then FMA.
//  - "register": each block owns C columns; each thread loads 8 columns (16 bytes) of U rows
//    straight into registers (`ld.global.nc.L1::no_allocate`), all U loads before the first use,
//    and multiplies them with x from shared memory; the row groups reduce through shared memory
//    at the end. No per-iteration barrier.
//  - "tma": each block owns C columns; [R, C] boxes come through the tensor-copy engine
//    (`cp.async.bulk.tensor.2d`, one instruction per box, completion on an mbarrier per stage),
//    S stages deep, then FMA from shared memory.
//
// Every variant's y is compared with a plain f32 reference kernel (max abs difference printed).
// L2 is flushed (256 MiB memset) before each timed launch; median of 20 launches.
// Build and run (the H200 image has nvcc):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o gemv_stream \
//        benches/micro/gemv_stream.cu -lcuda && ./gemv_stream
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                         \
  do {                                                                                   \
    cudaError_t e = (x);                                                                 \
    if (e != cudaSuccess) {                                                              \
      fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e));          \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

constexpr int THREADS = 256;

__device__ __forceinline__ uint4 ldg_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// 8 bf16 of a 16-byte vector times xv, added to acc[0..8).
__device__ __forceinline__ void fma8(float* acc, uint4 v, float xv) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc[2 * i] += xv * __uint_as_float(w[i] << 16);
    acc[2 * i + 1] += xv * __uint_as_float(w[i] & 0xffff0000u);
  }
}

// ---------------------------------------------------------------- reference and read ceiling
__global__ void gemv_ref(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int M, int K, int N) {
  const long long n = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  for (int m = 0; m < M; ++m) {
    float acc = 0.f;
    for (int k = 0; k < K; ++k) acc += __bfloat162float(x[m * K + k]) * __bfloat162float(w[(long long)k * N + n]);
    y[(long long)m * N + n] = acc;
  }
}

template <int U>
__global__ void read_sum(const uint4* w, long long nvec, float* sink) {
  float acc = 0.f;
  const long long stride = (long long)gridDim.x * THREADS;
  for (long long i = (long long)blockIdx.x * THREADS + threadIdx.x; i < nvec; i += stride * U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = i + u * stride < nvec ? ldg_stream(w + i + u * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < U; ++u) acc += __uint_as_float(v[u].x ^ v[u].y ^ v[u].z ^ v[u].w);
  }
  if (acc == 1.2345f) sink[0] = acc;
}

// ------------------------------------------------------------------------ shared epilogue
// acc[M][8] of thread (rg, cg) → y; row groups reduced through shared memory `red` ([RG][M][C]).
template <int M, int C>
__device__ __forceinline__ void reduce_store(float (&acc)[M][8], float* red, float* y, int N) {
  constexpr int TPR = C / 8, RG = THREADS / TPR;
  const int cg = threadIdx.x % TPR, rg = threadIdx.x / TPR;
  __syncthreads();
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int j = 0; j < 8; ++j) red[(rg * M + m) * C + cg * 8 + j] = acc[m][j];
  __syncthreads();
  for (int o = threadIdx.x; o < M * C; o += THREADS) {
    float s = 0.f;
    for (int r = 0; r < RG; ++r) s += red[r * M * C + o];
    y[(long long)(o / C) * N + (long long)blockIdx.x * C + o % C] = s;
  }
}

// x [M, K] bf16 → shared f32.
template <int M>
__device__ __forceinline__ void load_x(const __nv_bfloat16* x, float* xs, int K) {
  for (int i = threadIdx.x; i < M * K; i += THREADS) xs[i] = __bfloat162float(x[i]);
}

// ---------------------------------------------------------------------------- register path
template <int M, int C, int U>
__global__ void __launch_bounds__(THREADS) gemv_reg(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int K, int N) {
  extern __shared__ float sm[];
  float* xs = sm;  // M*K
  float* red = sm + M * K;
  constexpr int TPR = C / 8, RG = THREADS / TPR;
  const int cg = threadIdx.x % TPR, rg = threadIdx.x / TPR;
  load_x<M>(x, xs, K);
  __syncthreads();
  const __nv_bfloat16* wp = w + (long long)blockIdx.x * C + cg * 8;
  float acc[M][8] = {};
  for (int k0 = rg; k0 < K; k0 += RG * U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = k0 + u * RG;
      v[u] = k < K ? ldg_stream(wp + (long long)k * N) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = k0 + u * RG;
      if (k < K) {
#pragma unroll
        for (int m = 0; m < M; ++m) fma8(acc[m], v[u], xs[m * K + k]);
      }
    }
  }
  reduce_store<M, C>(acc, red, y, N);
}

// ---------------------------------------------------------------------------- cp.async path
__device__ __forceinline__ void cp16(void* s, const void* g) {
  unsigned a = (unsigned)__cvta_generic_to_shared(s);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(g));
}

// [R, C] tiles, S stages; each thread then reads its 8 columns of its rows of the tile.
template <int M, int C, int R, int S>
__global__ void __launch_bounds__(THREADS) gemv_cpasync(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int K, int N) {
  extern __shared__ __align__(128) float sm[];
  __nv_bfloat16* tiles = reinterpret_cast<__nv_bfloat16*>(sm);  // S * R * C
  float* xs = sm + S * R * C / 2;
  float* red = xs + M * K;
  constexpr int TPR = C / 8, RG = THREADS / TPR;
  const int cg = threadIdx.x % TPR, rg = threadIdx.x / TPR;
  load_x<M>(x, xs, K);
  const int iters = K / R;
  const __nv_bfloat16* wb = w + (long long)blockIdx.x * C;
  auto issue = [&](int it) {
    __nv_bfloat16* dst = tiles + (it % S) * R * C;
    for (int v = threadIdx.x; v < R * C / 8; v += THREADS) {
      const int r = v / TPR, c = v % TPR;
      cp16(dst + r * C + c * 8, wb + (long long)(it * R + r) * N + c * 8);
    }
  };
  for (int s = 0; s < S - 1; ++s) {
    if (s < iters) issue(s);
    asm volatile("cp.async.commit_group;\n" ::);
  }
  float acc[M][8] = {};
  for (int it = 0; it < iters; ++it) {
    if (it + S - 1 < iters) issue(it + S - 1);
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 1));
    __syncthreads();
    const __nv_bfloat16* t = tiles + (it % S) * R * C;
    for (int r = rg; r < R; r += RG) {
      const uint4 v = *reinterpret_cast<const uint4*>(t + r * C + cg * 8);
#pragma unroll
      for (int m = 0; m < M; ++m) fma8(acc[m], v, xs[m * K + it * R + r]);
    }
    __syncthreads();
  }
  reduce_store<M, C>(acc, red, y, N);
}

// -------------------------------------------------------------------------------- TMA path
__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

template <int M, int C, int R, int S>
__global__ void __launch_bounds__(THREADS)
    gemv_tma(const __grid_constant__ CUtensorMap tmap, const __nv_bfloat16* x, float* y, int K, int N) {
  extern __shared__ __align__(1024) unsigned char smraw[];
  // 128-byte aligned stages, then the mbarriers, then x and the reduction.
  __nv_bfloat16* tiles = reinterpret_cast<__nv_bfloat16*>(smraw);
  unsigned long long* bars = reinterpret_cast<unsigned long long*>(smraw + S * R * C * 2);
  float* xs = reinterpret_cast<float*>(smraw + S * R * C * 2 + 8 * S);
  float* red = xs + M * K;
  constexpr int TPR = C / 8, RG = THREADS / TPR;
  const int cg = threadIdx.x % TPR, rg = threadIdx.x / TPR;
  const int iters = K / R;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_addr(&bars[s])));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::);
  }
  load_x<M>(x, xs, K);
  __syncthreads();
  auto issue = [&](int it) {  // thread 0 only
    const int s = it % S;
    const unsigned bar = smem_addr(&bars[s]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(R * C * 2));
    const int c0 = blockIdx.x * C, r0 = it * R;
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
            smem_addr(tiles + s * R * C)),
        "l"(reinterpret_cast<unsigned long long>(&tmap)), "r"(c0), "r"(r0), "r"(bar)
        : "memory");
  };
  if (threadIdx.x == 0)
    for (int s = 0; s < S - 1 && s < iters; ++s) issue(s);
  float acc[M][8] = {};
  for (int it = 0; it < iters; ++it) {
    if (threadIdx.x == 0 && it + S - 1 < iters) issue(it + S - 1);
    const unsigned bar = smem_addr(&bars[it % S]);
    const unsigned parity = (it / S) & 1;
    unsigned done = 0;
    while (!done) {
      asm volatile(
          "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(bar), "r"(parity)
          : "memory");
    }
    const __nv_bfloat16* t = tiles + (it % S) * R * C;
    for (int r = rg; r < R; r += RG) {
      const uint4 v = *reinterpret_cast<const uint4*>(t + r * C + cg * 8);
#pragma unroll
      for (int m = 0; m < M; ++m) fma8(acc[m], v, xs[m * K + it * R + r]);
    }
    __syncthreads();  // every thread is done with stage it % S before thread 0 refills it
  }
  reduce_store<M, C>(acc, red, y, N);
}

// --------------------------------------------------------------------------------- host
typedef CUresult (*EncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                                const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static EncodeTiled encode_tiled() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  CHECK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &q));
  if (!fn) {
    fprintf(stderr, "no cuTensorMapEncodeTiled\n");
    exit(1);
  }
  return reinterpret_cast<EncodeTiled>(fn);
}

struct Bench {
  char* flush;
  size_t flush_bytes = 256ull << 20;
  cudaEvent_t a, b;
  Bench() {
    CHECK(cudaMalloc(&flush, flush_bytes));
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
  }
  template <class F>
  float time(F launch) {
    std::vector<float> ms;
    for (int i = 0; i < 23; ++i) {
      CHECK(cudaMemsetAsync(flush, i, flush_bytes));
      CHECK(cudaEventRecord(a));
      launch();
      CHECK(cudaEventRecord(b));
      CHECK(cudaEventSynchronize(b));
      CHECK(cudaGetLastError());
      float t;
      CHECK(cudaEventElapsedTime(&t, a, b));
      if (i >= 3) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2] * 1000.0f;
  }
};

static float max_diff(const float* d_y, const float* d_ref, long long n) {
  std::vector<float> y(n), r(n);
  CHECK(cudaMemcpy(y.data(), d_y, n * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(r.data(), d_ref, n * 4, cudaMemcpyDeviceToHost));
  float m = 0.f;
  for (long long i = 0; i < n; ++i) m = std::max(m, std::fabs(y[i] - r[i]));
  return m;
}

template <int M>
static void shape(Bench& bench, const char* name, int K, int N) {
  const long long wbytes = (long long)K * N * 2;
  __nv_bfloat16 *x, *w;
  float *y, *ref, *sink;
  CHECK(cudaMalloc(&x, (size_t)M * K * 2));
  CHECK(cudaMalloc(&w, wbytes));
  CHECK(cudaMalloc(&y, (size_t)M * N * 4));
  CHECK(cudaMalloc(&ref, (size_t)M * N * 4));
  CHECK(cudaMalloc(&sink, 64));
  {  // deterministic values in [-1, 1) (x) and [-0.02, 0.02) (w)
    std::vector<__nv_bfloat16> hx((size_t)M * K), hw((size_t)K * N);
    unsigned s = 12345;
    auto rnd = [&] { s = s * 1664525u + 1013904223u; return (float)(s >> 8) / (1 << 24) * 2.f - 1.f; };
    for (auto& v : hx) v = __float2bfloat16(rnd());
    for (auto& v : hw) v = __float2bfloat16(0.02f * rnd());
    CHECK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(w, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
  }
  gemv_ref<<<(N + 255) / 256, 256>>>(x, w, ref, M, K, N);
  CHECK(cudaDeviceSynchronize());
  printf("%s: M %d, K %d, N %d, W %.1f MiB\n", name, M, K, N, wbytes / 1048576.0);
  auto report = [&](const char* what, float us) {
    const float d = max_diff(y, ref, (long long)M * N);
    printf("  %-44s %8.1f us %5.2f TB/s  max |y - ref| %.2e%s\n", what, us, wbytes / us / 1e6, d, d > 1e-2 ? "  MISMATCH" : "");
    CHECK(cudaMemset(y, 0, (size_t)M * N * 4));
  };
  for (int u : {4, 8}) {
    const float us = bench.time([&] {
      if (u == 4) read_sum<4><<<132 * 8, THREADS>>>(reinterpret_cast<const uint4*>(w), wbytes / 16, sink);
      else read_sum<8><<<132 * 8, THREADS>>>(reinterpret_cast<const uint4*>(w), wbytes / 16, sink);
    });
    printf("  read ceiling, U %d%*s %8.1f us %5.2f TB/s\n", u, 32, "", us, wbytes / us / 1e6);
  }
  auto reg = [&](auto kern, int C, const char* what) {
    if (N % C) return;
    const int smem = (M * K + THREADS / (C / 8) * M * C) * 4;
    CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    report(what, bench.time([&] { kern<<<N / C, THREADS, smem>>>(x, w, y, K, N); }));
  };
  reg(gemv_reg<M, 64, 8>, 64, "register C 64, U 8");
  reg(gemv_reg<M, 128, 4>, 128, "register C 128, U 4");
  reg(gemv_reg<M, 128, 8>, 128, "register C 128, U 8");
  reg(gemv_reg<M, 128, 16>, 128, "register C 128, U 16");
  reg(gemv_reg<M, 256, 8>, 256, "register C 256, U 8");
  reg(gemv_reg<M, 256, 16>, 256, "register C 256, U 16");
  auto cpa = [&](auto kern, int C, int R, int S, const char* what) {
    if (N % C || K % R) return;
    const int smem = S * R * C * 2 + (M * K + THREADS / (C / 8) * M * C) * 4;
    CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    report(what, bench.time([&] { kern<<<N / C, THREADS, smem>>>(x, w, y, K, N); }));
  };
  cpa(gemv_cpasync<M, 128, 32, 4>, 128, 32, 4, "cp.async C 128, [32, 128] x 4 stages");
  cpa(gemv_cpasync<M, 128, 64, 4>, 128, 64, 4, "cp.async C 128, [64, 128] x 4 stages");
  static auto encode = encode_tiled();
  auto tma = [&](auto kern, int C, int R, int S, const char* what) {
    if (N % C || K % R) return;
    CUtensorMap map;
    const cuuint64_t dims[2] = {(cuuint64_t)N, (cuuint64_t)K};
    const cuuint64_t strides[1] = {(cuuint64_t)N * 2};
    const cuuint32_t box[2] = {(cuuint32_t)C, (cuuint32_t)R};
    const cuuint32_t estr[2] = {1, 1};
    CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, w, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
      printf("  %-44s cuTensorMapEncodeTiled failed: %d\n", what, (int)r);
      return;
    }
    const int smem = S * R * C * 2 + 8 * S + (M * K + THREADS / (C / 8) * M * C) * 4;
    CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    report(what, bench.time([&] { kern<<<N / C, THREADS, smem>>>(map, x, y, K, N); }));
  };
  tma(gemv_tma<M, 128, 32, 4>, 128, 32, 4, "tma C 128, [32, 128] x 4 stages");
  tma(gemv_tma<M, 128, 64, 4>, 128, 64, 4, "tma C 128, [64, 128] x 4 stages");
  tma(gemv_tma<M, 128, 64, 8>, 128, 64, 8, "tma C 128, [64, 128] x 8 stages");
  tma(gemv_tma<M, 256, 32, 4>, 256, 32, 4, "tma C 256, [32, 256] x 4 stages");
  tma(gemv_tma<M, 64, 128, 4>, 64, 128, 4, "tma C 64, [128, 64] x 4 stages");
  CHECK(cudaFree(x));
  CHECK(cudaFree(w));
  CHECK(cudaFree(y));
  CHECK(cudaFree(ref));
  CHECK(cudaFree(sink));
}

int main() {
  Bench bench;
  {
    const long long bytes = 256ll << 20;
    char *s, *d;
    CHECK(cudaMalloc(&s, bytes));
    CHECK(cudaMalloc(&d, bytes));
    const float us = bench.time([&] { CHECK(cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice)); });
    printf("copy 256 MiB: %.1f us, %.2f TB/s (read + write)\n", us, 2.0 * bytes / us / 1e6);
    CHECK(cudaFree(s));
    CHECK(cudaFree(d));
  }
  shape<1>(bench, "Llama-3.2-1B LM head", 2048, 128256);
  shape<1>(bench, "Qwen2.5-0.5B LM head (896 x 151936)", 896, 151936);
  shape<1>(bench, "Llama-3.1-8B gate (4096 x 14336)", 4096, 14336);
  shape<1>(bench, "Llama-3.2-1B gate (2048 x 8192)", 2048, 8192);
  shape<4>(bench, "Llama-3.2-1B gate, 4 rows", 2048, 8192);
  return 0;
}
