// Streaming-rate micro-benchmark: how fast do blocks pull a weight matrix through 16-byte
// cp.async into shared memory (4 stages, 256 threads, like the generated weight-streaming
// kernels and megakernel task bodies), depending on the shape of each block's slice?
//
//  - "tile SEG": a row-major [K, N] bf16 matrix, each block owns SEG bytes of every row (a column
//    tile, what a µGraph's column split of x·W reads); rows of 2·N bytes apart.
//  - "contiguous": each block owns one contiguous run of the same number of bytes (what a column
//    tile would be with the weight stored [N, K], Hugging Face's own layout).
//
// Every variant moves the same bytes (2 · K · N) with the same number of blocks; L2 is flushed
// before each timed launch; median of 20. Build and run:
//   nvcc -O3 -arch=sm_90a -o stream_pattern benches/micro/stream_pattern.cu && ./stream_pattern
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

constexpr int THREADS = 256, STAGES = 4, STAGE_BYTES = 16384;
constexpr int MAX_STAGES = 13;  // the deepest pipeline of the depth sweep (13 x 16 KiB = 208 KiB)

__device__ __forceinline__ void cp16(void* s, const void* g) {
  unsigned a = (unsigned)__cvta_generic_to_shared(s);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(g));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void wait_group() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Block b streams its slice: `seg` bytes of each of `rows_total` rows `pitch` bytes apart,
// starting at byte b * block_off (seg == pitch == STAGE_BYTES: one contiguous run). Each stage
// moves STAGE_BYTES.
template <int STAGES>
__global__ void stream_t(const char* __restrict__ w, long long block_off, long long pitch, int seg, long long rows_total,
                         float* sink) {
  extern __shared__ __align__(128) char smem[];
  const char* base = w + (long long)blockIdx.x * block_off;
  const int rows_per_stage = STAGE_BYTES / seg;          // rows of the slice per stage
  const long long iters = rows_total / rows_per_stage;
  const int vec_per_row = seg / 16;
  auto issue = [&](long long it) {
    char* dst = smem + (it % STAGES) * STAGE_BYTES;
    for (int v = threadIdx.x; v < STAGE_BYTES / 16; v += THREADS) {
      const int r = v / vec_per_row, c = v % vec_per_row;
      cp16(dst + v * 16, base + (it * rows_per_stage + r) * pitch + c * 16);
    }
  };
  for (int s = 0; s < STAGES - 1; ++s) { if (s < iters) issue(s); commit(); }
  float acc = 0.0f;
  for (long long it = 0; it < iters; ++it) {
    if (it + STAGES - 1 < iters) issue(it + STAGES - 1);
    commit();
    wait_group<STAGES - 1>();
    __syncthreads();
    acc += (float)smem[(it % STAGES) * STAGE_BYTES + threadIdx.x * 4];
    __syncthreads();
  }
  if (acc == 12345.0f) sink[blockIdx.x] = acc;
}
// The pattern sweep's pipeline: 4 stages, like the generated kernels' default.
#define stream stream_t<STAGES>

