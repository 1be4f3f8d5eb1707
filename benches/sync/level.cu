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
//   flagged-backoff: the same, the words still pending re-polled only every 400 cycles (less
//                  traffic on the lines being written);
//   hybrid       : tagged words as `flagged`, then a block barrier and one red.relaxed.gpu on the
//                  level's counter (no release fence: the producer does not wait for its stores'
//                  acknowledgements); the readers' warp 0 polls the counter (ld.relaxed), a block
//                  barrier, then every thread loads its words and re-polls any the counter
//                  overtook (the tags, not the counter, make the values sound).
// Session 43 measured the first four on an H100 (benches/results/s43/a/level-*.txt): flagged was
// slower than counter (2.67 against 1.73 µs at N = 1024).
// Two buffers alternate: a block writes level l + 1 only after it has seen all of level l, which
// every block wrote only after it had read all of level l - 1 (the same buffer): no overwrite of
// a word still to be read. Every value read is checked against the value written.
// With --gemv each level is also a projection as a decode step's are: after it has the whole
// vector, a block multiplies it by its own slice of a bf16 weight matrix [N, N] (N / blocks
// columns, stored slice by slice, 16 KB a block at N = 1024, 64 KB at 2048, 144 KB at 3072; the
// levels walk a 256 MiB matrix array, so the weights come from DRAM, not L2) and the products
// feed the next level's values (without changing them: the check stays exact).
// Build: nvcc -O3 -std=c++17 -arch=sm_90a -o level level.cu   (libcudart_static)
// Run:   ./level [N=1024] [levels=2000] [launches=7] [--gemv]; prints ns per level, median of the
//        launches.
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <string>
#include <cuda_runtime.h>

#include "sync.cuh"

constexpr int THREADS = 256;

__device__ __forceinline__ unsigned ld_relaxed32(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_relaxed(unsigned* p, unsigned v) {
  asm volatile("red.relaxed.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned long long ld_relaxed64(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed64(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
// Busy-waits about `cycles` clock cycles (spaces the window's polls without __nanosleep).
__device__ __forceinline__ void spin(long long cycles) {
  const long long t = clock64();
  while (clock64() - t < cycles) {
  }
}
// The value of element i at level l: exact in f32 for the sizes used.
__device__ __forceinline__ float value(int l, int i) { return (float)((l * 7 + i) & 0xffff); }

constexpr int MAXR = 16;  // vector elements per thread (n <= MAXR * THREADS)
constexpr size_t WEIGHT_BYTES = 256ull << 20;

// out[c] (c < PER) of the block: sum over rows j of x[j] * w[j][c], x[j] held by thread j % THREADS
// in xr[j / THREADS]; w the block's slice [n][PER] of bf16. Returns, to thread c < PER, its
// column's sum (others get 0). `red` holds THREADS / 32 * PER floats.
template <int PER>
__device__ __forceinline__ float gemv_slice(const float (&xr)[MAXR], const unsigned short* w, int n, float* red) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  float acc[PER];
#pragma unroll
  for (int c = 0; c < PER; ++c) acc[c] = 0.0f;
  // Rows in groups of eight: each group's loads all issued before its first use.
  constexpr int GROUP = 8;
#pragma unroll
  for (int r0 = 0; r0 < MAXR; r0 += GROUP) {
    if (tid + r0 * THREADS >= n) break;
    uint4 raw[GROUP][PER / 8];
#pragma unroll
    for (int r = 0; r < GROUP; ++r) {
      const int j = tid + (r0 + r) * THREADS;
      if (j < n) {
#pragma unroll
        for (int q = 0; q < PER / 8; ++q) raw[r][q] = __ldcs(reinterpret_cast<const uint4*>(w + (size_t)j * PER) + q);
      }
    }
#pragma unroll
    for (int r = 0; r < GROUP; ++r) {
      const int j = tid + (r0 + r) * THREADS;
      if (j < n) {
#pragma unroll
        for (int q = 0; q < PER / 8; ++q) {
          const unsigned u[4] = {raw[r][q].x, raw[r][q].y, raw[r][q].z, raw[r][q].w};
#pragma unroll
          for (int h = 0; h < 4; ++h) {
            acc[q * 8 + 2 * h] += xr[r0 + r] * __uint_as_float(u[h] << 16);
            acc[q * 8 + 2 * h + 1] += xr[r0 + r] * __uint_as_float(u[h] & 0xffff0000u);
          }
        }
      }
    }
  }
#pragma unroll
  for (int c = 0; c < PER; ++c) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc[c] += __shfl_xor_sync(0xffffffffu, acc[c], o);
  }
  if (lane == 0) {
#pragma unroll
    for (int c = 0; c < PER; ++c) red[warp * PER + c] = acc[c];
  }
  __syncthreads();
  float t = 0.0f;
  if (tid < PER) {
    for (int k = 0; k < THREADS / 32; ++k) t += red[k * PER + tid];
  }
  __syncthreads();
  return t;
}
// The weights of level l for block b: slice b of the level's matrix, the levels walking the array.
template <int PER>
__device__ __forceinline__ const unsigned short* slice_of(const unsigned short* weights, int l, int b, int nb, int n) {
  const size_t per_level = (size_t)nb * n * PER, levels = WEIGHT_BYTES / 2 / per_level;
  return weights + (size_t)(l % levels) * per_level + (size_t)b * n * PER;
}
// A product that never takes the magic value (weights in [0, 2^-10)), so it adds 0 to the next
// level's values while keeping the loads and the arithmetic.
__device__ __forceinline__ float nudge(float dot) { return dot == 1.0e30f ? 1.0f : 0.0f; }

// MODE 0: as wait_counters, 1: no sleep, 2: a window of four polls in flight. PER > 0: a
// projection of PER columns a block after every level (per = PER: n = PER * blocks).
template <int MODE, int PER>
__global__ void __launch_bounds__(THREADS) counter_levels(float* buf, unsigned* counters, int n, int levels,
                                                          unsigned* errors, const unsigned short* weights) {
  __shared__ float red[THREADS / 32 * (PER > 0 ? PER : 1)];
  const int b = blockIdx.x, nb = gridDim.x, tid = threadIdx.x;
  const int per = (n + nb - 1) / nb, lo = b * per, hi = min(n, lo + per);
  unsigned bad = 0;
  float dot = 0.0f;
  for (int l = 0; l < levels; ++l) {
    float* out = buf + (size_t)(l & 1) * n;
    if (PER > 0) {
      if (tid < PER && tid < hi - lo) out[lo + tid] = value(l, lo + tid) + nudge(dot);
    } else {
      for (int i = lo + tid; i < hi; i += THREADS) out[i] = value(l, i);
    }
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
        spin(200);
      }
      for (bool done = false; !done;) {
#pragma unroll
        for (int k = 0; k < 4 && !done; ++k) {
          done = w[k] >= (unsigned)nb;
          if (!done) {
            w[k] = ld_acquire(&counters[l]);
            spin(200);
          }
        }
      }
    }
    __syncthreads();
    float xr[MAXR];
    float s = 0.0f;
#pragma unroll
    for (int r = 0; r < MAXR; ++r) {
      const int i = tid + r * THREADS;
      xr[r] = 0.0f;
      if (i < n) {
        xr[r] = __ldcg(out + i);
        bad += xr[r] != value(l, i);
        s += xr[r];
      }
    }
    if (s < 0.0f) bad += 1;  // keeps the loads
    if constexpr (PER > 0) dot = gemv_slice<PER>(xr, slice_of<PER>(weights, l, b, nb, n), n, red);
  }
  if (bad) atomicAdd(errors, bad);
}

