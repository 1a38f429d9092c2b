#include "gpu-worker/backends/cuda/exl3/launch_util.h"

#include <cuda_runtime.h>

#include <atomic>

#include "gpu-worker/backends/cuda/core/cuda_check.h"

namespace ft::cuda::exl3dev {

namespace {
std::atomic<bool> g_programmatic{false};
}  // namespace

bool programmatic_launch() {
  if (!g_programmatic.load(std::memory_order_relaxed)) return false;
  constexpr int kMaxDevices = 64;
  static std::atomic<int> major[kMaxDevices];
  int dev = 0;
  FT_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= kMaxDevices) dev = 0;
  int m = major[dev].load(std::memory_order_relaxed);
  if (m == 0) {
    FT_CUDA_CHECK(cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev));
    major[dev].store(m, std::memory_order_relaxed);
  }
  return m >= 9;
}

void set_programmatic_launch(bool on) { g_programmatic.store(on, std::memory_order_relaxed); }

int sm_count() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices];
  int dev = 0;
  FT_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= kMaxDevices) dev = 0;
  int n = cache[dev].load(std::memory_order_relaxed);
  if (n == 0) {
    FT_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    cache[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

}  // namespace ft::cuda::exl3dev
