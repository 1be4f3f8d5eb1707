// Microbenchmark of the split-KV merge of a decode attention (issue 18; DECISIONS change 100):
// what merging the chunks' partials costs between the chunks and the operator after them, done
// as the megakernel does it now (a global ticket and a merging block) or through thread-block
// clusters and distributed shared memory. 128 persistent blocks of 256 threads run L iterations;
// in each, every block (group h, chunk c) produces a partial (o over G heads of D = 128, m, l) —
// optionally after loading its chunk's K and V rows from DRAM (--kv) — the partials of a group
// are merged into G merged heads, and then every block waits for the whole merged vector
// (H · G · D floats) on a counter and reads it, as the output projection's tasks do. Variants:
//   level      : no merge — each block writes a 16-float slice of the vector itself (the cost of
//                the counter level alone, level.cu's `counter` at N = 2048);
//   ticket16   : 8 groups (a KV head each) × 16 chunks, G = 2 — as the Qwen3 decoder: partials
//                to global memory, a block barrier, thread 0's __threadfence and atomicAdd on the
//                group's ticket; the block that takes the group's last ticket fences, reads the
//                16 partials with __ldcg, merges and writes the group's heads; every block
//                signals the counter (red.release.gpu) after its part;
//   ticket8    : 16 groups (a query head each) × 8 chunks, G = 1 — the same protocol;
//   cluster8   : 16 groups × 8 chunks, G = 1, a group per cluster of 8 blocks: every block
//                writes its partial into the cluster leader's shared memory (st to a
//                map_shared_rank address), barrier.cluster.arrive.release; the leader waits
//                (barrier.cluster.wait.acquire), merges from its shared memory, writes the heads
//                and signals; the others signal at once and wait on the cluster barrier only
//                before their next partial;
//   cluster16  : 8 groups × 16 chunks, G = 2 in clusters of 16 (non-portable size; skipped when
//                the device cannot hold 8 such clusters at once);
//   pergroup16 : 8 groups × 16 chunks, G = 2, no merging block: partials to global memory and a
//                signal; every consumer waits for all of them and merges one group's 16 partials
//                itself (an output projection split by heads, each task needing one group's
//                heads: the merge folded into the consumer's first round);
//   chain, chain-split: the attention and the two operators after it (see `chain` below), with
//                the ticket merge, and with the per-group merge whose sum over the groups the
//                third operator's loads carry.
// With --kv a chunk first loads its K and V rows (512 keys per group: 32 keys of 2 · 256 bytes a
// block with 16 chunks, 64 with 8; a 16-group variant's two query heads of a KV head read the same
// rows) from a 1 GiB array walked by iteration, so they come from DRAM as a decode step's do.
// Values: partial o = (3 l + 5 c + 7 g + i) mod 256, m = 0, l = 1, so the merged head is the mean
// over the chunks (exact in f32); every value a block reads is checked.
// Build: nvcc -O3 -std=c++17 -arch=sm_90a -o merge merge.cu
// Run:   ./merge [iterations=2000] [launches=7] [--kv]; prints ns per iteration, median of the
//        launches.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sync.cuh"

namespace cg = cooperative_groups;

constexpr int THREADS = 256;
constexpr int D = 128;
constexpr int NB = 128;            // blocks (workers)
constexpr int VEC = 2048;          // merged vector: H · G · D = 2048 in every variant
constexpr int KEYS = 512;          // keys per group at the step's position
constexpr int KV_HEADS = 8;
constexpr size_t KV_BYTES = 1ull << 30;
constexpr int DYN_SMEM = 120 * 1024;  // one block per SM, as the megakernel's workers

__device__ __forceinline__ void cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait_acquire() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ float part_value(int l, int c, int g, int i) { return (float)((3 * l + 5 * c + 7 * g + i) & 255); }
// The merged value: the mean over C chunks of part_value (a sum of integers below 2^24, divided
// by a power of two: exact).
__device__ __forceinline__ float merged_value(int l, int C, int g, int i) {
  float s = 0.0f;
  for (int c = 0; c < C; ++c) s += part_value(l, c, g, i);
  return s / (float)C;
}
// Zero unless the loaded bytes summed to an impossible value: keeps the K/V loads alive.
__device__ __forceinline__ float nudge(unsigned s) { return s == 0xdeadbeefu ? 1.0f : 0.0f; }

