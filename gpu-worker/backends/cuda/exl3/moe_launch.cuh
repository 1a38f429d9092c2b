#pragma once
// launch_moe<K>, launch_moe_gemm<K>: the codebook instantiations of exl3_moe_kernel and of its
// prefill form exl3_moe_gemm_kernel.
#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/exl3/moe_gemm_kernel.cuh"
#include "gpu-worker/backends/cuda/exl3/wgmma_prefill.h"

namespace ft::cuda::exl3dev {

template <int K, int CB>
void launch_moe_cb(int grid, const MoeArgs& a, cudaStream_t stream) {
  constexpr size_t smem = moe_smem_bytes<K>();
  exl3_moe_kernel<K, CB><<<grid, kWarps * 32, smem, stream>>>(a);
  FT_CUDA_CHECK_LAUNCH();
}

template <int K>
void launch_moe(int cb, int grid, const MoeArgs& a, cudaStream_t stream) {
  switch (cb) {
    case 0: return launch_moe_cb<K, 0>(grid, a, stream);
    case 1: return launch_moe_cb<K, 1>(grid, a, stream);
    default: return launch_moe_cb<K, 2>(grid, a, stream);
  }
}

template <int K, int CB, bool WIDE>
void launch_moe_gemm_cb(int grid, const MoeArgs& a, cudaStream_t stream) {
  constexpr size_t smem = gemm_smem_bytes<K, WIDE>();  // > 48 KB: opt in (per device, so every time)
  FT_CUDA_CHECK(cudaFuncSetAttribute(exl3_moe_gemm_kernel<K, CB, WIDE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  if (WIDE) count_wide_launch();
  exl3_moe_gemm_kernel<K, CB, WIDE><<<grid, GemmShape<WIDE>::kThreads, smem, stream>>>(a);
  FT_CUDA_CHECK_LAUNCH();
}

// The wide prefill form's static + dynamic shared memory fits this device (static: the batch
// scan's tables, as compiled; the same for every codebook).
template <int K>
bool moe_gemm_wide_fits() {
  static const size_t static_bytes = [] {
    cudaFuncAttributes fa{};
    FT_CUDA_CHECK(cudaFuncGetAttributes(&fa, exl3_moe_gemm_kernel<K, 2, true>));
    return fa.sharedSizeBytes;
  }();
  return smem_fits(static_bytes + gemm_smem_bytes<K, true>());
}

template <int K>
void launch_moe_gemm(int cb, int grid, const MoeArgs& a, bool wide, cudaStream_t stream) {
  if (wide && moe_gemm_wide_fits<K>()) {
    switch (cb) {
      case 0: return launch_moe_gemm_cb<K, 0, true>(grid, a, stream);
      case 1: return launch_moe_gemm_cb<K, 1, true>(grid, a, stream);
      default: return launch_moe_gemm_cb<K, 2, true>(grid, a, stream);
    }
  }
  if (wgmma_prefill()) return launch_moe_gemm_wgmma(K, cb, grid, a, stream);  // sm_90: narrow on wgmma
  switch (cb) {
    case 0: return launch_moe_gemm_cb<K, 0, false>(grid, a, stream);
    case 1: return launch_moe_gemm_cb<K, 1, false>(grid, a, stream);
    default: return launch_moe_gemm_cb<K, 2, false>(grid, a, stream);
  }
}

}  // namespace ft::cuda::exl3dev
