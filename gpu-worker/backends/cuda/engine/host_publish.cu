#include "gpu-worker/backends/cuda/engine/host_publish.h"

#include <algorithm>

#include "gpu-worker/backends/cuda/core/cuda_check.h"

namespace ft::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) publish_kernel(const int32_t* ints, int64_t n_ints, int32_t* ints_host,
                                                           const float4* floats, int64_t n_float4, float4* floats_host) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = t; i < n_ints; i += stride) ints_host[i] = ints[i];
  for (int64_t i = t; i < n_float4; i += stride) floats_host[i] = floats[i];
  __threadfence_system();
}

}  // namespace

void publish_to_host(const int32_t* ints, int64_t n_ints, int32_t* ints_host, const float* floats, int64_t n_floats,
                     float* floats_host, cudaStream_t stream) {
  if (n_ints < 0 || n_floats < 0 || n_floats % 4 ||
      (reinterpret_cast<uintptr_t>(floats) | reinterpret_cast<uintptr_t>(floats_host)) % 16)
    throw Error("publish_to_host: " + std::to_string(n_floats) + " floats must be whole, aligned float4s");
  const int64_t n4 = n_floats / 4;
  const int64_t work = std::max(n_ints, n4);
  if (work == 0) return;
  // Enough CTAs that a 32-row step's inputs (512 KB) go out in a few µs; one at batch 1.
  const int blocks = static_cast<int>(std::min<int64_t>((work + 4 * kThreads - 1) / (4 * kThreads), 64));
  publish_kernel<<<blocks, kThreads, 0, stream>>>(ints, n_ints, ints_host, reinterpret_cast<const float4*>(floats),
                                                  n4, reinterpret_cast<float4*>(floats_host));
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
