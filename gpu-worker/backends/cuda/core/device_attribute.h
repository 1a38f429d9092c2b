#pragma once
// An attribute of the calling thread's current device, queried once per device: launchers ask
// on every call (compute capability, SM count, shared-memory opt-in), the driver once.
#include <cuda_runtime.h>

#include <atomic>

#include "gpu-worker/backends/cuda/core/cuda_check.h"

namespace ft::cuda {

template <cudaDeviceAttr Attr>
int current_device_attribute() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices];  // value + 1; 0 marks "not yet queried"
  int dev = 0;
  FT_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= kMaxDevices) dev = 0;
  const int c = cache[dev].load(std::memory_order_relaxed);
  if (c != 0) return c - 1;
  int v = 0;
  FT_CUDA_CHECK(cudaDeviceGetAttribute(&v, Attr, dev));
  cache[dev].store(v + 1, std::memory_order_relaxed);
  return v;
}

// Whether this build holds an image of `kernel` the current device can run (cudaFuncGetAttributes
// fails otherwise — sm_90a code on anything but compute capability 9.0); a failed query leaves
// no error behind. A property of the build and the architecture: callers cache it.
inline bool kernel_image_loads(const void* kernel) {
  cudaFuncAttributes attr{};
  const cudaError_t e = cudaFuncGetAttributes(&attr, kernel);
  if (e != cudaSuccess) (void)cudaGetLastError();
  return e == cudaSuccess;
}

// Compute capability 9.0 exactly: the only devices sm_90a code (wgmma) runs on.
inline bool current_device_is_sm90() {
  return current_device_attribute<cudaDevAttrComputeCapabilityMajor>() == 9 &&
         current_device_attribute<cudaDevAttrComputeCapabilityMinor>() == 0;
}

}  // namespace ft::cuda
