// mirage megakernel runtime: included after mirage_device.cuh and the MPK_* constants the
// generator defines from mirage_runtime::mpk::abi. The resident kernel's worker loop, the
// dependency waits and signals, the watchdog, the timestamps, the L2 prefetch of weights, and
// the built-in decode tasks.
#ifndef MIRAGE_MPK_CUH
#define MIRAGE_MPK_CUH
#include <stdint.h>
#include <limits.h>
#include <math.h>

namespace mpk {

// The kernel's parameter block (mirrors mirage_runtime::mpk::abi::MpkParams).
struct Params {
  void* const* buffers;          // one pointer per tensor of the plan
  const int* params;             // nsteps x num_params runtime parameter values
  unsigned* counters;            // dependency counters; the last one is the step barrier
  unsigned* status;              // MPK_STATUS_WORDS status words
  unsigned long long* timestamps;  // nsteps x num_tasks x 3, or null
  unsigned* worker_sm;           // the SM of each worker
  unsigned step_base;            // steps run on these counters before this launch
  unsigned nsteps;               // steps of this launch
  unsigned long long watchdog_ns;  // bound of one dependency wait
  unsigned prefetch_ahead;       // tasks of its own list a worker prefetches ahead of the current one
  unsigned reserved;
};
static_assert(sizeof(Params) == MPK_PARAMS_BYTES, "mpk::Params must mirror abi::MpkParams");

// One task: its operator, tile, and the starts of its waits, signals and prefetch patterns in
// the tables (each ends where the next task's starts; the table has a sentinel task).
struct Task {
  unsigned short op, x, y, z;
  unsigned wait_begin, signal_begin, prefetch_begin;
};
// A wait: a counter and its signals per step.
struct Wait {
  unsigned counter, triggers;
};
// Runs of bytes of one tensor to stream into L2 (see mirage::mpk::region::RunPattern).
struct Prefetch {
  unsigned long long offset;
  unsigned long long stride[3];
  unsigned count[3];
  unsigned run_bytes;
  unsigned buffer;
  unsigned pad;
};
// The generated tables.
struct Tables {
  const Task* tasks;
  const Wait* waits;
  const unsigned* signals;
  const Prefetch* prefetch;
  const unsigned* worker_begin;
  const unsigned* worker_list;
  unsigned num_workers, num_tasks, num_params, barrier;
};
// What a task body needs to report an error.
struct Ctx {
  const Params* p;
  unsigned task, step;
};

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned smid() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned ld_relaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_release(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}
// A load that bypasses L1 (data another SM wrote in this launch).
template <typename T> __device__ __forceinline__ T load(const T* p) { return __ldcg(p); }

// Records the first error (code and where) and raises the abort flag every waiting worker polls.
__device__ __noinline__ void report(const Params& p, unsigned code, unsigned task, unsigned step, unsigned a,
                                    unsigned b, unsigned c) {
  if (atomicCAS(&p.status[MPK_STATUS_CODE], 0u, code) == 0u) {
    p.status[MPK_STATUS_TASK] = task;
    p.status[MPK_STATUS_STEP] = step;
    p.status[MPK_STATUS_INFO] = a;
    p.status[MPK_STATUS_INFO + 1] = b;
    p.status[MPK_STATUS_INFO + 2] = c;
    __threadfence();
  }
  atomicExch(&p.status[MPK_STATUS_ABORT], 1u);
}
__device__ __forceinline__ void report_index(const Ctx& c, long long value, long long bound, unsigned source) {
  const int v = value < INT_MIN ? INT_MIN : (value > INT_MAX ? INT_MAX : (int)value);
  const unsigned b = bound > 0xffffffffll ? 0xffffffffu : (unsigned)bound;
  report(*c.p, MPK_ERR_INDEX, c.task, c.step, (unsigned)v, b, source);
}

// Warp 0 waits until counter counter(j) >= need(j) for every j < n (lane l polls j = l, l + 32,
// ...: up to 32 counters at once) with acquire loads and a growing __nanosleep back-off; gives
// up when another worker raised the abort flag or after the watchdog bound (reporting the first
// counter still short). Every thread of the block returns whether the wait succeeded: the
// verdict travels by the barrier's own reduction (__syncthreads_or), not through shared memory,
// so a wait cannot overwrite a verdict a slow warp has not read yet (compute-sanitizer's
// racecheck found that hazard with a shared flag between back-to-back waits).
template <class Counter, class Need>
__device__ __forceinline__ bool wait_counters(const Params& p, unsigned n, Counter counter, Need need, unsigned task,
                                              unsigned step) {
  bool ok = true;
  if (threadIdx.x < 32) {
    const unsigned lane = threadIdx.x;
    unsigned long long t0 = 0;
    for (unsigned base = 0; ok && base < n; base += 32) {
      const unsigned j = base + lane;
      const bool mine = j < n;
      const unsigned c = mine ? counter(j) : 0u;
      const unsigned want = mine ? need(j) : 0u;
      unsigned v = 0;
      bool done = !mine;
      for (unsigned polls = 0;; ++polls) {
        if (!done) {
          v = ld_acquire(&p.counters[c]);
          done = (int)(v - want) >= 0;  // wrap-safe: counters only grow
        }
        if (__all_sync(0xffffffffu, done)) break;
        if ((polls & 15) == 15) {
          // Every 16 polls: the abort flag and the watchdog, read by lane 0 and broadcast so the
          // whole warp decides alike.
          unsigned abort = lane == 0 ? ld_relaxed(&p.status[MPK_STATUS_ABORT]) : 0u;
          abort = __shfl_sync(0xffffffffu, abort, 0);
          const unsigned long long now = __shfl_sync(0xffffffffu, lane == 0 ? globaltimer() : 0ull, 0);
          if (t0 == 0) t0 = now;
          if (abort != 0u) {
            ok = false;
            break;
          }
          if (now - t0 > p.watchdog_ns) {
            const unsigned short_lanes = __ballot_sync(0xffffffffu, !done);
            if (lane == (unsigned)(__ffs(short_lanes) - 1)) report(p, MPK_ERR_WATCHDOG, task, step, c, want, v);
            ok = false;
            break;
          }
        }
        if (polls >= 8) __nanosleep(polls >= 64 ? 256 : 32);
      }
    }
  }
  // Warp 0's lanes agree on `ok` (every break above is warp-uniform); lane 0 speaks for them.
  return __syncthreads_or(threadIdx.x == 0 && !ok) == 0;
}

// Streams a task's prefetch patterns into L2: thread `first` of `stride` threads takes every
// stride-th 128-byte line of the runs.
__device__ __forceinline__ void prefetch(const Params& p, const Prefetch* f, unsigned begin, unsigned end,
                                         unsigned first, unsigned stride) {
  for (unsigned r = begin; r < end; ++r) {
    const Prefetch q = f[r];
    const char* base = static_cast<const char*>(p.buffers[q.buffer]) + q.offset;
    const unsigned head = (unsigned)((uintptr_t)base & 127u);
    const unsigned lines = (head + q.run_bytes + 127u) >> 7;
    const unsigned runs = q.count[0] * q.count[1] * q.count[2];
    for (unsigned i = first; i < runs * lines; i += stride) {
      const unsigned run = i / lines, line = i % lines;
      const unsigned i2 = run % q.count[2], i1 = (run / q.count[2]) % q.count[1], i0 = run / (q.count[2] * q.count[1]);
      const char* at = base + i0 * q.stride[0] + i1 * q.stride[1] + i2 * q.stride[2];
      prefetch_l2(reinterpret_cast<const char*>((uintptr_t)at & ~(uintptr_t)127) + (line << 7));
    }
  }
}

// The worker loop of block blockIdx.x: for every step of the launch, wait for the step barrier
// (all workers done with the previous step), then run the worker's tasks in order: stamp,
// prefetch weights into L2 (a window of the worker's next `prefetch_ahead` tasks, so that a
// task's weights stream in while the ones before it wait and run; warps 1.. prefetch while warp 0
// waits for the task's counters), run its body, signal its counters with release atomics after a block barrier,
// stamp. Stops at the first failed wait.
template <int THREADS, class Dispatch>
__device__ __forceinline__ void worker(const Params& p, const Tables& t, Dispatch dispatch, unsigned char* smem) {
  const unsigned w = blockIdx.x, tid = threadIdx.x;
  if (gridDim.x != t.num_workers || gridDim.y != 1 || gridDim.z != 1 || blockDim.x != THREADS || blockDim.y != 1 ||
      blockDim.z != 1) {
    if (w == 0 && tid == 0) report(p, MPK_ERR_LAUNCH, 0xffffffffu, p.step_base + 1, gridDim.x, blockDim.x, t.num_workers);
    return;
  }
  if (tid == 0) p.worker_sm[w] = smid();
  const unsigned first = t.worker_begin[w], last = t.worker_begin[w + 1];
  for (unsigned i = 0; i < p.nsteps; ++i) {
    const unsigned step = p.step_base + i + 1;
    const int* prm = p.params + (size_t)i * t.num_params;
    if (i > 0) {
      const unsigned need = (step - 1) * t.num_workers;
      if (!wait_counters(p, 1, [&](unsigned) { return t.barrier; }, [&](unsigned) { return need; }, 0xffffffffu, step))
        return;
    }
    for (unsigned k = first; k < last; ++k) {
      const unsigned id = t.worker_list[k];
      const Task task = t.tasks[id];
      const Task next = t.tasks[id + 1];
      unsigned long long* ts = p.timestamps ? p.timestamps + ((size_t)i * t.num_tasks + id) * 3 : nullptr;
      if (ts && tid == 0) ts[0] = globaltimer();
      // A window of this worker's tasks k..k+ahead streams into L2: the step's first task fills
      // it, every later task adds the one `ahead` places on (ahead = 0: each task its own).
      // Warps 1.. issue it while warp 0 polls the task's counters (wait_counters), so the
      // window's chain of dependent table loads overlaps the wait instead of preceding it (a
      // one-warp worker does both in turn).
      const unsigned ahead = p.prefetch_ahead;
      if (THREADS <= 32 || tid >= 32) {
        const unsigned lane0 = THREADS <= 32 ? tid : tid - 32, lanes = THREADS <= 32 ? THREADS : THREADS - 32;
        for (unsigned j = (k == first || ahead == 0) ? k : k + ahead; j <= k + ahead && j < last; ++j) {
          const unsigned a = t.worker_list[j];
          prefetch(p, t.prefetch, t.tasks[a].prefetch_begin, t.tasks[a + 1].prefetch_begin, lane0, lanes);
        }
      }
      const Wait* waits = t.waits + task.wait_begin;
      if (!wait_counters(p, next.wait_begin - task.wait_begin, [&](unsigned j) { return waits[j].counter; },
                         [&](unsigned j) { return waits[j].triggers * step; }, id, step))
        return;
      if (ts && tid == 0) ts[1] = globaltimer();
      dispatch(p, task, Ctx{&p, id, step}, prm, smem);
      __syncthreads();
      for (unsigned j = task.signal_begin + tid; j < next.signal_begin; j += THREADS) red_release(&p.counters[t.signals[j]], 1u);
      if (ts && tid == 0) ts[2] = globaltimer();
    }
    __syncthreads();
    if (tid == 0) red_release(&p.counters[t.barrier], 1u);
  }
}

// ---- built-in tasks -------------------------------------------------------------------------------

// out[row, cx*chunk ..] = table[tokens[row], cx*chunk ..]; zeros and ERR_INDEX for a bad id.
template <typename T, int THREADS>
__device__ void embedding(const Ctx& c, int cx, int row, const T* table, const float* tokens, T* out, int vocab,
                          int hidden, int chunk, unsigned source) {
  const float f = load(tokens + row);
  const bool ok = f >= 0.0f && f < (float)vocab && f == floorf(f);
  if (!ok && threadIdx.x == 0) report_index(c, isfinite(f) ? (long long)f : (long long)INT_MIN, vocab, source);
  const size_t src = ok ? (size_t)(int)f * hidden : 0;
  for (int j = threadIdx.x; j < chunk; j += THREADS) {
    const int col = cx * chunk + j;
    out[(size_t)row * hidden + col] = ok ? table[src + col] : mirage::from_f32<T>(0.0f);
  }
}

// Rotary embedding of head `head` (elements head*d ..) of row `row` of x [rows, width] at
// position pos0 + row (rotate-half layout, angles in double precision). With a gain (not null),
// the head is first RMS-normalized over its d elements, x * rsqrt(mean(x^2) + eps) * gain, kept
// in f32 into the rotation (Qwen3's q/k norm); `smem` holds one float per warp.
template <typename T, int THREADS>
__device__ void rope(const Ctx& c, int head, int row, const T* x, const float* inv_freq, T* out, int width, int d,
                     long long pos0, unsigned source, const T* gain, float eps, float* smem) {
  const long long pos = pos0 + row;
  const size_t at = (size_t)row * width + (size_t)head * d;
  const int h = d / 2;
  if (pos < 0 || pos > INT_MAX) {
    if (threadIdx.x == 0) report_index(c, pos, INT_MAX, source);
    for (int i = threadIdx.x; i < d; i += THREADS) out[at + i] = mirage::from_f32<T>(0.0f);
    return;
  }
  float scale = 1.0f;
  if (gain != nullptr) {
    constexpr int WARPS = THREADS / 32;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < d; i += THREADS) {
      const float v = mirage::to_f32(load(x + at + i));
      ss += v * v;
    }
    ss = mirage::warp_sum(ss);
    if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = ss;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) total += smem[w];
    __syncthreads();
    scale = (float)(1.0 / sqrt((double)total / d + (double)eps));
  }
  for (int i = threadIdx.x; i < h; i += THREADS) {
    double s, co;
    sincos((double)pos * (double)load(inv_freq + i), &s, &co);
    const float cs = (float)co, sn = (float)s;
    float a = mirage::to_f32(load(x + at + i)), b = mirage::to_f32(load(x + at + i + h));
    if (gain != nullptr) {
      a = a * scale * mirage::to_f32(load(gain + i));
      b = b * scale * mirage::to_f32(load(gain + i + h));
    }
    out[at + i] = mirage::from_f32<T>(a * cs - b * sn);
    out[at + i + h] = mirage::from_f32<T>(b * cs + a * sn);
  }
}

