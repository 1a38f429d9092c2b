#pragma once
// The prefill EXL3 linear kernel (internal header, instantiated per K in gemv_k*.cu): a CTA
// computes 128 rows of a block of pairs, each warp decoding one tile (tile w % 2 of pair w / 2)
// straight into its A fragments (the same staging and lane_fragment as the skinny kernel) and
// multiplying it with all 128 rows (16 row groups), so every tile is decoded once per CTA. The B
// fragments come from a cp.async-staged, bank-swizzled shared-memory copy of the permuted fp16
// rows. Chunks fold into the running sums exactly as WarpPair does and the output transform is
// finish_row, so every row has the skinny kernel's bits.
//
// Two shapes (GemmShape): narrow, 8 warps × 128 columns with the running sums in registers (one
// CTA of 219–233 registers per SM, every part); wide, 16 warps × 256 columns with the running
// sums in shared memory (128 KB, sm_90-class parts) — twice the warps per scheduler for the same
// decode per row. docs/perf.md (session 16): the narrow kernel waits on latency with 2 warps per
// scheduler, and 4 warps per scheduler with a tile decoded per 64 rows made it instruction-bound.
#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/exl3/gemv_kernel.cuh"
#include "gpu-worker/backends/cuda/exl3/launch_util.h"
#include "gpu-worker/backends/cuda/exl3/wgmma_prefill.h"

namespace ft::cuda::exl3dev {

constexpr int kGemmRows = 128;  // rows per CTA
constexpr int kGemmSteps = 4;   // k16 steps per stage
constexpr int kGemmStages = 3;
constexpr int kGemmXDwords = kGemmRows * kGemmSteps * 16 / 2;  // 16 KB of fp16 rows per stage
constexpr int kGemmGroups = kGemmRows / 8;                      // mma row groups per warp

template <bool WIDE>
struct GemmShape {
  static constexpr int kWarps = WIDE ? 16 : 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kPairs = kWarps / 2;
  static constexpr int kCols = 32 * kPairs;  // 128 or 256
  static constexpr int kBlocks = kCols / 128;
  // Running sums in shared memory (wide): [g][i][thread], each thread touching only its own.
  static constexpr size_t kTotBytes = WIDE ? size_t{kGemmGroups} * 4 * kThreads * 4 : 0;
};
constexpr int kGemmWarps = GemmShape<false>::kWarps;  // the narrow shape (the MoE prefill form)

// A warp's running sums in registers (narrow): [row group g][mma accumulator i] of its tile.
using GemmTot = float[kGemmGroups][4];

template <int K, bool WIDE = false>
constexpr int gemm_w_dwords() {  // pairs × kGemmSteps steps
  return GemmShape<WIDE>::kPairs * kGemmSteps * LaneBits<K>::kStepDwords;
}
template <int K, bool WIDE = false>
constexpr size_t gemm_stage_region_bytes() {
  const size_t stages = size_t{kGemmStages} * (gemm_w_dwords<K, WIDE>() + kGemmXDwords) * 4;
  const size_t tile = size_t{64} * 128 * 4;  // the epilogue works on 64 rows × 128 columns at a time
  return stages > tile ? stages : tile;
}
template <int K, bool WIDE = false>
constexpr size_t gemm_smem_bytes() {
  return gemm_stage_region_bytes<K, WIDE>() + GemmShape<WIDE>::kTotBytes + kSmemAlignSlack;
}

// The wide shape's shared memory fits this device (the linear kernel has no static shared memory;
// the MoE form's check, moe_gemm_wide_fits, adds its own).
template <int K>
bool gemm_wide_fits() {
  return smem_fits(gemm_smem_bytes<K, true>());
}

// Row n's 16-byte chunk c (c = 4·(32-input block) + lane quad) inside a staged x stage: odd rows
// swap their two 64-byte halves so one quarter-warp's rows 2m, 2m+1 use different banks.
__device__ __forceinline__ int gemm_x_chunk(int n, int c) { return n * 8 + (c ^ ((n & 1) << 2)); }

// A chunk's chain into its running sum (the first chunk's chain is the sum), the chain from zero
// again: the fold of the reduction contract, the same in every prefill block.
__device__ __forceinline__ void fold_chunk(float& total, float& chain, bool first) {
  total = first ? chain : __fadd_rn(total, chain);
  chain = 0.0f;
}

// The running sum (g, i) of this thread in the wide shape's shared-memory region.
template <bool WIDE, int K>
__device__ __forceinline__ float* gemm_tot_slot(uint32_t* smem, int g, int i) {
  float* tot = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(smem) + gemm_stage_region_bytes<K, WIDE>());
  return tot + (g * 4 + i) * GemmShape<WIDE>::kThreads + threadIdx.x;
}