// Loads block b's chunk of K and V rows (group h of H, chunk c of C) for iteration l.
__device__ __forceinline__ unsigned load_kv(const uint4* kv, int l, int h, int H, int c, int C) {
  const int keys = KEYS / C;
  const size_t bytes = (size_t)keys * D * 2 * 2;  // K and V rows, bf16
  const int kvh = h * KV_HEADS / H;
  const size_t per_iter = (size_t)KV_HEADS * KEYS * D * 2 * 2;
  const size_t base = ((size_t)l * per_iter) % (KV_BYTES - per_iter) + (size_t)kvh * KEYS * D * 4 + (size_t)c * bytes;
  const uint4* p = kv + base / 16;
  unsigned s = 0;
  for (size_t k = threadIdx.x; k < bytes / 16; k += THREADS) {
    const uint4 v = __ldcg(p + k);
    s += v.x ^ v.y ^ v.z ^ v.w;
  }
  return s;
}

// A task's dependency wait as mpk::wait_counters does it: warp 0 polls the counter until it
// reaches n (eight polls, then __nanosleep(32) between them), then a block barrier.
__device__ __forceinline__ void wait_count(unsigned* counter, unsigned n) {
  const int tid = threadIdx.x;
  if (tid < 32) {
    for (unsigned polls = 0;; ++polls) {
      const bool done = tid != 0 || ld_acquire(counter) >= n;
      if (__all_sync(0xffffffffu, done)) break;
      if (polls >= 8) __nanosleep(32);
    }
  }
  __syncthreads();
}

// Element (g, i) of the merge of one group's C partials (part [C][G][D + 2], written by other
// blocks: read through L2), every load in one round: Σ_c w_c o_c[i] / Σ_c w_c with
// w_c = l_c exp(m_c − max m).
template <int C, int G>
__device__ __forceinline__ float merge_partials(const float* grp, int g, int i) {
  float mk[C], lk[C], ok[C];
#pragma unroll
  for (int k = 0; k < C; ++k) {
    mk[k] = __ldcg(grp + (k * G + g) * (D + 2) + D);
    lk[k] = __ldcg(grp + (k * G + g) * (D + 2) + D + 1);
    ok[k] = __ldcg(grp + (k * G + g) * (D + 2) + i);
  }
  float m = -INFINITY, sum = 0.0f, o = 0.0f;
#pragma unroll
  for (int k = 0; k < C; ++k) m = fmaxf(m, mk[k]);
#pragma unroll
  for (int k = 0; k < C; ++k) {
    const float w = __expf(mk[k] - m) * lk[k];
    sum += w;
    o += w * ok[k];
  }
  return o / sum;
}

// The consumer's side of every variant: waits for the iteration's counter to reach NB, then
// every thread reads its share of the merged vector and checks it.
__device__ __forceinline__ unsigned wait_and_read(const float* merged, unsigned* counter, int l, int C, int G) {
  const int tid = threadIdx.x;
  wait_count(counter, NB);
  unsigned bad = 0;
  float s = 0.0f;
#pragma unroll
  for (int r = 0; r < VEC / THREADS; ++r) {
    const int e = tid + r * THREADS;
    const int i = e % D, g = (e / D) % G;
    const float v = __ldcg(merged + e);
    bad += v != merged_value(l, C, g, i);
    s += v;
  }
  if (s < 0.0f) bad += 1;
  return bad;
}

