#include "gpu-worker/backends/cuda/ops/linear_launch.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/env_policy.h"
#include "shared/core/error.h"

namespace ft::cuda::lin {
namespace {

std::mutex g_mutex;
std::atomic<int> g_programmatic{policy_from_env("FLASHTIER_LINEAR_PDL")};
std::atomic<int> g_bands{policy_from_env("FLASHTIER_LINEAR_BANDS")};
std::atomic<int> g_trigger{policy_from_env("FLASHTIER_LINEAR_TRIGGER")};

}  // namespace

const DeviceLimits& current_device_limits() {
  int dev = 0;
  FT_CUDA_CHECK(cudaGetDevice(&dev));
  static std::map<int, std::unique_ptr<DeviceLimits>> cache;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = cache.find(dev);
  if (it != cache.end()) return *it->second;
  auto d = std::make_unique<DeviceLimits>();
  d->device = dev;
  FT_CUDA_CHECK(cudaDeviceGetAttribute(&d->sm_count, cudaDevAttrMultiProcessorCount, dev));
  FT_CUDA_CHECK(cudaDeviceGetAttribute(&d->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  FT_CUDA_CHECK(cudaDeviceGetAttribute(&d->cc_major, cudaDevAttrComputeCapabilityMajor, dev));
  FT_CUDA_CHECK(cudaDeviceGetAttribute(&d->l2_bytes, cudaDevAttrL2CacheSize, dev));
  FT_CUDA_CHECK(cudaDeviceGetAttribute(&d->cc_minor, cudaDevAttrComputeCapabilityMinor, dev));
  return *cache.emplace(dev, std::move(d)).first->second;
}

int prepare_kernel(const void* func, int threads, size_t smem_bytes) {
  int dev = 0;
  FT_CUDA_CHECK(cudaGetDevice(&dev));
  static std::map<std::pair<int, std::pair<const void*, size_t>>, int> cache;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = cache.find({dev, {func, smem_bytes}});
    if (it != cache.end()) return it->second;
  }
  const DeviceLimits& lim = current_device_limits();
  // The opt-in limit covers static and dynamic shared memory together.
  cudaFuncAttributes attr{};
  FT_CUDA_CHECK(cudaFuncGetAttributes(&attr, func));
  const size_t dyn_max = static_cast<size_t>(lim.smem_optin) - attr.sharedSizeBytes;
  if (smem_bytes > dyn_max)
    throw Error("linear kernel needs " + std::to_string(smem_bytes) +
                " bytes of dynamic shared memory, the device allows " + std::to_string(dyn_max) + " next to its " +
                std::to_string(attr.sharedSizeBytes) + " static bytes");
  // The device maximum, not this launch's size: a later launch of the same kernel with more
  // shared memory must not find a smaller limit set.
  if (smem_bytes > 48 * 1024)
    FT_CUDA_CHECK(cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dyn_max)));
  int blocks = 0;
  FT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, func, threads, smem_bytes));
  if (blocks < 1)
    throw Error("linear kernel does not fit on an SM (" + std::to_string(threads) + " threads, " +
                std::to_string(smem_bytes) + " bytes of shared memory)");
  std::lock_guard<std::mutex> lock(g_mutex);
  cache[{dev, {func, smem_bytes}}] = blocks;
  return blocks;
}

bool linear_programmatic(int64_t rows) {
  const int policy = g_programmatic.load(std::memory_order_relaxed);
  return policy != 0 && rows <= 8 && current_device_limits().cc_major >= 9;
}

void set_linear_programmatic(int policy) { g_programmatic.store(policy, std::memory_order_relaxed); }

bool linear_trigger() {
  return g_trigger.load(std::memory_order_relaxed) != 0 && current_device_limits().cc_major >= 9;
}
void set_linear_trigger(int policy) { g_trigger.store(policy, std::memory_order_relaxed); }

int64_t dense_band(int64_t n_blocks, int block_n, int64_t in8) {
  if (g_bands.load(std::memory_order_relaxed) == 0 || n_blocks <= 1) return n_blocks > 0 ? n_blocks : 1;
  // A sixth of L2 for the band's weights (8 MB on the H100 and H200, 1 MB on an RTX 3090): the
  // row tiles in flight and other data keep the rest.
  const int64_t band_bytes = static_cast<int64_t>(current_device_limits().l2_bytes) / 6;
  const int64_t per_block = static_cast<int64_t>(block_n) * in8 * 2;
  return std::clamp<int64_t>(band_bytes / per_block, 1, n_blocks);
}
void set_linear_bands(int policy) { g_bands.store(policy, std::memory_order_relaxed); }

}  // namespace ft::cuda::lin
