#include "gpu-worker/backends/cuda/engine/device_fill.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "gpu-worker/backends/cuda/core/cuda_check.h"

namespace ft::cuda {

namespace {

// splitmix64: a well-mixed 64-bit hash of the element index.
__device__ inline float uniform01(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

__global__ void fill_f16_kernel(__half* dst, int64_t rows, int64_t cols, int64_t ld, float amp, uint64_t seed) {
  const int64_t n = rows * ld;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i % ld;
    dst[i] = __float2half_rn(c < cols ? (uniform01(seed, i) * 2.0f - 1.0f) * amp : 0.0f);
  }
}

__global__ void fill_bf16_kernel(uint16_t* dst, int64_t n, float amp, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const __nv_bfloat16 b = __float2bfloat16_rn((uniform01(seed, i) * 2.0f - 1.0f) * amp);
    dst[i] = *reinterpret_cast<const uint16_t*>(&b);
  }
}

__global__ void fill_f32_kernel(float* dst, int64_t n, float amp, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = (uniform01(seed, i) * 2.0f - 1.0f) * amp;
}

int blocks_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + 255) / 256, 65536)); }

}  // namespace

void fill_uniform_f16(__half* dst, int64_t rows, int64_t cols, int64_t ld, float amp, uint64_t seed,
                      cudaStream_t stream) {
  if (rows * ld == 0) return;
  fill_f16_kernel<<<blocks_for(rows * ld), 256, 0, stream>>>(dst, rows, cols, ld, amp, seed);
  FT_CUDA_CHECK_LAUNCH();
}

void fill_uniform_bf16(uint16_t* dst, int64_t n, float amp, uint64_t seed, cudaStream_t stream) {
  if (n == 0) return;
  fill_bf16_kernel<<<blocks_for(n), 256, 0, stream>>>(dst, n, amp, seed);
  FT_CUDA_CHECK_LAUNCH();
}

void fill_uniform_f32(float* dst, int64_t n, float amp, uint64_t seed, cudaStream_t stream) {
  if (n == 0) return;
  fill_f32_kernel<<<blocks_for(n), 256, 0, stream>>>(dst, n, amp, seed);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
