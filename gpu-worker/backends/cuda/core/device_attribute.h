#pragma once
// An attribute of the calling thread's current device, queried once per device: launchers ask
// on every call (compute capability, SM count, shared-memory opt-in), the driver once.
#include <cuda_runtime.h>

#include <atomic>

#include "gpu-worker/backends/cuda/core/cuda_check.h"

namespace ft::cuda {

// Attributes asked for here are never 0 on a real device (0 marks "not yet queried").
template <cudaDeviceAttr Attr>
int current_device_attribute() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices];
  int dev = 0;
  FT_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= kMaxDevices) dev = 0;
  int v = cache[dev].load(std::memory_order_relaxed);
  if (v == 0) {
    FT_CUDA_CHECK(cudaDeviceGetAttribute(&v, Attr, dev));
    cache[dev].store(v, std::memory_order_relaxed);
  }
  return v;
}

}  // namespace ft::cuda
