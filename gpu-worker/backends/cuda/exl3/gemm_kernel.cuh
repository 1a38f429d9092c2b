#pragma once
// The prefill EXL3 linear kernel (internal header, instantiated per K in gemv_k*.cu): a CTA of
// 8 warps computes a 128-column block (4 pairs, 8 tiles) for 128 rows. Warp w decodes tile w % 2
// of pair w / 2 straight into its A fragments (the same staging and lane_fragment as the skinny
// kernel) and multiplies it with all 128 rows (16 row groups), so every tile is decoded once per
// CTA: decode, not the tensor cores, bounds this kernel (docs/perf.md), and one tile per warp
// halves its share per mma against two tiles × 64 rows for the same 128 accumulator registers.
// The B fragments come from a cp.async-staged, bank-swizzled shared-memory copy of the permuted
// fp16 rows. Chunks fold into the running sums exactly as WarpPair does and the output transform
// is finish_row, so every row has the skinny kernel's bits.
#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/exl3/gemv_kernel.cuh"

namespace ft::cuda::exl3dev {

constexpr int kGemmWarps = 8;
constexpr int kGemmRows = 128;   // rows per CTA
constexpr int kGemmSteps = 4;    // k16 steps per stage
constexpr int kGemmStages = 3;
constexpr int kGemmXDwords = kGemmRows * kGemmSteps * 16 / 2;  // 16 KB of fp16 rows per stage
constexpr int kGemmGroups = kGemmRows / 8;                      // mma row groups per warp

// A warp's running sums: [row group g][mma accumulator i] of its tile.
using GemmTot = float[kGemmGroups][4];

template <int K>
constexpr int gemm_w_dwords() {  // 4 pairs × kGemmSteps steps
  return 4 * kGemmSteps * LaneBits<K>::kStepDwords;
}
template <int K>
constexpr size_t gemm_smem_bytes() {
  const size_t stages = size_t{kGemmStages} * (gemm_w_dwords<K>() + kGemmXDwords) * 4;
  const size_t tile = size_t{64} * 128 * 4;  // the epilogue works on 64 rows at a time
  return (stages > tile ? stages : tile) + kSmemAlignSlack;
}

// Row n's 16-byte chunk c (c = 4·(32-input block) + lane quad) inside a staged x stage: odd rows
// swap their two 64-byte halves so one quarter-warp's rows 2m, 2m+1 use different banks.
__device__ __forceinline__ int gemm_x_chunk(int n, int c) { return n * 8 + (c ^ ((n & 1) << 2)); }

// The main loop of one 128-column block × 128 rows: tot of warp w (tile w % 2 of pair w / 2) for
// rows [row0, row0 + 128) of xh; rows at or past row_end read zeros, and the upper 64 rows' mmas
// are skipped when none of them is below row_end. `blk_trellis`: the block's first pair's packed
// stream (trellis + 4·blk·pair_dwords). Every thread of the CTA calls it; it ends with the CTA's
// stages drained and synchronised.
template <int K, int CB>
__device__ __forceinline__ void gemm_block_sums(const uint32_t* __restrict__ blk_trellis, int64_t pair_dwords,
                                                const __half* __restrict__ xh, int64_t in_p, int64_t row0,
                                                int64_t row_end, int kc_steps, uint32_t* smem, GemmTot& tot) {
  constexpr int kStep = LaneBits<K>::kStepDwords;
  constexpr int kW = gemm_w_dwords<K>();
  constexpr int kStage = kW + kGemmXDwords;
  constexpr int kPairStage = kGemmSteps * kStep;  // one pair's dwords in a stage
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int pw = warp >> 1;
  const int n_stages = static_cast<int>(in_p / 16 / kGemmSteps);
  const bool upper = row_end - row0 > kGemmRows / 2;  // uniform over the CTA

  auto issue = [&](int s) {
    uint32_t* buf = smem + (s % kGemmStages) * kStage;
    for (int q = tid; q < 4 * kPairStage / 4; q += kGemmWarps * 32) {
      const int pp = q / (kPairStage / 4), qq = q - pp * (kPairStage / 4);
      const uint32_t* src = blk_trellis + pp * pair_dwords + static_cast<int64_t>(s) * kPairStage + qq * 4;
      cp_async16(buf + pp * kPairStage + qq * 4, src);
    }
    uint32_t* xb = buf + kW;
    for (int q = tid; q < kGemmRows * 8; q += kGemmWarps * 32) {
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
    for (int i = 0; i < 4; ++i) acc[g][i] = 0.0f, tot[g][i] = 0.0f;

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
    if ((st + 1) % kc_stages == 0) {
      const bool first = st + 1 == kc_stages;
#pragma unroll
      for (int g = 0; g < kGemmGroups; ++g)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          tot[g][i] = first ? acc[g][i] : __fadd_rn(tot[g][i], acc[g][i]);
          acc[g][i] = 0.0f;
        }
    }
  }
  cp_async_wait<0>();
  __syncthreads();
}

// The output transform of the block's first `nrows` rows (finish_row, so the skinny kernel's
// bits), through a [64][128] tile in shared memory, one 64-row half at a time. svh and bias are
// the block's (already offset by its first column); row_scale[r] and dst(r) (the output row's
// first column of the block) by local row r. Ends synchronised: smem may be reused at once.
template <class Dst>
__device__ __forceinline__ void gemm_block_store(const GemmTot& tot, uint32_t* smem, int nrows,
                                                 const __half* __restrict__ svh, const float* __restrict__ bias,
                                                 const float* __restrict__ row_scale, Dst dst, int valid,
                                                 bool accumulate) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int pw = warp >> 1, h = warp & 1;
  float* tile = reinterpret_cast<float*>(smem);  // [64][128]
  for (int half = 0; half < 2; ++half) {
    if (64 * half >= nrows) break;  // uniform over the CTA
#pragma unroll
    for (int g = 0; g < kGemmGroups / 2; ++g)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        tile[acc_row(g, lane, i) * 128 + acc_col(pw, h, lane, i)] = half ? tot[g + kGemmGroups / 2][i] : tot[g][i];
    __syncthreads();
    for (int r = warp; r < 64; r += kGemmWarps) {
      const int row = 64 * half + r;
      if (row >= nrows) break;
      const float4 z = *reinterpret_cast<const float4*>(tile + r * 128 + 4 * lane);
      float v[4] = {z.x, z.y, z.z, z.w};
      finish_row(v, lane, svh, bias, row_scale[row], dst(row), valid, accumulate);
    }
    __syncthreads();
  }
}

