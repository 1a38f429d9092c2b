#pragma once
// The prefill EXL3 block on Hopper's warpgroup MMA (internal header; sm_90a translation units
// only): the narrow block of gemm_kernel.cuh — 8 warps, warp w decoding tile w % 2 of pair w / 2
// of a 128-column block into its A fragment, 128 rows per CTA, chunks folded into running sums —
// with each k16 step's 16 mma.sync over the row groups replaced by one wgmma per warpgroup: A
// (its four warps' decoded tiles, 64 outputs) from registers, B (the 128 rows) from shared
// memory. The accumulators keep mma.sync's layout (element 4g + i of a warpgroup's tile is
// acc[g][i] of the narrow kernel), so gemm_block_store and every bit stay the same.
//
// B must be K-major and natural (16 consecutive inputs per k16 step), while the rows in global
// memory are permuted for the skinny kernels' fragments (device.cuh, permuted_pos). Each thread
// therefore stages activations through registers: a 16-byte load of chunk (32-input block,
// lane quad q) holds inputs {2q, 2q+1, 2q+8, 2q+9} of the block's two k16 steps, and its four
// words are stored where the 128-byte swizzled layout (ops/linear_mma.cuh, tile_offset) keeps
// those inputs. A stage's rows are loaded one stage ahead and stored one stage ahead of use;
// the trellis still streams with cp.async.
#include "gpu-worker/backends/cuda/exl3/gemm_kernel.cuh"
#include "gpu-worker/backends/cuda/ops/linear_mma.cuh"
#include "gpu-worker/backends/cuda/ops/linear_wgmma.cuh"

namespace ft::cuda::exl3dev {

constexpr int kWgStages = 3;
constexpr int kWgXBytes = kGemmRows * 128;  // 16 KB of rows per stage (64 inputs each)

template <int K>
constexpr int wg_stage_bytes() {  // rows first (1024-byte aligned for the swizzle), then trellis
  const int bytes = kWgXBytes + gemm_w_dwords<K, false>() * 4;
  return (bytes + 1023) / 1024 * 1024;
}
template <int K>
constexpr size_t wg_smem_bytes() {
  const size_t stages = size_t{kWgStages} * wg_stage_bytes<K>();
  const size_t tile = size_t{64} * 128 * 4;  // gemm_block_store's [64][128] tile
  return (stages > tile ? stages : tile) + 1024;
}

// The CTA's dynamic shared memory rounded up to 1024 bytes (the swizzle atom) in the shared
// window's own addresses, which are what the swizzle and the wgmma descriptors see.
__device__ __forceinline__ uint32_t* smem_align1024(uint32_t* raw) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(raw));
  return raw + (((a + 1023u) & ~1023u) - a) / 4;
}

#if FT_HAVE_WGMMA
// Rows [row0, row0 + 128) of a 64-input stage: thread `tid` holds chunks q = tid + 256 m (row
// q / 8, chunk q % 8 = 4·block + quad), zeros at or past row_end.
struct WgRows {
  uint4 v[4];
  __device__ __forceinline__ void load(const __half* __restrict__ xh, int64_t in_p, int64_t row0, int64_t row_end,
                                       int s, int tid) {
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int q = tid + 256 * m, n = q >> 3, c = q & 7;
      const int64_t row = row0 + n;
      v[m] = row < row_end ? *reinterpret_cast<const uint4*>(xh + row * in_p + static_cast<int64_t>(s) * 64 + 8 * c)
                           : make_uint4(0u, 0u, 0u, 0u);
    }
  }
  // Word d of chunk (block b, quad q): step 2b + d / 2 of the stage, inputs 2q, 2q+1 (+ 8 for
  // odd d) — byte 32·step + 16·(d % 2) + 4q of the row in natural order.
  __device__ __forceinline__ void store(unsigned char* x, int tid) const {
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int q = tid + 256 * m, n = q >> 3, c = q & 7, b = c >> 2, quad = c & 3;
      const uint32_t w[4] = {v[m].x, v[m].y, v[m].z, v[m].w};
#pragma unroll
      for (int d = 0; d < 4; ++d) {
        const int unit = 2 * (2 * b + (d >> 1)) + (d & 1);
        *reinterpret_cast<uint32_t*>(x + lin::tile_offset(n, unit) + 4 * quad) = w[d];
      }
    }
  }
};