// MODE 0: level (no merge); 1: ticket; 2: per-group merge by the consumers. H groups × C
// chunks, G heads a block.
template <int MODE, int H, int C, int G>
__global__ void __launch_bounds__(THREADS, 1)
    global_merge(float* merged2, float* part, unsigned* tickets, unsigned* counters, int iters, unsigned* errors,
                 const uint4* kv, int use_kv) {
  static_assert(H * C == NB && H * G * D == VEC, "shape");
  __shared__ int last;
  const int b = blockIdx.x, tid = threadIdx.x, h = b / C, c = b % C;
  unsigned bad = 0;
  for (int l = 0; l < iters; ++l) {
    float* merged = merged2 + (size_t)(l & 1) * VEC;
    const float extra = use_kv ? nudge(load_kv(kv, l, h, H, c, C)) : 0.0f;
    if (MODE == 0) {
      // Each block writes its own slice of the merged vector: no merge at all.
      if (tid < VEC / NB) {
        const int e = b * (VEC / NB) + tid;
        merged[e] = merged_value(l, C, (e / D) % G, e % D) + extra;
      }
      __syncthreads();
    } else {
      const int g = tid / D, i = tid % D;
      float* mine = part + (size_t)(l & 1) * NB * G * (D + 2) + (size_t)(h * C + c) * G * (D + 2);
      if (g < G) {
        mine[g * (D + 2) + i] = part_value(l, c, g, i) + extra;
        if (i == 0) {
          mine[g * (D + 2) + D] = 0.0f;      // m
          mine[g * (D + 2) + D + 1] = 1.0f;  // l
        }
      }
      __syncthreads();
      if (MODE == 2) {
        if (tid == 0) red_release(&counters[l], 1u);
        // The consumer: all partials written, then one group's merged by this block.
        wait_count(&counters[l], NB);
        if (g < G) {
          const int want = b % H;
          const float* grp = part + (size_t)(l & 1) * NB * G * (D + 2) + (size_t)want * C * G * (D + 2);
          bad += merge_partials<C, G>(grp, g, i) != merged_value(l, C, g, i);
        }
        __syncthreads();
        continue;
      }
      if (tid == 0) {
        __threadfence();
        last = atomicAdd(&tickets[h], 1u) % C == C - 1;
        if (last) __threadfence();
      }
      __syncthreads();
      if (last && g < G) {
        const float* grp = part + (size_t)(l & 1) * NB * G * (D + 2) + (size_t)h * C * G * (D + 2);
        float m = -INFINITY;
        for (int k = 0; k < C; ++k) m = fmaxf(m, __ldcg(grp + (k * G + g) * (D + 2) + D));
        float sum = 0.0f, o = 0.0f;
        for (int k = 0; k < C; ++k) {
          const float* p = grp + (k * G + g) * (D + 2);
          const float w = __expf(__ldcg(p + D) - m) * __ldcg(p + D + 1);
          sum += w;
          o += w * __ldcg(p + i);
        }
        merged[(h * G + g) * D + i] = o / sum;
      }
      __syncthreads();
    }
    if (tid == 0) red_release(&counters[l], 1u);
    bad += wait_and_read(merged, &counters[l], l, C, G);
  }
  if (bad) atomicAdd(errors, bad);
}

// Clusters of C blocks, one group each: partials into the leader's shared memory.
template <int H, int C, int G>
__global__ void __launch_bounds__(THREADS, 1)
    cluster_merge(float* merged2, unsigned* counters, int iters, unsigned* errors, const uint4* kv, int use_kv) {
  static_assert(H * C == NB && H * G * D == VEC, "shape");
  __shared__ float sm[C * G * (D + 2)];
  cg::cluster_group cluster = cg::this_cluster();
  const int b = blockIdx.x, tid = threadIdx.x, h = b / C, c = (int)cluster.block_rank();
  float* lead = cluster.map_shared_rank(sm, 0);
  unsigned bad = 0;
  for (int l = 0; l < iters; ++l) {
    float* merged = merged2 + (size_t)(l & 1) * VEC;
    const float extra = use_kv ? nudge(load_kv(kv, l, h, H, c, C)) : 0.0f;
    // The previous iteration's cluster barrier: the leader has merged what was written there.
    if (l > 0 && c != 0) cluster_wait_acquire();
    const int g = tid / D, i = tid % D;
    if (g < G) {
      float* mine = lead + (c * G + g) * (D + 2);
      mine[i] = part_value(l, c, g, i) + extra;
      if (i == 0) {
        mine[D] = 0.0f;
        mine[D + 1] = 1.0f;
      }
    }
    cluster_arrive_release();
    if (c == 0) {
      cluster_wait_acquire();
      if (g < G) {
        float m = -INFINITY;
        for (int k = 0; k < C; ++k) m = fmaxf(m, sm[(k * G + g) * (D + 2) + D]);
        float sum = 0.0f, o = 0.0f;
        for (int k = 0; k < C; ++k) {
          const float* p = sm + (k * G + g) * (D + 2);
          const float w = __expf(p[D] - m) * p[D + 1];
          sum += w;
          o += w * p[i];
        }
        merged[(h * G + g) * D + i] = o / sum;
      }
    }
    __syncthreads();
    if (tid == 0) red_release(&counters[l], 1u);
    bad += wait_and_read(merged, &counters[l], l, C, G);
  }
  // No block leaves while another may still write into its shared memory.
  if (c != 0) cluster_wait_acquire();
  cluster.sync();
  if (bad) atomicAdd(errors, bad);
}

