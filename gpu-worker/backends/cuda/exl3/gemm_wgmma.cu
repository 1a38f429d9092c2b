// The sm_90a instantiations of the EXL3 prefill linear on wgmma (gemm_wgmma.cuh) and the policy
// every wgmma prefill launch asks. Compiled for sm_90a alone (CMakeLists.txt).
#include <atomic>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/device_attribute.h"
#include "gpu-worker/backends/cuda/core/env_policy.h"
#include "gpu-worker/backends/cuda/exl3/gemm_wgmma.cuh"
#include "gpu-worker/backends/cuda/exl3/launch_util.h"
#include "gpu-worker/backends/cuda/exl3/wgmma_prefill.h"

namespace ft::cuda::exl3dev {
namespace {

std::atomic<int> g_policy{policy_from_env("FLASHTIER_EXL3_WGMMA")};
std::atomic<unsigned long long> g_launches{0};

template <int K, int CB>
void launch_cb(const LinearArgs& a, cudaStream_t stream) {
  constexpr size_t smem = wg_smem_bytes<K>();
  FT_CUDA_CHECK(cudaFuncSetAttribute(exl3_gemm_wgmma_kernel<K, CB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  const int64_t tiles = (a.rows + kGemmRows - 1) / kGemmRows;
  exl3_gemm_wgmma_kernel<K, CB><<<static_cast<unsigned>(tiles * a.nblk), GemmShape<false>::kThreads, smem, stream>>>(a);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool wgmma_prefill() {
  if (g_policy.load(std::memory_order_relaxed) == 0) return false;  // Off
  if (!current_device_is_sm90() || !smem_fits(wg_smem_bytes<8>())) return false;
  // The image: a property of the build, the same for every 9.0 device (asked on the first).
  static const bool loads = kernel_image_loads(reinterpret_cast<const void*>(exl3_gemm_wgmma_kernel<3, 2>));
  return loads;
}
void set_wgmma_prefill(int policy) { g_policy.store(policy, std::memory_order_relaxed); }
int wgmma_prefill_policy() { return g_policy.load(std::memory_order_relaxed); }
unsigned long long wgmma_prefill_launches() { return g_launches.load(std::memory_order_relaxed); }
void count_wgmma_launch() { g_launches.fetch_add(1, std::memory_order_relaxed); }

void launch_gemm_wgmma(int K, int cb, const LinearArgs& a, cudaStream_t stream) {
  count_wgmma_launch();
  dispatch_k(K, [&](auto k) {
    dispatch_cb(cb, [&](auto c) { launch_cb<decltype(k)::value, decltype(c)::value>(a, stream); });
  });
}

}  // namespace ft::cuda::exl3dev
