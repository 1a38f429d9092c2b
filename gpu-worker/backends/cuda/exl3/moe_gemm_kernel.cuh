#pragma once
// The prefill form of the grouped EXL3 matmul (internal header, instantiated per K in moe_k*.cu):
// the experts a step gives many picks run the tiled prefill kernel's block (gemm_kernel.cuh:
// 8 warps, 128 rows per decoded tile) instead of exl3_moe_kernel's 32-row batches, so a prefill
// chunk decodes each crowded expert's trellis once per 128 of its picks rather than once per 32
// (and reads a zero-copy expert a quarter as often). Items are (active expert with at least
// p.min_rows picks, 128-row batch, projection, 128-column block), taken by a fixed persistent
// grid in order, so the CTAs working on one batch at a time share its rows in L2. The reduction
// and output transform are the linear's (gemm_block_sums, gemm_block_store, in either shape):
// a pick's row has the same bits from either form, wherever its expert lives.
#include "gpu-worker/backends/cuda/exl3/gemm_kernel.cuh"
#include "gpu-worker/backends/cuda/exl3/moe_kernel.cuh"

namespace ft::cuda::exl3dev {

// The items of the prefill form for one CTA: each item's running sums from `block_sums` (the
// mma.sync block of gemm_kernel.cuh, or its wgmma form) called as block_sums(trellis,
// pair_dwords, xh, first row, row end, live pairs, tot), then gemm_block_store. Every thread
// of the CTA calls it.
template <int K, bool WIDE, class BlockSums>
__device__ __forceinline__ void moe_gemm_items(const MoeArgs& p, uint32_t* smem, int* s_pre, BlockSums block_sums) {
  using S = GemmShape<WIDE>;
  moe_batch_scan<S::kThreads>(p, kGemmRows, s_pre);
  const int n_act = *p.n_active;
  const int nblk128 = static_cast<int>(p.out_p / 128);
  const int nblk = (nblk128 + S::kBlocks - 1) / S::kBlocks;
  const int per_batch = p.nproj * nblk;
  const int n_items = s_pre[n_act] * per_batch;
  const int64_t pair_dwords = p.in_p / 16 * LaneBits<K>::kStepDwords;
  for (int item = blockIdx.x; item < n_items; item += gridDim.x) {
    const int batch = item / per_batch;
    const int rest = item - batch * per_batch;
    const int pj = rest / nblk, blk = rest - pj * nblk;
    const int lo = moe_batch_owner(s_pre, n_act, batch);
    const int e = p.active[lo];
    const int s0 = p.offsets[e] + kGemmRows * (batch - s_pre[lo]);
    const int s_end = p.offsets[e + 1];
    const int proj = p.proj[pj];
    const Exl3ExpertPtrs& ex = p.table[e];
    GemmTot tot;
    block_sums(ex.trellis[proj] + S::kPairs * blk * pair_dwords, pair_dwords, p.xh[pj], s0, s_end,
               min(S::kPairs, 4 * (nblk128 - S::kBlocks * blk)), tot);
    const int64_t col0 = S::kCols * static_cast<int64_t>(blk);
    const int valid = static_cast<int>(p.out_cols - col0 < S::kCols ? p.out_cols - col0 : S::kCols);
    float* const out = p.out[pj] + col0;
    const int32_t* const pick = p.by_pick ? p.sorted_pick + s0 : nullptr;
    const int64_t ld = p.ld_out;
    gemm_block_store<K, WIDE>(tot, smem, min(kGemmRows, s_end - s0), ex.svh[proj] + col0, nullptr,
                              p.row_scale[pj] + s0,
                              [&](int r) { return out + (pick ? static_cast<int64_t>(pick[r]) : s0 + r) * ld; },
                              valid, false);
  }
}

template <int K, int CB, bool WIDE>
__global__ void __launch_bounds__(GemmShape<WIDE>::kThreads, 1) exl3_moe_gemm_kernel(const MoeArgs p) {
  extern __shared__ __align__(16) uint32_t smem_raw[];
  uint32_t* const smem = smem_align128(smem_raw);
  __shared__ int s_pre[kMoeMaxExperts + 1];
  moe_gemm_items<K, WIDE>(p, smem, s_pre,
                          [&](const uint32_t* trellis, int64_t pair_dwords, const __half* xh, int64_t s0, int64_t s_end,
                              int live_pairs, GemmTot& tot) {
                            gemm_block_sums<K, CB, WIDE>(trellis, pair_dwords, xh, p.in_p, s0, s_end, p.kc_steps, smem,
                                                         tot, live_pairs);
                          });
}

// `wide`: the policy asks for the wide shape (it runs where the device holds it, else narrow).
template <int K>
void launch_moe_gemm(int cb, int grid, const MoeArgs& a, bool wide, cudaStream_t stream);
template <int K>
bool moe_gemm_wide_fits();

}  // namespace ft::cuda::exl3dev