// HYBRID: the producers store tagged words as `flagged` does, then (block barrier) add 1 to the
// level's counter with a relaxed red (no release fence, so no wait for the stores'
// acknowledgements); the readers' warp 0 polls the counter with relaxed loads, then every thread
// loads its tagged words and re-polls the few the counter overtook. BACKOFF (cycles, 0: none):
// the pending words are re-polled only every BACKOFF cycles (less traffic on the hot lines).
template <int PER, bool HYBRID, int BACKOFF>
__global__ void __launch_bounds__(THREADS) flagged_levels(unsigned long long* buf, int n, int levels, unsigned* errors,
                                                          const unsigned short* weights, unsigned* counters) {
  __shared__ float red[THREADS / 32 * (PER > 0 ? PER : 1)];
  const int b = blockIdx.x, nb = gridDim.x, tid = threadIdx.x;
  const int per = (n + nb - 1) / nb, lo = b * per, hi = min(n, lo + per);
  unsigned bad = 0;
  float dot = 0.0f;
  for (int l = 0; l < levels; ++l) {
    unsigned long long* out = buf + (size_t)(l & 1) * n;
    const unsigned long long tag = (unsigned long long)(unsigned)(l + 1) << 32;
    if (PER > 0) {
      if (tid < PER && tid < hi - lo) st_relaxed64(out + lo + tid, tag | __float_as_uint(value(l, lo + tid) + nudge(dot)));
    } else {
      for (int i = lo + tid; i < hi; i += THREADS) st_relaxed64(out + i, tag | __float_as_uint(value(l, i)));
    }
    if constexpr (HYBRID) {
      __syncthreads();
      if (tid == 0) red_relaxed(&counters[l], 1u);
      if (tid < 32) {
        for (;;) {
          const bool done = tid != 0 || ld_relaxed32(&counters[l]) >= (unsigned)nb;
          if (__all_sync(0xffffffffu, done)) break;
        }
      }
      __syncthreads();
    }
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
    for (bool first = true;; first = false) {
      if (BACKOFF > 0 && !first) spin(BACKOFF);
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
    float xr[MAXR];
    float s = 0.0f;
#pragma unroll
    for (int r = 0; r < MAXR; ++r) {
      const int i = tid + r * THREADS;
      xr[r] = 0.0f;
      if (i < n) {
        xr[r] = __uint_as_float((unsigned)w[r]);
        bad += xr[r] != value(l, i);
        s += xr[r];
      }
    }
    if (s < 0.0f) bad += 1;
    __syncthreads();  // the block's threads agree the level is complete, as a task's barrier would
    if constexpr (PER > 0) dot = gemv_slice<PER>(xr, slice_of<PER>(weights, l, b, nb, n), n, red);
  }
  if (bad) atomicAdd(errors, bad);
}

__global__ void fill_weights(unsigned short* w, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u;
    h ^= h >> 15;
    // bf16 of a value in [0, 2^-10): exponent below 117, any mantissa.
    w[i] = (unsigned short)(((100u + (h & 15u)) << 7) | ((h >> 4) & 127u));
  }
}