// The main loop of one block × 128 rows: the running sums of warp w (tile w % 2 of pair w / 2)
// for rows [row0, row0 + 128) of xh — in `tot` (narrow) or in shared memory (wide); rows at or
// past row_end read zeros, and the upper 64 rows' mmas are skipped when none of them is below
// row_end. `blk_trellis`: the block's first pair's packed stream; pairs at or past `live_pairs`
// (a wide block's columns past the output) are neither read nor multiplied. Every thread of the
// CTA calls it; it ends with the CTA's stages drained and synchronised.
template <int K, int CB, bool WIDE = false>
__device__ __forceinline__ void gemm_block_sums(const uint32_t* __restrict__ blk_trellis, int64_t pair_dwords,
                                                const __half* __restrict__ xh, int64_t in_p, int64_t row0,
                                                int64_t row_end, int kc_steps, uint32_t* smem, GemmTot& tot,
                                                int live_pairs = GemmShape<WIDE>::kPairs) {
  using S = GemmShape<WIDE>;
  constexpr int kStep = LaneBits<K>::kStepDwords;
  constexpr int kW = gemm_w_dwords<K, WIDE>();
  constexpr int kStage = kW + kGemmXDwords;
  constexpr int kPairStage = kGemmSteps * kStep;  // one pair's dwords in a stage
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int pw = warp >> 1;
  // Narrow blocks are always whole (out_p is a multiple of 128): keep their bounds static.
  const int n_pairs = WIDE ? live_pairs : S::kPairs;
  const bool live = !WIDE || pw < live_pairs;  // uniform over the warp
  const int n_stages = static_cast<int>(in_p / 16 / kGemmSteps);
  const bool upper = row_end - row0 > kGemmRows / 2;  // uniform over the CTA

  auto issue = [&](int s) {
    uint32_t* buf = smem + (s % kGemmStages) * kStage;
    for (int q = tid; q < n_pairs * kPairStage / 4; q += S::kThreads) {
      const int pp = q / (kPairStage / 4), qq = q - pp * (kPairStage / 4);
      const uint32_t* src = blk_trellis + pp * pair_dwords + static_cast<int64_t>(s) * kPairStage + qq * 4;
      cp_async16(buf + pp * kPairStage + qq * 4, src);
    }
    uint32_t* xb = buf + kW;
    for (int q = tid; q < kGemmRows * 8; q += S::kThreads) {
      const int n = q >> 3, c = q & 7;
      const int64_t row = row0 + n;
      const bool valid = row < row_end;
      const __half* src = xh + (valid ? row : row0) * in_p + static_cast<int64_t>(s) * 64 + 8 * c;
      cp_async16_zfill(xb + gemm_x_chunk(n, c) * 4, src, valid);
    }
  };

  // The warp's tile is fixed: fold its word offsets into slot 0 so every index stays static.
  LaneGeom<K> geo;
  geo.init(lane);
  if (warp & 1) {
#pragma unroll
    for (int g = 0; g < LaneBits<K>::NGR; ++g) geo.off[0][g][0] = geo.off[1][g][0], geo.off[0][g][1] = geo.off[1][g][1];
  }
  float acc[kGemmGroups][4];
#pragma unroll
  for (int g = 0; g < kGemmGroups; ++g)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      acc[g][i] = 0.0f;
      if constexpr (WIDE) *gemm_tot_slot<WIDE, K>(smem, g, i) = 0.0f;
      else tot[g][i] = 0.0f;
    }

