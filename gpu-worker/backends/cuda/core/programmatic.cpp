#include "gpu-worker/backends/cuda/core/programmatic.h"

#include <cuda_runtime.h>

#include <atomic>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/env_policy.h"

namespace ft::cuda {
namespace {

std::atomic<int> g_chain{policy_from_env("FLASHTIER_CHAIN_PDL")};

bool device_has_it() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices];  // 0 unknown, 1 no, 2 yes
  int dev = 0;
  FT_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= kMaxDevices) dev = 0;
  int v = cache[dev].load(std::memory_order_relaxed);
  if (v == 0) {
    int major = 0;
    FT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    v = major >= 9 ? 2 : 1;
    cache[dev].store(v, std::memory_order_relaxed);
  }
  return v == 2;
}

}  // namespace

bool chain_programmatic() { return g_chain.load(std::memory_order_relaxed) == 2 && device_has_it(); }

void set_chain_programmatic(int policy) { g_chain.store(policy, std::memory_order_relaxed); }

}  // namespace ft::cuda
