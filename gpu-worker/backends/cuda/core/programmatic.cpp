#include "gpu-worker/backends/cuda/core/programmatic.h"

#include <atomic>

#include "gpu-worker/backends/cuda/core/device_attribute.h"
#include "gpu-worker/backends/cuda/core/env_policy.h"

namespace ft::cuda {
namespace {

std::atomic<int> g_chain{policy_from_env("FLASHTIER_CHAIN_PDL")};

}  // namespace

bool chain_programmatic() {
  return g_chain.load(std::memory_order_relaxed) == 2 &&
         current_device_attribute<cudaDevAttrComputeCapabilityMajor>() >= 9;
}

void set_chain_programmatic(int policy) { g_chain.store(policy, std::memory_order_relaxed); }

}  // namespace ft::cuda
