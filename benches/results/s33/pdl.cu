// Session 33: does programmatic dependent launch (PDL, sm_90) shorten a two-kernel µGraph?
// A streams 64 MiB (1024 blocks of 256 threads, like split-KV's first kernel) and writes one
// float per block; B (32 blocks) sums them. Timed with CUDA events around A+B, L2 flushed
// before each pair, median of 200: A alone, A then B plainly, A then B with PDL (B waits with
// griddepcontrol.wait), and the same with A triggering its dependents at its start.
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

template <bool Trigger>
__global__ void __launch_bounds__(256) stream_a(const int4* __restrict__ in, float* __restrict__ part, int per_block) {
  if (Trigger) asm volatile("griddepcontrol.launch_dependents;");
  const int4* p = in + (size_t)blockIdx.x * per_block;
  float acc = 0.f;
  for (int i = threadIdx.x; i < per_block; i += 256) {
    int4 v = __ldg(p + i);
    acc += __int_as_float(v.x) + __int_as_float(v.y) + __int_as_float(v.z) + __int_as_float(v.w);
  }
  __shared__ float red[8];
  for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) { float s = 0; for (int w = 0; w < 8; ++w) s += red[w]; part[blockIdx.x] = s; }
}

template <bool Wait>
__global__ void __launch_bounds__(256) combine_b(const float* __restrict__ part, float* __restrict__ out, int n) {
  if (Wait) asm volatile("griddepcontrol.wait;" ::: "memory");
  float acc = 0.f;
  for (int i = threadIdx.x; i < n / 32; i += 256) acc += part[blockIdx.x * (n / 32) + i];
  for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(out + blockIdx.x, acc);
}

__global__ void flush(int4* buf, size_t n) {
  for (size_t i = blockIdx.x * 256 + threadIdx.x; i < n; i += (size_t)gridDim.x * 256) buf[i] = make_int4(1, 2, 3, 4);
}

int main() {
  const int blocks = 1024, per_block = (64 << 20) / 16 / blocks;
  int4 *in, *fl; float *part, *out;
  const size_t fl_n = (256u << 20) / 16;
  CK(cudaMalloc(&in, (size_t)blocks * per_block * 16));
  CK(cudaMalloc(&fl, fl_n * 16));
  CK(cudaMalloc(&part, blocks * 4));
  CK(cudaMalloc(&out, 32 * 4));
  CK(cudaMemset(in, 0, (size_t)blocks * per_block * 16));
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  auto launch_b = [&](bool pdl, bool wait) -> cudaError_t {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(32); cfg.blockDim = dim3(256); cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr; cfg.numAttrs = pdl ? 1 : 0;
    if (wait) return cudaLaunchKernelEx(&cfg, combine_b<true>, (const float*)part, out, blocks);
    return cudaLaunchKernelEx(&cfg, combine_b<false>, (const float*)part, out, blocks);
  };
  const char* names[] = {"A alone", "A then B (plain)", "A then B (PDL, B waits)", "A (triggers) then B (PDL, B waits)", "empty: B alone"};
  for (int round = 0; round < 2; ++round)
  for (int variant = 0; variant < 5; ++variant) {
    std::vector<float> t;
    for (int it = 0; it < 210; ++it) {
      flush<<<1024, 256, 0, s>>>(fl, fl_n);
      CK(cudaEventRecord(e0, s));
      if (variant == 1 || variant == 2 || variant == 0) stream_a<false><<<blocks, 256, 0, s>>>(in, part, per_block);
      if (variant == 3) stream_a<true><<<blocks, 256, 0, s>>>(in, part, per_block);
      if (variant == 1 || variant == 4) CK(launch_b(false, false));
      if (variant == 2 || variant == 3) CK(launch_b(true, true));
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
      if (it >= 10) t.push_back(ms * 1000.f);
    }
    std::sort(t.begin(), t.end());
    printf("round %d  %-40s median %7.2f us  p10 %7.2f  p90 %7.2f\n", round, names[variant], t[t.size() / 2], t[t.size() / 10], t[t.size() * 9 / 10]);
  }
  CK(cudaGetLastError());
  return 0;
}