// cache[kvh, pos0 + r, :] = k[r, kvh*d ..] for every row r of k [rows, width].
template <typename T, int THREADS>
__device__ void kv_append(const Ctx& c, int kvh, const T* k, T* cache, int rows, int width, int cap, int d,
                          long long pos0, unsigned source) {
  if (pos0 < 0 || pos0 + rows > cap) {
    if (threadIdx.x == 0) report_index(c, pos0, (long long)cap - rows + 1, source);
    return;
  }
  for (int e = threadIdx.x; e < rows * d; e += THREADS) {
    const int r = e / d, i = e % d;
    cache[((size_t)kvh * cap + pos0 + r) * d + i] = load(k + (size_t)r * width + (size_t)kvh * d + i);
  }
}

// 16 bytes of a row as floats (8 f16/bf16 or 4 f32 elements).
template <typename T> struct Vec16 {
  static constexpr int N = 16 / (int)sizeof(T);
};
__device__ __forceinline__ void unpack16(const uint4& u, float* f, const float*) {
  f[0] = __uint_as_float(u.x);
  f[1] = __uint_as_float(u.y);
  f[2] = __uint_as_float(u.z);
  f[3] = __uint_as_float(u.w);
}
__device__ __forceinline__ void unpack16(const uint4& u, float* f, const __nv_bfloat16*) {
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    f[2 * j] = __uint_as_float(w[j] << 16);
    f[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
  }
}
__device__ __forceinline__ void unpack16(const uint4& u, float* f, const __half*) {
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 v = __half22float2(__halves2half2(__ushort_as_half((unsigned short)(w[j] & 0xffffu)),
                                                   __ushort_as_half((unsigned short)(w[j] >> 16))));
    f[2 * j] = v.x;
    f[2 * j + 1] = v.y;
  }
}