int main() {
  const long long K = 4096, N = 8192;  // one 64 MiB bf16 weight [K, N] (4096 x 8192, like an 8B gate)
  const long long bytes = K * N * 2;
  char* w; float* sink; char* flush;
  const size_t flush_bytes = 256ull << 20;
  CHECK(cudaMalloc(&w, bytes));
  CHECK(cudaMalloc(&sink, 4096 * sizeof(float)));
  CHECK(cudaMalloc(&flush, flush_bytes));
  CHECK(cudaMemset(w, 1, bytes));
  CHECK(cudaFuncSetAttribute(stream, cudaFuncAttributeMaxDynamicSharedMemorySize, STAGES * STAGE_BYTES));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  auto time = [&](auto launch) {
    std::vector<float> ms;
    for (int i = 0; i < 23; ++i) {
      CHECK(cudaMemsetAsync(flush, i, flush_bytes));
      CHECK(cudaEventRecord(a));
      launch();
      CHECK(cudaEventRecord(b));
      CHECK(cudaEventSynchronize(b));
      float t;
      CHECK(cudaEventElapsedTime(&t, a, b));
      if (i >= 3) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2] * 1000.0f;  // µs
  };
  // copy bandwidth: device-to-device copy of the weight
  char* dst;
  CHECK(cudaMalloc(&dst, bytes));
  const float copy_us = time([&] { CHECK(cudaMemcpyAsync(dst, w, bytes, cudaMemcpyDeviceToDevice)); });
  printf("copy %lld MiB: %.1f us, %.2f TB/s (read + write)\n", bytes >> 20, copy_us, 2.0 * bytes / copy_us / 1e6);
  // (row pitch, segment bytes, blocks): column tiles as the decoder's tasks read them
  struct Case { long long pitch; int seg; int blocks; const char* what; };
  const Case cases[] = {
      {16384, 128, 128, "1B gate/up: 64 bf16 columns of 8192"},
      {16384, 64, 256, "32 columns of 8192"},
      {16384, 256, 64, "128 columns of 8192"},
      {4096, 32, 128, "1B down/q: 16 columns of 2048"},
      {4096, 128, 32, "64 columns of 2048"},
      {28672, 128, 224, "8B gate: 64 columns of 14336"},
  };
  for (const Case& c : cases) {
    const long long per_stage = STAGE_BYTES / c.seg;
    const long long rows = bytes / ((long long)c.seg * c.blocks) / per_stage * per_stage;
    const long long moved = rows * c.seg * c.blocks;
    if ((long long)c.blocks * c.seg > c.pitch && c.pitch != STAGE_BYTES) continue;
    const float t = time([&] { stream<<<c.blocks, THREADS, STAGES * STAGE_BYTES>>>(w, c.seg, c.pitch, c.seg, rows, sink); });
    CHECK(cudaGetLastError());
    const long long per_block = moved / c.blocks;
    const float tc = time([&] {
      stream<<<c.blocks, THREADS, STAGES * STAGE_BYTES>>>(w, per_block, STAGE_BYTES, STAGE_BYTES, per_block / STAGE_BYTES, sink);
    });
    CHECK(cudaGetLastError());
    printf("%-38s blocks %4d, %3d-byte rows %5.0f B apart: %7.1f us %.2f TB/s | each block one contiguous run of %lld KiB: %7.1f us %.2f TB/s\n",
           c.what, c.blocks, c.seg, (double)c.pitch, t, moved / t / 1e6, per_block >> 10, tc, moved / tc / 1e6);
  }
  for (int blocks : {132, 264, 528}) {
    const long long per_block = bytes / blocks / STAGE_BYTES * STAGE_BYTES;
    const float tc = time([&] {
      stream<<<blocks, THREADS, STAGES * STAGE_BYTES>>>(w, per_block, STAGE_BYTES, STAGE_BYTES, per_block / STAGE_BYTES, sink);
    });
    CHECK(cudaGetLastError());
    printf("contiguous runs, blocks %4d x %lld KiB: %7.1f us %.2f TB/s\n", blocks, per_block >> 10, tc, per_block * blocks / tc / 1e6);
  }
  // Pipeline depth: 128 blocks (one per SM) of 64-column tiles, like the 1B gate/up tasks, over a
  // 256 MiB weight (launch and ramp a smaller share than the 64 MiB cases above), 2..13 stages.
  {
    char* big;
    const long long big_bytes = 4 * bytes;
    CHECK(cudaMalloc(&big, big_bytes));
    CHECK(cudaMemset(big, 1, big_bytes));
    const int blocks = 128, seg = 128;
    const long long pitch = seg * blocks;
    const long long per_stage = STAGE_BYTES / seg;
    const long long rows = big_bytes / pitch / per_stage * per_stage;
    const long long moved = rows * seg * blocks;
    auto depth = [&](auto kernel, int stages) {
      CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, stages * STAGE_BYTES));
      const float t = time([&] { kernel<<<blocks, THREADS, stages * STAGE_BYTES>>>(big, seg, pitch, seg, rows, sink); });
      CHECK(cudaGetLastError());
      printf("depth %2d stages x 16 KiB (%3d KiB in flight), 128 blocks of 64-column tiles, %lld MiB: %7.1f us %.2f TB/s\n",
             stages, (stages - 1) * 16, moved >> 20, t, moved / t / 1e6);
    };
    depth(stream_t<2>, 2);
    depth(stream_t<4>, 4);
    depth(stream_t<6>, 6);
    depth(stream_t<8>, 8);
    depth(stream_t<10>, 10);
    depth(stream_t<MAX_STAGES>, MAX_STAGES);
  }
  return 0;
}
