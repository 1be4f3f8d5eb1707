// Kernels for the runtime's GPU tests (tests/runtime_gpu.rs). The root build.rs compiles every
// tests/cuda/*.cu to $OUT_DIR/cuda/<name>.cubin with mirage::nvcc.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

// out[i] = a * x[i] + y[i], for i < n.
extern "C" __global__ void axpy_f32(float a, const float* __restrict__ x, const float* __restrict__ y,
                                    float* __restrict__ out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}

// The same in f16 storage with f32 arithmetic.
extern "C" __global__ void axpy_f16(float a, const __half* __restrict__ x, const __half* __restrict__ y,
                                    __half* __restrict__ out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2half_rn(a * __half2float(x[i]) + __half2float(y[i]));
}

// The same in bf16 storage with f32 arithmetic.
extern "C" __global__ void axpy_bf16(float a, const __nv_bfloat16* __restrict__ x,
                                     const __nv_bfloat16* __restrict__ y, __nv_bfloat16* __restrict__ out,
                                     unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2bfloat16_rn(a * __bfloat162float(x[i]) + __bfloat162float(y[i]));
}

// Each block stages a chunk of `chunk` floats through dynamic shared memory (chunk * 4 bytes,
// which may exceed 48 KB) and writes it back reversed within the chunk, scaled by `scale`:
// out[b*chunk + i] = scale * x[b*chunk + chunk-1-i].
extern "C" __global__ void reverse_chunks_smem(const float* __restrict__ x, float* __restrict__ out,
                                               unsigned chunk, float scale) {
    extern __shared__ float smem[];
    const float* src = x + (size_t)blockIdx.x * chunk;
    float* dst = out + (size_t)blockIdx.x * chunk;
    for (unsigned i = threadIdx.x; i < chunk; i += blockDim.x) smem[i] = src[i];
    __syncthreads();
    for (unsigned i = threadIdx.x; i < chunk; i += blockDim.x) dst[i] = scale * smem[chunk - 1 - i];
}

// Reads a strided 2-D tensor x (strides s0, s1 in elements) into a row-major out[rows][cols].
extern "C" __global__ void gather_strided_f32(const float* __restrict__ x, unsigned long long s0,
                                              unsigned long long s1, float* __restrict__ out, unsigned rows,
                                              unsigned cols) {
    unsigned c = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned r = blockIdx.y;
    if (r < rows && c < cols) out[(size_t)r * cols + c] = x[r * s0 + c * s1];
}

// A grid-stride copy of n float4 values (for bandwidth checks).
extern "C" __global__ void copy_f32x4(const float4* __restrict__ x, float4* __restrict__ y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = x[i];
}
