// Microbenchmark of one all-to-all level of a persistent kernel (DECISIONS change 98): every
// block writes its slice of a vector of N floats, then every block reads the whole vector, L
// levels in a row, as a decode step's operators do (132 projection tasks each need all of the
// previous operator's output). Three ways to publish a level:
//   counter      : plain stores, a block barrier, one red.release.gpu on the level's counter; the
//                  readers' warp 0 polls it with ld.acquire.gpu (as mpk::wait_counters does: eight
//                  polls without sleeping, then __nanosleep(32)), a block barrier, then __ldcg
//                  of the vector;
//   counter-spin : the same without any sleep;
//   counter-window: four acquire polls in flight, one issued every ~200 cycles (a spin on
//                  clock64, not __nanosleep), each checked when it returns (change 96 without
//                  its sleeps);
//   flagged      : every value travels with its level number in one 64-bit word (value bits low,
//                  level high) stored with st.relaxed.gpu.u64; the readers poll the words
//                  themselves (ld.relaxed.gpu.u64) until every word carries the level: no
//                  counter, no release fence, no separate load of the data after the poll. A
//                  64-bit aligned scalar access is single-copy atomic, so a word that carries the
//                  level carries that level's value.
// Two buffers alternate: a block writes level l + 1 only after it has seen all of level l, which
// every block wrote only after it had read all of level l - 1 (the same buffer): no overwrite of
// a word still to be read. Every value read is checked against the value written.
// Build: nvcc -O3 -std=c++17 -arch=sm_90a -o level level.cu   (libcudart_static)
// Run:   ./level [N=1024] [levels=2000] [launches=7]; prints ns per level, median of the launches.
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