// The attention and the two operators after it, 8 groups × 16 chunks, G = 2 (Qwen3's shape):
// stage A the chunks' partials; stage B the output projection's 128 tasks (no weights: each
// writes its share of the projection's output after reading its input); stage C the next
// operator's tasks reading the projection's 1024 outputs. SPLIT false: the merge by ticket in
// stage A (as ticket16), stage B reading the merged heads and writing 8 outputs a task, stage C
// reading 1024 values. SPLIT true: no merging block; stage B's task (group b mod 8, column block
// b / 8) merges its group's 16 partials and writes 64 partial sums of its group, stage C reads the
// 8 groups' partial sums (8 × 1024 values) and adds them — the per-group design with the sum over
// the groups folded into the next operator's loads.
__device__ __forceinline__ float y_value(int l, int g, int j) { return (float)((l + j + g) & 15); }
template <bool SPLIT>
__global__ void __launch_bounds__(THREADS, 1)
    chain(float* merged2, float* part, float* y2, unsigned* tickets, unsigned* counters, int iters, unsigned* errors,
          const uint4* kv, int use_kv) {
  constexpr int H = 8, C = 16, G = 2, OUT = 1024;
  __shared__ int last;
  const int b = blockIdx.x, tid = threadIdx.x, h = b / C, c = b % C;
  const int g = tid / D, i = tid % D;
  unsigned bad = 0;
  for (int l = 0; l < iters; ++l) {
    float* merged = merged2 + (size_t)(l & 1) * VEC;
    float* parts = part + (size_t)(l & 1) * NB * G * (D + 2);
    float* y = y2 + (size_t)(l & 1) * H * OUT;
    unsigned* cnt = counters + 2 * (size_t)l;
    // Stage A: the chunk's partial.
    const float extra = use_kv ? nudge(load_kv(kv, l, h, H, c, C)) : 0.0f;
    float* mine = parts + (size_t)(h * C + c) * G * (D + 2);
    mine[g * (D + 2) + i] = part_value(l, c, g, i) + extra;
    if (i == 0) {
      mine[g * (D + 2) + D] = 0.0f;
      mine[g * (D + 2) + D + 1] = 1.0f;
    }
    __syncthreads();
    if (!SPLIT) {
      if (tid == 0) {
        __threadfence();
        last = atomicAdd(&tickets[h], 1u) % C == C - 1;
        if (last) __threadfence();
      }
      __syncthreads();
      if (last) merged[(h * G + g) * D + i] = merge_partials<C, G>(parts + (size_t)h * C * G * (D + 2), g, i);
      __syncthreads();
    }
    if (tid == 0) red_release(&cnt[0], 1u);
    // Stage B: the output projection's task.
    wait_count(&cnt[0], NB);
    if (!SPLIT) {
#pragma unroll
      for (int r = 0; r < VEC / THREADS; ++r) {
        const int e = tid + r * THREADS;
        bad += __ldcg(merged + e) != merged_value(l, C, (e / D) % G, e % D);
      }
      if (tid < OUT / NB) {
        const int j = b * (OUT / NB) + tid;
        float v = 0.0f;
        for (int k = 0; k < H; ++k) v += y_value(l, k, j);
        y[j] = v;
      }
    } else {
      const int want = b % H, cb = b / H;
      bad += merge_partials<C, G>(parts + (size_t)want * C * G * (D + 2), g, i) != merged_value(l, C, g, i);
      if (tid < OUT / (NB / H)) {
        const int j = cb * (OUT / (NB / H)) + tid;
        y[want * OUT + j] = y_value(l, want, j);
      }
    }
    __syncthreads();
    if (tid == 0) red_release(&cnt[1], 1u);
    // Stage C: the next operator's task reads the projection's output.
    wait_count(&cnt[1], NB);
    float s = 0.0f;
#pragma unroll
    for (int r = 0; r < OUT / THREADS; ++r) {
      const int j = tid + r * THREADS;
      float v = 0.0f, want = 0.0f;
      if (SPLIT) {
        float yk[H];
#pragma unroll
        for (int k = 0; k < H; ++k) yk[k] = __ldcg(y + k * OUT + j);
#pragma unroll
        for (int k = 0; k < H; ++k) v += yk[k];
      } else {
        v = __ldcg(y + j);
      }
      for (int k = 0; k < H; ++k) want += y_value(l, k, j);
      bad += v != want;
      s += v;
    }
    if (s < 0.0f) bad += 1;
  }
  if (bad) atomicAdd(errors, bad);
}

