// The sm_90a instantiations of the grouped EXL3 prefill form on wgmma (moe_gemm_wgmma.cuh).
// Compiled for sm_90a alone (CMakeLists.txt).
#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/exl3/launch_util.h"
#include "gpu-worker/backends/cuda/exl3/moe_gemm_wgmma.cuh"
#include "gpu-worker/backends/cuda/exl3/wgmma_prefill.h"

namespace ft::cuda::exl3dev {

namespace {
template <int K, int CB>
void launch_cb(int grid, const MoeArgs& a, cudaStream_t stream) {
  constexpr size_t smem = wg_smem_bytes<K>();
  FT_CUDA_CHECK(cudaFuncSetAttribute(exl3_moe_gemm_wgmma_kernel<K, CB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  exl3_moe_gemm_wgmma_kernel<K, CB><<<grid, GemmShape<false>::kThreads, smem, stream>>>(a);
  FT_CUDA_CHECK_LAUNCH();
}
}  // namespace

void launch_moe_gemm_wgmma(int K, int cb, int grid, const MoeArgs& a, cudaStream_t stream) {
  count_wgmma_launch();
  dispatch_k(K, [&](auto k) {
    dispatch_cb(cb, [&](auto c) { launch_cb<decltype(k)::value, decltype(c)::value>(grid, a, stream); });
  });
}

}  // namespace ft::cuda::exl3dev