constexpr int THREADS = 256;

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_release(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned long long ld_relaxed64(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed64(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
// The value of element i at level l: exact in f32 for the sizes used.
__device__ __forceinline__ float value(int l, int i) { return (float)((l * 7 + i) & 0xffff); }

template <int MODE>  // 0: as wait_counters, 1: no sleep, 2: a window of four polls in flight
__global__ void __launch_bounds__(THREADS) counter_levels(float* buf, unsigned* counters, int n, int levels,
                                                          unsigned* errors) {
  const int b = blockIdx.x, nb = gridDim.x, tid = threadIdx.x;
  const int per = (n + nb - 1) / nb, lo = b * per, hi = min(n, lo + per);
  unsigned bad = 0;
  for (int l = 0; l < levels; ++l) {
    float* out = buf + (size_t)(l & 1) * n;
    for (int i = lo + tid; i < hi; i += THREADS) out[i] = value(l, i);
    __syncthreads();
    if (tid == 0) red_release(&counters[l], 1u);
    if (tid < 32 && MODE < 2) {
      for (unsigned polls = 0;; ++polls) {
        const bool done = tid != 0 || ld_acquire(&counters[l]) >= (unsigned)nb;
        if (__all_sync(0xffffffffu, done)) break;
        if (MODE == 0 && polls >= 8) __nanosleep(32);
      }
    } else if (tid == 0) {
      unsigned w[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        w[k] = ld_acquire(&counters[l]);
        const long long t = clock64();
        while (clock64() - t < 200) {
        }
      }
      for (bool done = false; !done;) {
#pragma unroll
        for (int k = 0; k < 4 && !done; ++k) {
          done = w[k] >= (unsigned)nb;
          if (!done) {
            w[k] = ld_acquire(&counters[l]);
            const long long t = clock64();
            while (clock64() - t < 200) {
            }
          }
        }
      }
    }
    __syncthreads();
    float s = 0.0f;
    for (int i = tid; i < n; i += THREADS) {
      const float v = __ldcg(out + i);
      bad += v != value(l, i);
      s += v;
    }
    if (s < 0.0f) bad += 1;  // keeps the loads
  }
  if (bad) atomicAdd(errors, bad);
}

__global__ void __launch_bounds__(THREADS) flagged_levels(unsigned long long* buf, int n, int levels, unsigned* errors) {
  const int b = blockIdx.x, nb = gridDim.x, tid = threadIdx.x;
  const int per = (n + nb - 1) / nb, lo = b * per, hi = min(n, lo + per);
  unsigned bad = 0;
  constexpr int MAXR = 16;  // words per thread held while polling (n <= MAXR * THREADS)
  for (int l = 0; l < levels; ++l) {
    unsigned long long* out = buf + (size_t)(l & 1) * n;
    const unsigned long long tag = (unsigned long long)(unsigned)(l + 1) << 32;
    for (int i = lo + tid; i < hi; i += THREADS) st_relaxed64(out + i, tag | __float_as_uint(value(l, i)));
    // Poll this thread's words until each carries level l (its flag l + 1: 0 is never a level).
    unsigned long long w[MAXR];
    unsigned pending = 0;
#pragma unroll
    for (int r = 0; r < MAXR; ++r) {
      const int i = tid + r * THREADS;
      if (i < n) {
        w[r] = ld_relaxed64(out + i);
        pending |= 1u << r;
      }
    }
    for (;;) {
#pragma unroll
      for (int r = 0; r < MAXR; ++r) {
        if (pending & (1u << r)) {
          if ((w[r] >> 32) == (unsigned)(l + 1)) {
            pending &= ~(1u << r);
          } else {
            w[r] = ld_relaxed64(out + tid + r * THREADS);
          }
        }
      }
      if (!pending) break;
    }
    float s = 0.0f;
#pragma unroll
    for (int r = 0; r < MAXR; ++r) {
      const int i = tid + r * THREADS;
      if (i < n) {
        const float v = __uint_as_float((unsigned)w[r]);
        bad += v != value(l, i);
        s += v;
      }
    }
    if (s < 0.0f) bad += 1;
    __syncthreads();  // the block's threads agree the level is complete, as a task's barrier would
  }
  if (bad) atomicAdd(errors, bad);
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 1024, levels = argc > 2 ? atoi(argv[2]) : 2000,
            launches = argc > 3 ? atoi(argv[3]) : 7;
  if (n < 1 || n > 16 * THREADS || levels < 1 || launches < 1) {
    fprintf(stderr, "usage: level [N 1..%d] [levels >= 1] [launches >= 1]\n", 16 * THREADS);
    return 2;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int nb = prop.multiProcessorCount;
  printf("device %s, %d blocks of %d threads, N = %d, %d levels per launch, median of %d launches\n", prop.name, nb,
         THREADS, n, levels, launches);
  float* fbuf;
  unsigned long long* wbuf;
  unsigned *counters, *errors;
  CK(cudaMalloc(&fbuf, 2 * n * sizeof(float)));
  CK(cudaMalloc(&wbuf, 2 * n * sizeof(unsigned long long)));
  CK(cudaMalloc(&counters, levels * sizeof(unsigned)));
  CK(cudaMalloc(&errors, sizeof(unsigned)));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  int status = 0;
  for (int variant = 0; variant < 4; ++variant) {
    const char* name = variant == 0 ? "counter" : variant == 1 ? "counter-spin" : variant == 2 ? "counter-window" : "flagged";
    std::vector<float> ns;
    unsigned total_errors = 0;
    for (int k = 0; k < launches + 1; ++k) {  // the first launch warms up, untimed
      CK(cudaMemset(counters, 0, levels * sizeof(unsigned)));
      CK(cudaMemset(wbuf, 0, 2 * n * sizeof(unsigned long long)));
      CK(cudaMemset(errors, 0, sizeof(unsigned)));
      CK(cudaEventRecord(e0));
      if (variant == 0) counter_levels<0><<<nb, THREADS>>>(fbuf, counters, n, levels, errors);
      if (variant == 1) counter_levels<1><<<nb, THREADS>>>(fbuf, counters, n, levels, errors);
      if (variant == 2) counter_levels<2><<<nb, THREADS>>>(fbuf, counters, n, levels, errors);
      if (variant == 3) flagged_levels<<<nb, THREADS>>>(wbuf, n, levels, errors);
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      CK(cudaGetLastError());
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      unsigned err;
      CK(cudaMemcpy(&err, errors, sizeof(unsigned), cudaMemcpyDeviceToHost));
      total_errors += err;
      if (k > 0) ns.push_back(ms * 1e6f / levels);
    }
    std::sort(ns.begin(), ns.end());
    printf("%-15s %8.0f ns per level (min %.0f, max %.0f), %u wrong values\n", name, ns[ns.size() / 2], ns.front(),
           ns.back(), total_errors);
    if (total_errors) status = 1;
  }
  return status;
}