struct Buffers {
  float* merged;
  float* y;
  float* part;
  unsigned* tickets;
  unsigned* counters;
  unsigned* errors;
  uint4* kv;
};

// Launches variant v once; returns false when the device cannot run it.
bool launch(int v, const Buffers& bu, int iters, int use_kv) {
  if (v == 6 || v == 7) {
    if (v == 6) chain<false><<<NB, THREADS, DYN_SMEM>>>(bu.merged, bu.part, bu.y, bu.tickets, bu.counters, iters, bu.errors, bu.kv, use_kv);
    if (v == 7) chain<true><<<NB, THREADS, DYN_SMEM>>>(bu.merged, bu.part, bu.y, bu.tickets, bu.counters, iters, bu.errors, bu.kv, use_kv);
    return true;
  }
  if (v == 5) {
    global_merge<2, 8, 16, 2><<<NB, THREADS, DYN_SMEM>>>(bu.merged, bu.part, bu.tickets, bu.counters, iters, bu.errors, bu.kv, use_kv);
    return true;
  }
  if (v <= 2) {
    if (v == 0) global_merge<0, 8, 16, 2><<<NB, THREADS, DYN_SMEM>>>(bu.merged, bu.part, bu.tickets, bu.counters, iters, bu.errors, bu.kv, use_kv);
    if (v == 1) global_merge<1, 8, 16, 2><<<NB, THREADS, DYN_SMEM>>>(bu.merged, bu.part, bu.tickets, bu.counters, iters, bu.errors, bu.kv, use_kv);
    if (v == 2) global_merge<1, 16, 8, 1><<<NB, THREADS, DYN_SMEM>>>(bu.merged, bu.part, bu.tickets, bu.counters, iters, bu.errors, bu.kv, use_kv);
    return true;
  }
  const int csize = v == 3 ? 8 : 16;
  void (*kernel)(float*, unsigned*, int, unsigned*, const uint4*, int) =
      v == 3 ? cluster_merge<16, 8, 1> : cluster_merge<8, 16, 2>;
  if (csize > 8) CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, DYN_SMEM));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(NB);
  cfg.blockDim = dim3(THREADS);
  cfg.dynamicSmemBytes = DYN_SMEM;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = csize;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  // Cooperative, as the megakernel's launch is: whether the driver takes both attributes at once
  // is part of what this measures (a refusal is reported and the launch made without it).
  attr[1].id = cudaLaunchAttributeCooperative;
  attr[1].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 2;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, (void*)kernel, &cfg) != cudaSuccess || clusters < NB / csize) {
    cudaGetLastError();
    printf("%-10s skipped: the device holds %d clusters of %d at once, %d needed\n", v == 3 ? "cluster8" : "cluster16",
           clusters, csize, NB / csize);
    return false;
  }
  static bool told_of[2] = {false, false};
  bool& told = told_of[csize > 8];
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, bu.merged, bu.counters, iters, bu.errors, (const uint4*)bu.kv, use_kv);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (!told) printf("cluster%d: a cooperative cluster launch was refused (%s); launched without cooperative\n", csize, cudaGetErrorString(e));
    told = true;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, kernel, bu.merged, bu.counters, iters, bu.errors, (const uint4*)bu.kv, use_kv));
  } else if (!told) {
    printf("cluster%d: launched cooperative, %d clusters of %d resident at most\n", csize, clusters, csize);
    told = true;
  }
  return true;
}

