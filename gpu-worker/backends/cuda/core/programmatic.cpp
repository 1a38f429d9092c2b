#include "gpu-worker/backends/cuda/core/programmatic.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "gpu-worker/backends/cuda/core/device_attribute.h"
#include "gpu-worker/backends/cuda/core/env_policy.h"

namespace ft::cuda {
namespace {

std::atomic<int> g_chain{policy_from_env("FLASHTIER_CHAIN_PDL")};
thread_local std::vector<cudaStream_t> t_memop_tails;  // streams whose last op (this thread) is a memop

}  // namespace

bool chain_programmatic() {
  return g_chain.load(std::memory_order_relaxed) != 0 &&
         current_device_attribute<cudaDevAttrComputeCapabilityMajor>() >= 9;
}

void set_chain_programmatic(int policy) { g_chain.store(policy, std::memory_order_relaxed); }

void note_stream_memop(cudaStream_t s) {
  if (std::find(t_memop_tails.begin(), t_memop_tails.end(), s) == t_memop_tails.end()) t_memop_tails.push_back(s);
}

bool take_stream_memop(cudaStream_t s) {
  if (t_memop_tails.empty()) return false;
  const auto it = std::find(t_memop_tails.begin(), t_memop_tails.end(), s);
  if (it == t_memop_tails.end()) return false;
  t_memop_tails.erase(it);
  return true;
}

}  // namespace ft::cuda