// The keys [lo, hi) of chunk c of `chunks` over keylen keys (mirage::mpk::builtin::chunk_range).
__device__ __forceinline__ void chunk_range(long long keylen, int chunks, int c, int& lo, int& hi) {
  const long long per = (keylen + chunks - 1) / chunks;
  const long long l = (long long)c * per < keylen ? (long long)c * per : keylen;
  lo = (int)l;
  hi = (int)(l + per < keylen ? l + per : keylen);
}

// Floats of shared memory attention_chunk uses: q, the scores of one key tile, (m, l,
// correction), the cross-warp reduction (mirrors mirage::mpk::builtin::attention_smem_floats).
__host__ __device__ constexpr int attention_smem_floats(int G, int D, int THREADS) {
  return G * (D + THREADS + 3 + (THREADS / 32) * D);
}

// The split-KV core: keys [lo, hi) (hi > lo) of one KV head (kbase, vbase: its cache rows
// [cap, D]) for the G query heads of its group, whose f32 values the caller has written to
// smem[0 .. G·D] and synchronized; writes the chunk's partial (o[D] / l, m, l) of every head to
// out[g·(D + 2) ..]. Keys are walked in tiles of THREADS: (1) one key per thread, its K row
// read in 16-byte vectors (all in flight), G dot products against q in shared memory; (2) per
// query head a warp takes the tile's max and exp-sum (online softmax across tiles); (3) P·V
// with threads over (key lane, 16-byte column slot), V rows read in 16-byte vectors,
// accumulators per head in registers (each thread's first VPRE value vectors of a tile are
// loaded with its key rows, the rest in (3)); then lanes, warps and the normalization. Shared memory:
// attention_smem_floats(G, D, THREADS) floats.
template <typename T, int THREADS, int D, int G>
__device__ __forceinline__ void attention_chunk(const T* kbase, const T* vbase, int lo, int hi, float scale,
                                                float* smem, float* out) {
  constexpr int WARPS = THREADS / 32;
  constexpr int VEC = Vec16<T>::N;
  constexpr int SLOTS = D / VEC;        // 16-byte vectors per row
  constexpr int KL = THREADS / SLOTS;   // key lanes of the P·V phase
  constexpr int VPRE = 4;               // value vectors per thread loaded with the key rows
  static_assert(SLOTS >= 1 && SLOTS <= 32 && (SLOTS & (SLOTS - 1)) == 0, "a row is 1..32 16-byte vectors");
  static_assert(THREADS % 32 == 0, "whole warps");
  float* qs = smem;                     // [G][D]
  float* sc = qs + G * D;               // [G][THREADS]
  float* mrun = sc + G * THREADS;       // [G]
  float* lrun = mrun + G;               // [G]
  float* corr = lrun + G;               // [G]
  float* red = corr + G;                // [WARPS][G][D]
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  if (tid < G) {
    mrun[tid] = -INFINITY;
    lrun[tid] = 0.0f;
  }
  const int slot = tid % SLOTS, kl = tid / SLOTS;
  float acc[G][VEC];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc[g][e] = 0.0f;
  __syncthreads();
  for (int t0 = lo; t0 < hi; t0 += THREADS) {
    const int n = hi - t0 < THREADS ? hi - t0 : THREADS;
    // The tile's first VPRE value vectors of this thread's P·V share, issued with the key rows
    // below so the P·V phase does not start with a round of loads (DECISIONS change 74).
    uint4 vpre[VPRE];
#pragma unroll
    for (int j = 0; j < VPRE; ++j) {
      const int k = kl + j * KL;
      if (k < n) vpre[j] = __ldcg(reinterpret_cast<const uint4*>(vbase + (size_t)(t0 + k) * D) + slot);
    }
    // (1) scores: one key per thread.
    if (tid < n) {
      const uint4* kr = reinterpret_cast<const uint4*>(kbase + (size_t)(t0 + tid) * D);
      uint4 raw[SLOTS];
#pragma unroll
      for (int v = 0; v < SLOTS; ++v) raw[v] = __ldcg(kr + v);
      float s[G];
#pragma unroll
      for (int g = 0; g < G; ++g) s[g] = 0.0f;
#pragma unroll
      for (int v = 0; v < SLOTS; ++v) {
        float f[VEC];
        unpack16(raw[v], f, static_cast<const T*>(nullptr));
#pragma unroll
        for (int g = 0; g < G; ++g)
#pragma unroll
          for (int e = 0; e < VEC; ++e) s[g] += qs[g * D + v * VEC + e] * f[e];
      }
#pragma unroll
      for (int g = 0; g < G; ++g) sc[g * THREADS + tid] = s[g] * scale;
    }
    __syncthreads();
    // (2) online softmax per query head: a warp per head.
    for (int g = warp; g < G; g += WARPS) {
      float mx = -INFINITY;
      for (int j = lane; j < n; j += 32) mx = fmaxf(mx, sc[g * THREADS + j]);
      mx = mirage::warp_max(mx);
      const float mold = mrun[g];
      const float mnew = fmaxf(mold, mx);
      float sum = 0.0f;
      for (int j = lane; j < n; j += 32) {
        const float p = __expf(sc[g * THREADS + j] - mnew);
        sc[g * THREADS + j] = p;
        sum += p;
      }
      sum = mirage::warp_sum(sum);
      // Every lane has read mrun[g] (mold) above; lane 0 overwrites it below. A shuffle orders
      // execution but not shared-memory accesses: compute-sanitizer's racecheck reported this
      // read/write pair as a hazard until the warp barrier was added.
      __syncwarp();
      if (lane == 0) {
        const float cr = mold == -INFINITY ? 0.0f : __expf(mold - mnew);
        corr[g] = cr;
        lrun[g] = lrun[g] * cr + sum;
        mrun[g] = mnew;
      }
    }
    __syncthreads();
    // (3) P·V: key lanes over the tile's keys, 16-byte column slots.
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float cr = corr[g];
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[g][e] *= cr;
    }
#pragma unroll
    for (int j = 0; j < VPRE; ++j) {
      const int k = kl + j * KL;
      if (k < n) {
        float f[VEC];
        unpack16(vpre[j], f, static_cast<const T*>(nullptr));
#pragma unroll
        for (int g = 0; g < G; ++g) {
          const float p = sc[g * THREADS + k];
#pragma unroll
          for (int e = 0; e < VEC; ++e) acc[g][e] += p * f[e];
        }
      }
    }
#pragma unroll 4
    for (int k = kl + VPRE * KL; k < n; k += KL) {
      const uint4 raw = __ldcg(reinterpret_cast<const uint4*>(vbase + (size_t)(t0 + k) * D) + slot);
      float f[VEC];
      unpack16(raw, f, static_cast<const T*>(nullptr));
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float p = sc[g * THREADS + k];
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[g][e] += p * f[e];
      }
    }
    __syncthreads();
  }
  // Sum the key lanes of a warp (lanes SLOTS apart), then the warps through shared memory.