#pragma unroll
  for (int s = 0; s < kGemmStages - 1; ++s) {
    if (s < n_stages) issue(s);
    cp_async_commit();
  }
  const int kc_stages = kc_steps / kGemmSteps;
  for (int st = 0; st < n_stages; ++st) {
    // One barrier per stage: it publishes stage st and tells every warp is done with st − 1,
    // whose buffer the copies issued next overwrite.
    cp_async_wait<kGemmStages - 2>();
    __syncthreads();
    if (st + kGemmStages - 1 < n_stages) issue(st + kGemmStages - 1);
    cp_async_commit();
    const uint32_t* wst = smem + (st % kGemmStages) * kStage + pw * kPairStage;
    const uint4* xs = reinterpret_cast<const uint4*>(smem + (st % kGemmStages) * kStage + kW);
    if (live) {
#pragma unroll
      for (int sp = 0; sp < kGemmSteps / 2; ++sp) {
        uint32_t a[2][4];  // [step of the pair]
#pragma unroll
        for (int si = 0; si < 2; ++si) lane_fragment<K, CB>(wst + (2 * sp + si) * kStep, geo, 0, a[si]);
#pragma unroll
        for (int g = 0; g < kGemmGroups; ++g) {
          if (g >= kGemmGroups / 2 && !upper) break;
          const int n = 8 * g + (lane >> 2);
          const uint4 b = xs[gemm_x_chunk(n, 4 * sp + (lane & 3))];
          mma_16816(acc[g], a[0], b.x, b.y);  // ascending k16 steps within each chain
          mma_16816(acc[g], a[1], b.z, b.w);
        }
      }
    }
    if ((st + 1) % kc_stages == 0) {
      const bool first = st + 1 == kc_stages;
#pragma unroll
      for (int g = 0; g < kGemmGroups; ++g)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if constexpr (WIDE) fold_chunk(*gemm_tot_slot<WIDE, K>(smem, g, i), acc[g][i], first);
          else fold_chunk(tot[g][i], acc[g][i], first);
        }
    }
  }
  cp_async_wait<0>();
  __syncthreads();
}

// The output transform of the block's first `nrows` rows (finish_row, so the skinny kernel's
// bits), through a [64][128] tile in shared memory, one 128-column block and 64-row half at a
// time. svh, bias and dst(r) (the output row's first column) are the block's first column's;
// row_scale[r] by local row r; `valid`: columns of the block to store (past it: padding). Ends
// synchronised: smem may be reused at once.
template <int K, bool WIDE = false, class Dst>
__device__ __forceinline__ void gemm_block_store(const GemmTot& tot, uint32_t* smem, int nrows,
                                                 const __half* __restrict__ svh, const float* __restrict__ bias,
                                                 const float* __restrict__ row_scale, Dst dst, int valid,
                                                 bool accumulate) {
  using S = GemmShape<WIDE>;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int pw = warp >> 1, h = warp & 1;
  float* tile = reinterpret_cast<float*>(smem);  // [64][128]
  for (int b = 0; b < S::kBlocks; ++b) {
    const int bvalid = valid - 128 * b;
    if (bvalid <= 0) break;  // uniform over the CTA
    for (int half = 0; half < 2; ++half) {
      if (64 * half >= nrows) break;  // uniform over the CTA
      if ((pw >> 2) == b) {
#pragma unroll
        for (int g = 0; g < kGemmGroups / 2; ++g)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            float v;
            if constexpr (WIDE) v = *gemm_tot_slot<WIDE, K>(smem, g + half * (kGemmGroups / 2), i);
            else v = half ? tot[g + kGemmGroups / 2][i] : tot[g][i];
            tile[acc_row(g, lane, i) * 128 + acc_col(pw & 3, h, lane, i)] = v;
          }
      }
      __syncthreads();
      for (int r = warp; r < 64; r += S::kWarps) {
        const int row = 64 * half + r;
        if (row >= nrows) break;
        const float4 z = *reinterpret_cast<const float4*>(tile + r * 128 + 4 * lane);
        float v[4] = {z.x, z.y, z.z, z.w};
        finish_row(v, lane, svh + 128 * b, bias ? bias + 128 * b : nullptr, row_scale[row], dst(row) + 128 * b,
                   bvalid < 128 ? bvalid : 128, accumulate);
      }
      __syncthreads();
    }
  }
}