__global__ void fill(uint4* p, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const unsigned h = (unsigned)i * 2654435761u;
    p[i] = make_uint4(h, h >> 3, h >> 7, h >> 11);
  }
}

int main(int argc, char** argv) {
  int pos[2] = {2000, 7}, np = 0, use_kv = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--kv") {
      use_kv = 1;
    } else if (np < 2) {
      pos[np++] = atoi(argv[i]);
    }
  }
  const int iters = pos[0], launches = pos[1];
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  Buffers bu;
  CK(cudaMalloc(&bu.merged, 2 * VEC * sizeof(float)));
  CK(cudaMalloc(&bu.part, (size_t)2 * NB * 2 * (D + 2) * sizeof(float)));
  CK(cudaMalloc(&bu.tickets, 64 * sizeof(unsigned)));
  CK(cudaMalloc(&bu.counters, 2 * (size_t)iters * sizeof(unsigned)));
  CK(cudaMalloc(&bu.y, 2 * 8 * 1024 * sizeof(float)));
  CK(cudaMalloc(&bu.errors, sizeof(unsigned)));
  CK(cudaMalloc(&bu.kv, KV_BYTES));
  fill<<<1024, 256>>>(bu.kv, KV_BYTES / 16);
  for (auto k : {global_merge<0, 8, 16, 2>, global_merge<1, 8, 16, 2>, global_merge<1, 16, 8, 1>, global_merge<2, 8, 16, 2>})
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, DYN_SMEM));
  for (auto k : {chain<false>, chain<true>}) CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, DYN_SMEM));
  CK(cudaDeviceSynchronize());
  printf("device %s, %d SMs, %d blocks of %d threads, %d iterations per launch, median of %d launches%s\n", prop.name,
         prop.multiProcessorCount, NB, THREADS, iters, launches,
         use_kv ? ", each chunk loading its K and V rows from DRAM first" : "");
  const char* names[8] = {"level", "ticket16", "ticket8", "cluster8", "cluster16", "pergroup16", "chain", "chain-split"};
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int v = 0; v < 8; ++v) {
    std::vector<float> ns;
    unsigned errors = 0;
    bool ran = true;
    for (int k = 0; k <= launches && ran; ++k) {  // the first launch warms up
      CK(cudaMemset(bu.tickets, 0, 64 * sizeof(unsigned)));
      CK(cudaMemset(bu.counters, 0, 2 * (size_t)iters * sizeof(unsigned)));
      CK(cudaMemset(bu.errors, 0, sizeof(unsigned)));
      CK(cudaEventRecord(e0));
      ran = launch(v, bu, iters, use_kv);
      CK(cudaEventRecord(e1));
      CK(cudaGetLastError());
      CK(cudaEventSynchronize(e1));
      unsigned err = 0;
      CK(cudaMemcpy(&err, bu.errors, sizeof(unsigned), cudaMemcpyDeviceToHost));
      errors += err;
      float ms = 0.0f;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (k > 0) ns.push_back(ms * 1.0e6f / iters);
    }
    if (!ran) continue;
    std::sort(ns.begin(), ns.end());
    printf("%-10s %7.0f ns per iteration (min %.0f, max %.0f), %u wrong values\n", names[v], ns[ns.size() / 2], ns.front(),
           ns.back(), errors);
  }
  return 0;
}