#pragma unroll
  for (int o = 16; o >= SLOTS; o >>= 1)
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], o);
  if (lane < SLOTS) {
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
      for (int e = 0; e < VEC; ++e) red[(warp * G + g) * D + slot * VEC + e] = acc[g][e];
  }
  __syncthreads();
  for (int e = tid; e < G * D; e += THREADS) {
    const int g = e / D, i = e % D;
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) o += red[(w * G + g) * D + i];
    out[g * (D + 2) + i] = o / lrun[g];
    if (i == 0) {
      out[g * (D + 2) + D] = mrun[g];
      out[g * (D + 2) + D + 1] = lrun[g];
    }
  }
  (void)KL;
}

// The neutral partial (0, -inf, 0) of the G heads of an empty chunk.
template <int THREADS, int D, int G> __device__ __forceinline__ void attention_neutral(float* out) {
  for (int e = threadIdx.x; e < G * (D + 2); e += THREADS) {
    const int i = e % (D + 2);
    out[e] = i == D ? -INFINITY : 0.0f;
  }
}

// Split-KV attention, first half: key chunk `chunk` of KV head `kvh` for the G query heads of its
// group (q and the caches [kv_heads, cap, D]; partial [kv_heads, chunks, G, D + 2] f32 of
// (o[D] / l, m, l)), by attention_chunk. An empty chunk writes the neutral partial (0, -inf, 0);
// a key length out of range writes it everywhere and reports ERR_INDEX.
template <typename T, int THREADS, int D, int G>
__device__ void attention_partial(const Ctx& c, int chunk, int kvh, const T* q, const T* kc, const T* vc,
                                  float* partial, int chunks, int cap, long long keylen, float scale, unsigned source,
                                  float* smem) {
  float* out = partial + ((size_t)kvh * chunks + chunk) * G * (D + 2);
  const bool ok = keylen >= 1 && keylen <= cap;
  if (!ok && chunk == 0 && kvh == 0 && threadIdx.x == 0) report_index(c, keylen, (long long)cap + 1, source);
  int lo = 0, hi = 0;
  if (ok) chunk_range(keylen, chunks, chunk, lo, hi);
  if (hi <= lo) {
    attention_neutral<THREADS, D, G>(out);
    return;
  }
  for (int e = threadIdx.x; e < G * D; e += THREADS) smem[e] = mirage::to_f32(load(q + (size_t)kvh * G * D + e));
  attention_chunk<T, THREADS, D, G>(kc + ((size_t)kvh * cap) * D, vc + ((size_t)kvh * cap) * D, lo, hi, scale, smem,
                                    out);
}