// gemm_block_sums (narrow) on wgmma: the same running sums in `tot`, the same contract.
template <int K, int CB>
__device__ __forceinline__ void gemm_block_sums_wgmma(const uint32_t* __restrict__ blk_trellis, int64_t pair_dwords,
                                                      const __half* __restrict__ xh, int64_t in_p, int64_t row0,
                                                      int64_t row_end, int kc_steps, uint32_t* smem, GemmTot& tot) {
  using S = GemmShape<false>;
  constexpr int kStep = LaneBits<K>::kStepDwords;
  constexpr int kPairStage = kGemmSteps * kStep;
  constexpr int kStageBytes = wg_stage_bytes<K>();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int pw = warp >> 1;
  const int n_stages = static_cast<int>(in_p / 16 / kGemmSteps);
  const bool upper = row_end - row0 > kGemmRows / 2;  // uniform over the CTA
  unsigned char* const base = reinterpret_cast<unsigned char*>(smem);
  auto x_slot = [&](int s) { return base + (s % kWgStages) * kStageBytes; };
  auto w_slot = [&](int s) { return reinterpret_cast<uint32_t*>(x_slot(s) + kWgXBytes); };

  auto issue_w = [&](int s) {
    uint32_t* buf = w_slot(s);
    for (int q = tid; q < S::kPairs * kPairStage / 4; q += S::kThreads) {
      const int pp = q / (kPairStage / 4), qq = q - pp * (kPairStage / 4);
      cp_async16(buf + pp * kPairStage + qq * 4,
                 blk_trellis + pp * pair_dwords + static_cast<int64_t>(s) * kPairStage + qq * 4);
    }
  };

  LaneGeom<K> geo;
  geo.init(lane);
  if (warp & 1) {
#pragma unroll
    for (int g = 0; g < LaneBits<K>::NGR; ++g) geo.off[0][g][0] = geo.off[1][g][0], geo.off[0][g][1] = geo.off[1][g][1];
  }
  float acc[kGemmGroups * 4];
#pragma unroll
  for (int g = 0; g < kGemmGroups; ++g)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[4 * g + i] = 0.0f, tot[g][i] = 0.0f;

  WgRows rows;
  issue_w(0);
  cp_async_commit();
  if (n_stages > 1) issue_w(1);
  cp_async_commit();
  rows.load(xh, in_p, row0, row_end, 0, tid);
  rows.store(x_slot(0), tid);
  if (n_stages > 1) rows.load(xh, in_p, row0, row_end, 1, tid);

  const int kc_stages = kc_steps / kGemmSteps;
  for (int st = 0; st < n_stages; ++st) {
    // Stage st's trellis landed (this thread's copies) and its rows were stored last iteration.
    cp_async_wait<1>();
    lin::fence_proxy_async_shared();
    // One barrier per stage: stage st is visible to every warp, and every warp is done with
    // stage st − 1 (its decode and its wgmma, waited for below), whose slots are rewritten next.
    __syncthreads();
    if (st + 1 < n_stages) rows.store(x_slot(st + 1), tid);
    if (st + 2 < n_stages) {
      issue_w(st + 2);
      rows.load(xh, in_p, row0, row_end, st + 2, tid);
    }
    cp_async_commit();

    const uint32_t* wst = w_slot(st) + pw * kPairStage;
    uint32_t a[kGemmSteps][4];
#pragma unroll
    for (int j = 0; j < kGemmSteps; ++j) lane_fragment<K, CB>(wst + j * kStep, geo, 0, a[j]);
    const uint32_t xs = lin::smem_addr(x_slot(st));
#pragma unroll
    for (int q = 0; q < kGemmGroups * 4; ++q) lin::wgmma_fence_operand(acc[q]);
    lin::wgmma_fence();
    if (upper) {
#pragma unroll
      for (int j = 0; j < kGemmSteps; ++j) lin::wgmma_m64n128k16_rs(acc, a[j], lin::wgmma_desc_sw128(xs + 32 * j));
    } else {
#pragma unroll
      for (int j = 0; j < kGemmSteps; ++j) lin::wgmma_m64n64k16_rs(acc, a[j], lin::wgmma_desc_sw128(xs + 32 * j));
    }
    lin::wgmma_commit();
    lin::wgmma_wait<0>();
#pragma unroll
    for (int q = 0; q < kGemmGroups * 4; ++q) lin::wgmma_fence_operand(acc[q]);
    if ((st + 1) % kc_stages == 0) {
      const bool first = st + 1 == kc_stages;
#pragma unroll
      for (int g = 0; g < kGemmGroups; ++g)
#pragma unroll
        for (int i = 0; i < 4; ++i) fold_chunk(tot[g][i], acc[4 * g + i], first);
    }
  }
  cp_async_wait<0>();
  __syncthreads();
}
#endif

// The prefill linear on wgmma: exl3_gemm_kernel's grid and epilogue (narrow shape).
template <int K, int CB>
__global__ void __launch_bounds__(GemmShape<false>::kThreads, 1) exl3_gemm_wgmma_kernel(const LinearArgs p) {
#if FT_HAVE_WGMMA
  extern __shared__ __align__(16) uint32_t smem_raw[];
  uint32_t* const smem = smem_align1024(smem_raw);
  const int nblk = p.nblk;
  const int blk = static_cast<int>(blockIdx.x % nblk);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x / nblk) * kGemmRows;
  const int64_t pair_dwords = p.in_p / 16 * LaneBits<K>::kStepDwords;
  GemmTot tot;
  gemm_block_sums_wgmma<K, CB>(p.trellis + GemmShape<false>::kPairs * blk * pair_dwords, pair_dwords, p.xh, p.in_p,
                               row0, p.rows, p.kc_steps, smem, tot);
  const int64_t col0 = 128 * static_cast<int64_t>(blk);
  const int valid = static_cast<int>(p.out - col0 < 128 ? p.out - col0 : 128);
  const int nrows = static_cast<int>(p.rows - row0 < kGemmRows ? p.rows - row0 : kGemmRows);
  float* const y = p.y + row0 * p.ld_y + col0;
  const int64_t ld_y = p.ld_y;
  gemm_block_store<K, false>(tot, smem, nrows, p.svh + col0, p.bias ? p.bias + col0 : nullptr, p.row_scale + row0,
                             [&](int r) { return y + r * ld_y; }, valid, p.accumulate != 0);
#endif
}

}  // namespace ft::cuda::exl3dev