template <int K, int CB>
__global__ void __launch_bounds__(kGemmWarps * 32, 1) exl3_gemm_kernel(const LinearArgs p) {
  extern __shared__ __align__(16) uint32_t smem_raw[];
  uint32_t* const smem = smem_align128(smem_raw);
  const int blk = static_cast<int>(blockIdx.x % p.nblk);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x / p.nblk) * kGemmRows;
  const int64_t pair_dwords = p.in_p / 16 * LaneBits<K>::kStepDwords;
  GemmTot tot;
  gemm_block_sums<K, CB>(p.trellis + 4 * blk * pair_dwords, pair_dwords, p.xh, p.in_p, row0, p.rows, p.kc_steps,
                         smem, tot);
  const int64_t col0 = 128 * static_cast<int64_t>(blk);
  const int valid = static_cast<int>(p.out - col0 < 128 ? p.out - col0 : 128);
  const int nrows = static_cast<int>(p.rows - row0 < kGemmRows ? p.rows - row0 : kGemmRows);
  float* const y = p.y + row0 * p.ld_y + col0;
  const int64_t ld_y = p.ld_y;
  gemm_block_store(tot, smem, nrows, p.svh + col0, p.bias ? p.bias + col0 : nullptr, p.row_scale + row0,
                   [&](int r) { return y + r * ld_y; }, valid, p.accumulate != 0);
}

template <int K, int CB>
void launch_gemm_one(const LinearArgs& a, cudaStream_t stream) {
  constexpr size_t smem = gemm_smem_bytes<K>();  // > 48 KB: opt in (per device, so every time)
  FT_CUDA_CHECK(cudaFuncSetAttribute(exl3_gemm_kernel<K, CB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  const int64_t tiles = (a.rows + kGemmRows - 1) / kGemmRows;
  exl3_gemm_kernel<K, CB><<<static_cast<unsigned>(tiles * a.nblk), kGemmWarps * 32, smem, stream>>>(a);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda::exl3dev