// The merge of the CHUNKS partials of one KV head's G query heads (part [CHUNKS][G][D + 2],
// written by other blocks of this launch: read through L2), out[g·D + i] = Σ_c w_c o_c[i] /
// Σ_c w_c with w_c = l_c exp(m_c − max m) (empty chunks weigh nothing; zeros when all are
// empty): the (m, l) pairs through shared memory (2·G·CHUNKS floats), every o_c[i] of a
// thread's elements loaded with them.
template <typename T, int THREADS, int D, int G, int CHUNKS>
__device__ __forceinline__ void attention_merge(const float* part, T* out, float* smem) {
  constexpr int PER = (G * D + THREADS - 1) / THREADS;  // elements of out per thread
  // Every o_c of a thread's elements is loaded with the (m, l) pairs, in one round, where the
  // registers allow; else after them.
  constexpr bool EARLY = PER * CHUNKS <= 64;
  float* ms = smem;                // [G][CHUNKS]
  float* ls = ms + G * CHUNKS;     // [G][CHUNKS]
  float o[EARLY ? PER : 1][EARLY ? CHUNKS : 1];
  if constexpr (EARLY) {
#pragma unroll
    for (int r = 0; r < PER; ++r) {
      const int e = threadIdx.x + r * THREADS;
      if (e < G * D) {
        const int g = e / D, i = e % D;
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) o[r][c] = load(part + ((size_t)c * G + g) * (D + 2) + i);
      }
    }
  }
  for (int e = threadIdx.x; e < G * CHUNKS; e += THREADS) {
    const int g = e / CHUNKS, c = e % CHUNKS;
    ms[e] = load(part + ((size_t)c * G + g) * (D + 2) + D);
    ls[e] = load(part + ((size_t)c * G + g) * (D + 2) + D + 1);
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < PER; ++r) {
    const int e = threadIdx.x + r * THREADS;
    if (e >= G * D) break;
    const int g = e / D, i = e % D;
    float mx = -INFINITY;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) mx = fmaxf(mx, ms[g * CHUNKS + c]);
    float num = 0.0f, den = 0.0f;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const float m = ms[g * CHUNKS + c];
      if (m == -INFINITY) continue;
      const float w = ls[g * CHUNKS + c] * __expf(m - mx);
      const float oc = EARLY ? o[EARLY ? r : 0][EARLY ? c : 0] : load(part + ((size_t)c * G + g) * (D + 2) + i);
      den += w;
      num += w * oc;
    }
    out[e] = mirage::from_f32<T>(den > 0.0f ? num / den : 0.0f);
  }
}

// A worker's angle table, in the tail of its dynamic shared memory (mirage::mpk::emit reserves
// it past every task's share when the kernel has a decode attention and zeroes `key` at the
// kernel's start; steps start at 1, so a zero key matches none): which (head size, step),
// position and frequencies the cos and sin after the header belong to.
struct AngleTable {
  unsigned long long key;  // (H << 32) | step
  long long pos;
  const float* inv_freq;
  unsigned long long pad;
};
constexpr int ANGLE_TABLE_HEADER_FLOATS = sizeof(AngleTable) / sizeof(float);
static_assert(sizeof(AngleTable) == 32, "the header emit.rs reserves");

