#pragma once
// The prefill form of the grouped EXL3 matmul on wgmma (internal header; sm_90a only):
// exl3_moe_gemm_kernel's items, row batches and epilogue (moe_gemm_kernel.cuh, narrow shape) over
// gemm_block_sums_wgmma — the same bits, wherever an expert lives.
#include "gpu-worker/backends/cuda/exl3/gemm_wgmma.cuh"
#include "gpu-worker/backends/cuda/exl3/moe_gemm_kernel.cuh"

namespace ft::cuda::exl3dev {

template <int K, int CB>
__global__ void __launch_bounds__(GemmShape<false>::kThreads, 1) exl3_moe_gemm_wgmma_kernel(const MoeArgs p) {
#if FT_HAVE_WGMMA
  extern __shared__ __align__(16) uint32_t smem_raw[];
  uint32_t* const smem = smem_align1024(smem_raw);
  __shared__ int s_pre[kMoeMaxExperts + 1];
  moe_gemm_items<K, false>(p, smem, s_pre,
                           [&](const uint32_t* trellis, int64_t pair_dwords, const __half* xh, int64_t s0,
                               int64_t s_end, int, GemmTot& tot) {
                             gemm_block_sums_wgmma<K, CB>(trellis, pair_dwords, xh, p.in_p, s0, s_end, p.kc_steps,
                                                          smem, tot);
                           });
#endif
}

}  // namespace ft::cuda::exl3dev