template <int PER>
void launch(int variant, int nb, float* fbuf, unsigned long long* wbuf, unsigned* counters, int n, int levels,
            unsigned* errors, const unsigned short* weights) {
  if (variant == 0) counter_levels<0, PER><<<nb, THREADS>>>(fbuf, counters, n, levels, errors, weights);
  if (variant == 1) counter_levels<1, PER><<<nb, THREADS>>>(fbuf, counters, n, levels, errors, weights);
  if (variant == 2) counter_levels<2, PER><<<nb, THREADS>>>(fbuf, counters, n, levels, errors, weights);
  if (variant == 3) flagged_levels<PER, false, 0><<<nb, THREADS>>>(wbuf, n, levels, errors, weights, counters);
  if (variant == 4) flagged_levels<PER, false, 400><<<nb, THREADS>>>(wbuf, n, levels, errors, weights, counters);
  if (variant == 5) flagged_levels<PER, true, 0><<<nb, THREADS>>>(wbuf, n, levels, errors, weights, counters);
}

int main(int argc, char** argv) {
  bool gemv = false;
  int pos[3] = {1024, 2000, 7}, np = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--gemv") {
      gemv = true;
    } else if (np < 3) {
      pos[np++] = atoi(argv[i]);
    } else {
      np = 4;
    }
  }
  const int n = pos[0], levels = pos[1], launches = pos[2];
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int nb = prop.multiProcessorCount;
  const int per = (n + nb - 1) / nb, PER = gemv ? (per + 7) / 8 * 8 : 0;
  if (np > 3 || n < 1 || n > MAXR * THREADS || levels < 1 || launches < 1 || PER > 32) {
    fprintf(stderr, "usage: level [N 1..%d, with --gemv at most 32 columns a block] [levels >= 1] [launches >= 1] [--gemv]\n",
            MAXR * THREADS);
    return 2;
  }
  printf("device %s, %d blocks of %d threads, N = %d, %d levels per launch, median of %d launches", prop.name, nb,
         THREADS, n, levels, launches);
  if (gemv) printf(", a projection of %d columns (%zu KB of bf16 weights) a block per level", PER, (size_t)n * PER * 2 / 1024);
  printf("\n");
  float* fbuf;
  unsigned long long* wbuf;
  unsigned short* weights = nullptr;
  unsigned *counters, *errors;
  CK(cudaMalloc(&fbuf, 2 * n * sizeof(float)));
  CK(cudaMalloc(&wbuf, 2 * n * sizeof(unsigned long long)));
  CK(cudaMalloc(&counters, levels * sizeof(unsigned)));
  CK(cudaMalloc(&errors, sizeof(unsigned)));
  if (gemv) {
    CK(cudaMalloc(&weights, WEIGHT_BYTES));
    fill_weights<<<1024, 256>>>(weights, WEIGHT_BYTES / 2);
    CK(cudaDeviceSynchronize());
  }
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  int status = 0;
  const char* names[] = {"counter", "counter-spin", "counter-window", "flagged", "flagged-backoff", "hybrid"};
  for (int variant = 0; variant < 6; ++variant) {
    const char* name = names[variant];
    std::vector<float> ns;
    unsigned total_errors = 0;
    for (int k = 0; k < launches + 1; ++k) {  // the first launch warms up, untimed
      CK(cudaMemset(counters, 0, levels * sizeof(unsigned)));
      CK(cudaMemset(wbuf, 0, 2 * n * sizeof(unsigned long long)));
      CK(cudaMemset(errors, 0, sizeof(unsigned)));
      CK(cudaEventRecord(e0));
      switch (PER) {
        case 0: launch<0>(variant, nb, fbuf, wbuf, counters, n, levels, errors, weights); break;
        case 8: launch<8>(variant, nb, fbuf, wbuf, counters, n, levels, errors, weights); break;
        case 16: launch<16>(variant, nb, fbuf, wbuf, counters, n, levels, errors, weights); break;
        case 24: launch<24>(variant, nb, fbuf, wbuf, counters, n, levels, errors, weights); break;
        default: launch<32>(variant, nb, fbuf, wbuf, counters, n, levels, errors, weights); break;
      }
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