// Decode attention, fused (mirage::mpk::builtin::Builtin::DecodeAttention): tile (chunk, kvh)
// of one query row at position `pos` (keys 0..=pos). (1) RoPE (after the per-head RMSNorm of
// Qwen3 when q_gain is not null) of the G query heads of the KV head's group, rounded to T as
// the projection's type stores them, into shared memory; the tile whose chunk holds key `pos`
// also ropes the new key and appends it and the new value to the caches (row pos of KV head
// kvh). (2) The chunk's partial by attention_chunk into partial [kv_heads, CHUNKS, G, D + 2].
// (3) A ticket per KV head (tickets[kvh], a counter of the megakernel, CHUNKS increments per
// step): the tile that takes the step's last ticket merges the KV head's partials into out
// (attention_merge), so no separate merge operator and dependency hop follow. A position out of
// range writes zeros, touches no cache and reports ERR_INDEX (tile (0, 0)). `angles` is the
// worker's angle table (AngleTable, the tail of its shared memory past every task's share): the
// first decode attention of a step on a worker computes the cos and sin of position `pos` there
// (FP64, as always), every later one of the step with the same position and frequencies — the
// other layers' — reuses them, so FP64 sincos leaves 27 of Qwen3's 28 attention paths
// (DECISIONS change 99). Not inlined: inlined
// into the resident kernel's dispatch, its registers (the merge's o[PER][CHUNKS]) set the whole
// kernel's allocation (DECISIONS change 51: 255 registers with spills in the worker loop).
// With MERGE false (Builtin::DecodeAttention { merge: false }), the tile ends after its partial:
// no ticket, no merge, no `out` (null) — a merge_projection tile merges the KV head's partials.
template <typename T, int THREADS, int D, int G, int CHUNKS, bool MERGE = true>
__device__ __noinline__ void decode_attention(const Ctx& c, int chunk, int kvh, const T* q, const T* k, const T* v,
                                 const float* inv_freq, const T* q_gain, const T* k_gain, float eps, T* out,
                                 float* partial, T* kc, T* vc, unsigned* tickets, int cap, long long pos,
                                 float scale, unsigned source, float* smem, float* angles) {
  constexpr int WARPS = THREADS / 32;
  constexpr int H = D / 2;
  static_assert(D % 2 == 0, "an even head dim");
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  float* part = partial + (size_t)kvh * CHUNKS * G * (D + 2);
  if (pos < 0 || pos >= cap) {
    if (chunk == 0 && kvh == 0 && tid == 0) report_index(c, pos, cap, source);
    attention_neutral<THREADS, D, G>(part + (size_t)chunk * G * (D + 2));
    if constexpr (MERGE) {
      for (int e = tid; e < G * D; e += THREADS) out[(size_t)kvh * G * D + e] = mirage::from_f32<T>(0.0f);
    }
    return;
  }
  int lo = 0, hi = 0;
  chunk_range(pos + 1, CHUNKS, chunk, lo, hi);
  const bool owner = lo <= pos && pos < hi;
  const size_t crow = (size_t)kvh * cap;
  // The chunk's first key tile streams into L2 while the rotations run.
  if (tid < hi - lo && tid < THREADS) {
    const char* kr = reinterpret_cast<const char*>(kc + (crow + lo + tid) * D);
    const char* vr = reinterpret_cast<const char*>(vc + (crow + lo + tid) * D);
#pragma unroll
    for (int b = 0; b < (int)(D * sizeof(T)); b += 128) {
      prefetch_l2(kr + b);
      prefetch_l2(vr + b);
    }
  }
  float* qs = smem;                                          // [G][D], attention_chunk's
  float* hs = smem + attention_smem_floats(G, D, THREADS);  // [G + 1] per-head norm scales
  float* raw = hs + G + 1;                                   // [G + 2][D]: q heads, new k, new v
  float* gs = raw + (G + 2) * D;                             // [2][D]: q and k gains
  const int heads = owner ? G + 1 : G;  // head G: the new key
  const int rows = owner ? G + 2 : G;   // row G + 1: the new value
  // (1) Everything the rotations read, in one round of loads: the heads, the new value, the
  // gains and the frequencies, all loaded into registers before the first store (a store into
  // shared memory through a generic pointer may alias the sources, so loads interleaved with
  // stores would each wait out their own round trip; DECISIONS change 95), then stored, then the
  // angles.
  // The angle table: reused when this worker's table holds this step, this head size, this
  // position and these frequencies (written by an earlier task's thread 0 behind barriers; read
  // here by every thread before this task's first barrier, rewritten only after it).
  AngleTable* table = reinterpret_cast<AngleTable*>(angles);
  float* cs = angles + ANGLE_TABLE_HEADER_FLOATS;  // [H] cos
  float* sn = cs + H;                              // [H] sin
  const unsigned long long key = ((unsigned long long)H << 32) | c.step;
  const bool cached = table->key == key && table->pos == pos && table->inv_freq == inv_freq;
  constexpr int RN = ((G + 2) * D + THREADS - 1) / THREADS;
  constexpr int GN = (2 * D + THREADS - 1) / THREADS;
  constexpr int FN = (H + THREADS - 1) / THREADS;
  float rv[RN], gv[GN], fv[FN];
#pragma unroll
  for (int r = 0; r < RN; ++r) {
    const int e = tid + r * THREADS;
    if (e < rows * D) {
      const int g = e / D, i = e % D;
      const T* src = g < G ? q + ((size_t)kvh * G + g) * D : (g == G ? k : v) + (size_t)kvh * D;
      rv[r] = mirage::to_f32(load(src + i));
    }
  }
  if (q_gain != nullptr) {
#pragma unroll
    for (int r = 0; r < GN; ++r) {
      const int i = tid + r * THREADS;
      if (i < 2 * D) gv[r] = mirage::to_f32(load((i < D ? q_gain : k_gain) + i % D));
    }
  }
  if (!cached) {
#pragma unroll
    for (int r = 0; r < FN; ++r) {
      const int i = tid + r * THREADS;
      if (i < H) fv[r] = load(inv_freq + i);
    }
  }
#pragma unroll
  for (int r = 0; r < RN; ++r) {
    const int e = tid + r * THREADS;
    if (e < rows * D) raw[e] = rv[r];
  }
  if (q_gain != nullptr) {
#pragma unroll
    for (int r = 0; r < GN; ++r) {
      const int i = tid + r * THREADS;
      if (i < 2 * D) gs[i] = gv[r];
    }
  }
  if (!cached) {
#pragma unroll
    for (int r = 0; r < FN; ++r) {
      const int i = tid + r * THREADS;
      if (i < H) {
        double s, co;
        sincos((double)pos * (double)fv[r], &s, &co);
        cs[i] = (float)co;
        sn[i] = (float)s;
      }
    }
  }
  __syncthreads();
  if (!cached && tid == 0) {
    table->key = key;
    table->pos = pos;
    table->inv_freq = inv_freq;
  }
  // (2) The per-head norms (Qwen3): a warp per head.
  if (q_gain != nullptr) {
    for (int g = warp; g < heads; g += WARPS) {
      float ss = 0.0f;
      for (int i = lane; i < D; i += 32) ss += raw[g * D + i] * raw[g * D + i];
      ss = mirage::warp_sum(ss);
      if (lane == 0) hs[g] = (float)(1.0 / sqrt((double)ss / D + (double)eps));
    }
    __syncthreads();
  }
  // (3) The rotations, rounded to T: the queries into qs, the new key into its cache row; the
  // new value copied.
  for (int e = tid; e < heads * H; e += THREADS) {
    const int g = e / H, i = e % H;
    float a = raw[g * D + i], b = raw[g * D + i + H];
    if (q_gain != nullptr) {
      const float* gain = gs + (g < G ? 0 : D);
      a = a * hs[g] * gain[i];
      b = b * hs[g] * gain[i + H];
    }
    const T ra = mirage::from_f32<T>(a * cs[i] - b * sn[i]), rb = mirage::from_f32<T>(b * cs[i] + a * sn[i]);
    if (g < G) {
      qs[g * D + i] = mirage::to_f32(ra);
      qs[g * D + i + H] = mirage::to_f32(rb);
    } else {
      kc[(crow + pos) * D + i] = ra;
      kc[(crow + pos) * D + i + H] = rb;
    }
  }
  if (owner) {
    for (int i = tid; i < D; i += THREADS) vc[(crow + pos) * D + i] = mirage::from_f32<T>(raw[(G + 1) * D + i]);
  }
  // attention_chunk synchronizes before reading qs and the caches: the appended row is the
  // block's own write, visible to it after the barrier.
  float* mine = part + (size_t)chunk * G * (D + 2);
  if (hi > lo) {
    attention_chunk<T, THREADS, D, G>(kc + crow * D, vc + crow * D, lo, hi, scale, smem, mine);
  } else {
    attention_neutral<THREADS, D, G>(mine);
  }
  if constexpr (!MERGE) return;
  // Every thread's partial writes reach the device before the ticket is taken.
  __threadfence();
  __syncthreads();
  unsigned last = 0;
  if (tid == 0) {
    const unsigned old = atomicAdd(tickets + kvh, 1u);
    last = old + 1u == c.step * (unsigned)CHUNKS;
    __threadfence();
  }
  if (__syncthreads_or(last) == 0) return;
  attention_merge<T, THREADS, D, G, CHUNKS>(part, out + (size_t)kvh * G * D, smem);
}