// Grid: row tiles × blocks of the shape (block index fastest).
template <int K, int CB, bool WIDE>
__global__ void __launch_bounds__(GemmShape<WIDE>::kThreads, 1) exl3_gemm_kernel(const LinearArgs p) {
  using S = GemmShape<WIDE>;
  extern __shared__ __align__(16) uint32_t smem_raw[];
  uint32_t* const smem = smem_align128(smem_raw);
  const int nblk = (p.nblk + S::kBlocks - 1) / S::kBlocks;
  const int blk = static_cast<int>(blockIdx.x % nblk);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x / nblk) * kGemmRows;
  const int64_t pair_dwords = p.in_p / 16 * LaneBits<K>::kStepDwords;
  const int live_pairs = min(S::kPairs, 4 * (p.nblk - S::kBlocks * blk));
  GemmTot tot;
  gemm_block_sums<K, CB, WIDE>(p.trellis + S::kPairs * blk * pair_dwords, pair_dwords, p.xh, p.in_p, row0, p.rows,
                               p.kc_steps, smem, tot, live_pairs);
  const int64_t col0 = S::kCols * static_cast<int64_t>(blk);
  const int valid = static_cast<int>(p.out - col0 < S::kCols ? p.out - col0 : S::kCols);
  const int nrows = static_cast<int>(p.rows - row0 < kGemmRows ? p.rows - row0 : kGemmRows);
  float* const y = p.y + row0 * p.ld_y + col0;
  const int64_t ld_y = p.ld_y;
  gemm_block_store<K, WIDE>(tot, smem, nrows, p.svh + col0, p.bias ? p.bias + col0 : nullptr, p.row_scale + row0,
                            [&](int r) { return y + r * ld_y; }, valid, p.accumulate != 0);
}

template <int K, int CB, bool WIDE>
void launch_gemm_shape(const LinearArgs& a, cudaStream_t stream) {
  using S = GemmShape<WIDE>;
  constexpr size_t smem = gemm_smem_bytes<K, WIDE>();  // > 48 KB: opt in (per device, so every time)
  FT_CUDA_CHECK(cudaFuncSetAttribute(exl3_gemm_kernel<K, CB, WIDE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  const int64_t tiles = (a.rows + kGemmRows - 1) / kGemmRows;
  const int64_t blocks = (a.nblk + S::kBlocks - 1) / S::kBlocks;
  if (WIDE) count_wide_launch();
  exl3_gemm_kernel<K, CB, WIDE><<<static_cast<unsigned>(tiles * blocks), S::kThreads, smem, stream>>>(a);
  FT_CUDA_CHECK_LAUNCH();
}

// `wide`: the policy asks for the wide shape (it runs where the device holds it, else narrow).
template <int K, int CB>
void launch_gemm_one(const LinearArgs& a, bool wide, cudaStream_t stream) {
  if (wide && gemm_wide_fits<K>()) launch_gemm_shape<K, CB, true>(a, stream);
  else if (wgmma_prefill()) launch_gemm_wgmma(K, CB, a, stream);  // sm_90: narrow on wgmma, same bits
  else launch_gemm_shape<K, CB, false>(a, stream);
}

}  // namespace ft::cuda::exl3dev
