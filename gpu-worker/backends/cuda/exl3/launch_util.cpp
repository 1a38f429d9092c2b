#include "gpu-worker/backends/cuda/exl3/launch_util.h"

#include <cuda_runtime.h>

#include <atomic>

#include "gpu-worker/backends/cuda/core/device_attribute.h"
#include "gpu-worker/backends/cuda/core/env_policy.h"
#include "gpu-worker/backends/cuda/exl3/exl3_linear.h"
#include "gpu-worker/backends/cuda/exl3/wgmma_prefill.h"

namespace ft::cuda::exl3dev {

namespace {

// Start values from FLASHTIER_EXL3_*=off|auto|on (core/env_policy.h): 0, 1 and 2 are the values of
// Exl3Programmatic and Exl3Wide.
std::atomic<int> g_programmatic{policy_from_env("FLASHTIER_EXL3_PDL")};  // an Exl3Programmatic value

std::atomic<int> g_wide{policy_from_env("FLASHTIER_EXL3_WIDE")};  // an Exl3Wide value
std::atomic<uint64_t> g_wide_launches{0};

}  // namespace

bool programmatic_launch(int64_t rows) {
  const int policy = g_programmatic.load(std::memory_order_relaxed);
  const bool want = policy == 2 || (policy == 1 && rows <= 4);  // On, or Auto up to four rows
  return want && current_device_attribute<cudaDevAttrComputeCapabilityMajor>() >= 9;
}

void set_programmatic_launch(int policy) { g_programmatic.store(policy, std::memory_order_relaxed); }

int programmatic_launch_policy() { return g_programmatic.load(std::memory_order_relaxed); }

bool smem_fits(size_t smem_bytes) {
  return static_cast<size_t>(current_device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>()) >= smem_bytes;
}
void set_wide_prefill(int policy) { g_wide.store(policy, std::memory_order_relaxed); }
int wide_prefill_policy() { return g_wide.load(std::memory_order_relaxed); }
bool wide_requested(bool pays) {
  const int w = wide_prefill_policy();
  return w == static_cast<int>(Exl3Wide::On) || (w == static_cast<int>(Exl3Wide::Auto) && pays && !wgmma_prefill());
}
void count_wide_launch() { g_wide_launches.fetch_add(1, std::memory_order_relaxed); }
uint64_t wide_launches() { return g_wide_launches.load(std::memory_order_relaxed); }

int sm_count() { return current_device_attribute<cudaDevAttrMultiProcessorCount>(); }

}  // namespace ft::cuda::exl3dev