// The output projection of unmerged decode-attention partials by KV head group
// (mirage::mpk::builtin::Builtin::MergeProjection): tile (x, kvh) merges KV head kvh's CHUNKS
// partials (part [kv_heads][CHUNKS][G][D + 2]) into its G·D head values, rounded to T, in shared
// memory (attention_merge), and multiplies them by rows kvh·G·D .. and columns x·COLS .. of the
// row-major w [kv_heads·G·D][n]: out[kvh·n + x·COLS + j] = Σ_r a[r] · w[kvh·G·D + r][x·COLS + j],
// in f32. Thread (rg, cv) takes the 16-byte column vector cv of rows rg, rg + RG, ..., its first
// BATCH rows' weights loaded before the merge's loads, so both are in flight at once; the row
// groups' sums meet by shuffles within a warp, then through shared memory in warp order (the
// same sum every run).
template <typename T, int THREADS, int D, int G, int CHUNKS, int COLS>
__device__ __noinline__ void merge_projection(int x, int kvh, const float* partial, const T* w, T* out, int n,
                                              float* smem) {
  constexpr int N = Vec16<T>::N;  // elements per 16-byte vector
  constexpr int CV = COLS / N;    // column vectors of the tile
  static_assert(COLS % N == 0 && CV >= 1 && CV <= THREADS && THREADS % CV == 0, "a tile of whole 16-byte vectors");
  constexpr int RG = THREADS / CV;  // row groups
  constexpr int ROWS = G * D;
  constexpr int J = (ROWS + RG - 1) / RG;  // rows per thread
  constexpr int BATCH = J < 16 ? J : 16;
  const int tid = threadIdx.x, cv = tid % CV, rg = tid / CV;
  const T* wb = w + (size_t)kvh * ROWS * n + (size_t)x * COLS + cv * N;
  uint4 wv[BATCH];
#pragma unroll
  for (int j = 0; j < BATCH; ++j) {
    const int r = rg + j * RG;
    if (r < ROWS) wv[j] = __ldg(reinterpret_cast<const uint4*>(wb + (size_t)r * n));
  }
  T* a = reinterpret_cast<T*>(smem + 2 * G * CHUNKS);  // [ROWS], after the merge's (m, l) pairs
  attention_merge<T, THREADS, D, G, CHUNKS>(partial + (size_t)kvh * CHUNKS * G * (D + 2), a, smem);
  __syncthreads();
  float acc[N];
#pragma unroll
  for (int k = 0; k < N; ++k) acc[k] = 0.0f;
#pragma unroll 1
  for (int j0 = 0; j0 < J; j0 += BATCH) {
    if (j0 > 0) {
#pragma unroll
      for (int j = 0; j < BATCH; ++j) {
        const int r = rg + (j0 + j) * RG;
        if (j0 + j < J && r < ROWS) wv[j] = __ldg(reinterpret_cast<const uint4*>(wb + (size_t)r * n));
      }
    }
#pragma unroll
    for (int j = 0; j < BATCH; ++j) {
      const int r = rg + (j0 + j) * RG;
      if (j0 + j < J && r < ROWS) {
        float f[N];
        unpack16(wv[j], f, static_cast<const T*>(nullptr));
        const float av = mirage::to_f32(a[r]);
#pragma unroll
        for (int k = 0; k < N; ++k) acc[k] = fmaf(av, f[k], acc[k]);
      }
    }
  }
  // The row groups meet: those of a warp by shuffles (lanes cv, cv + CV, ... hold the same
  // column vector), then one slot per warp (or per row group, when a warp holds CV >= 32 column
  // vectors of one row group) in shared memory, added in slot order.
  float* red = smem + 2 * G * CHUNKS + (ROWS * (int)sizeof(T) + 15) / 16 * 4;  // [SLOTS][COLS]
  const int lane = tid & 31;
  if constexpr (CV < 32) {
    static_assert(32 % CV == 0, "column vectors dividing a warp");
#pragma unroll
    for (int s = CV; s < 32; s <<= 1) {
#pragma unroll
      for (int k = 0; k < N; ++k) acc[k] += __shfl_xor_sync(0xffffffffu, acc[k], s);
    }
    if (lane < CV) {
#pragma unroll
      for (int k = 0; k < N; ++k) red[(tid >> 5) * COLS + cv * N + k] = acc[k];
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) red[rg * COLS + cv * N + k] = acc[k];
  }
  constexpr int SLOTS = CV < 32 ? THREADS / 32 : RG;
  __syncthreads();
  for (int c = tid; c < COLS; c += THREADS) {
    float s = 0.0f;
#pragma unroll
    for (int g = 0; g < SLOTS; ++g) s += red[g * COLS + c];
    out[(size_t)kvh * n + (size_t)x * COLS + c] = mirage::from_f32<T>(s);
  }
}

