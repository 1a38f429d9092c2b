#pragma once
// A linear kernel's launch over its items (nvcc only): opted in to its shared memory, then one
// block per item, or — persistent — no more blocks than the GPU holds at once (the kernels
// stride over the rest).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/programmatic.cuh"
#include "gpu-worker/backends/cuda/ops/linear_launch.h"

namespace ft::cuda::lin {

// `early`: launched to start before the kernel ahead ends (core/programmatic.cuh), where the
// stream allows it; the kernel must then wait before touching what that kernel writes.
template <class... KernelArgs, class... Args>
void launch_items_early(bool early, void (*kernel)(KernelArgs...), int threads, size_t smem, int64_t items,
                        bool persistent, cudaStream_t stream, Args&&... args) {
  const int per_sm = prepare_kernel(reinterpret_cast<const void*>(kernel), threads, smem);
  const int64_t grid =
      persistent ? std::min<int64_t>(items, static_cast<int64_t>(per_sm) * current_device_limits().sm_count) : items;
  launch_maybe_early(early, kernel, static_cast<unsigned>(grid), threads, smem, stream, std::forward<Args>(args)...);
}

template <class... KernelArgs, class... Args>
void launch_items(void (*kernel)(KernelArgs...), int threads, size_t smem, int64_t items, bool persistent,
                  cudaStream_t stream, Args&&... args) {
  launch_items_early(false, kernel, threads, smem, items, persistent, stream, std::forward<Args>(args)...);
}

}  // namespace ft::cuda::lin