// Split-KV attention, second half: query head `head` merges its KV head's chunks,
// out = sum_c w_c o_c / sum_c w_c with w_c = l_c exp(m_c - max m) (empty chunks weigh nothing;
// zeros when all are empty). partial [kv_heads, chunks, group, D + 2] f32; out [1, heads*D].
template <typename T, int THREADS, int D>
__device__ void attention_combine(int head, const float* partial, T* out, int group, int chunks) {
  const size_t stride = (size_t)group * (D + 2);
  const float* base = partial + ((size_t)(head / group) * chunks * group + head % group) * (D + 2);
  float mx = -INFINITY;
  for (int c = 0; c < chunks; ++c) mx = fmaxf(mx, load(base + c * stride + D));
  for (int i = threadIdx.x; i < D; i += THREADS) {
    float num = 0.0f, den = 0.0f;
    for (int c = 0; c < chunks; ++c) {
      const float m = load(base + c * stride + D);
      if (m == -INFINITY) continue;
      const float w = load(base + c * stride + D + 1) * __expf(m - mx);
      den += w;
      num += w * load(base + c * stride + i);
    }
    out[(size_t)head * D + i] = mirage::from_f32<T>(den > 0.0f ? num / den : 0.0f);
  }
}

// The better of two (value, index) candidates: the larger value, the smaller index among equals.
__device__ __forceinline__ void better(float& v, int& i, float v2, int i2) {
  if (v2 > v || (v2 == v && i2 < i)) {
    v = v2;
    i = i2;
  }
}
// Reduces (v, i) over the block; thread 0 gets the result. `smem` holds 2 words per warp.
template <int THREADS>
__device__ __forceinline__ void block_argmax(float& v, int& i, float* smem) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) better(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) {
    smem[2 * warp] = v;
    smem[2 * warp + 1] = __int_as_float(i);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < THREADS / 32; ++w) better(v, i, smem[2 * w], __float_as_int(smem[2 * w + 1]));
  }
}

// partial[row, cx] = (max, argmax) of logits[row, cx*chunk ..+chunk] (NaN ignored).
template <typename T, int THREADS>
__device__ void argmax_partial(int cx, int row, const T* logits, float* partial, int vocab, int chunk, int chunks,
                               int columns, float* smem) {
  float v = -INFINITY;
  int i = cx * chunk;
  // Only the columns below `columns` count (padding past the vocabulary does not).
  const int n = columns - cx * chunk < chunk ? columns - cx * chunk : chunk;
  for (int j = threadIdx.x; j < n; j += THREADS) {
    const int col = cx * chunk + j;
    const float x = mirage::to_f32(load(logits + (size_t)row * vocab + col));
    better(v, i, x, col);
  }
  block_argmax<THREADS>(v, i, smem);
  if (threadIdx.x == 0) {
    partial[((size_t)row * chunks + cx) * 2] = v;
    partial[((size_t)row * chunks + cx) * 2 + 1] = (float)i;
  }
}

// token[row] = the index of the best partial of the row.
template <int THREADS>
__device__ void argmax_reduce(int row, const float* partial, float* token, int n, float* smem) {
  float v = -INFINITY;
  int i = INT_MAX;
  for (int j = threadIdx.x; j < n; j += THREADS) {
    better(v, i, load(partial + ((size_t)row * n + j) * 2), (int)load(partial + ((size_t)row * n + j) * 2 + 1));
  }
  block_argmax<THREADS>(v, i, smem);
  if (threadIdx.x == 0) token[row] = (float)i;
}

// y[i] = 1 + x[i] (or 1 + max x, read by warp 0): an empty task for overhead measurements.
__device__ __forceinline__ void nop(int i, const float* x, float* y, int n_in, bool all) {
  if (threadIdx.x >= 32) return;
  float v = -INFINITY;
  if (all) {
    for (int j = threadIdx.x; j < n_in; j += 32) v = fmaxf(v, load(x + j));
    v = mirage::warp_max(v);
  } else if (threadIdx.x == 0) {
    v = load(x + i);
  }
  if (threadIdx.x == 0) y[i] = v + 1.0f;
}

}  // namespace mpk
#endif  // MIRAGE_MPK_CUH
