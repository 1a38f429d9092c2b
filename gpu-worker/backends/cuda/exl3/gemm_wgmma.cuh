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
// memory are permuted for the skinny kernels' fragments (device.cuh, permuted_pos): a 16-byte
// chunk (32-input block, lane quad q) holds inputs {2q, 2q+1, 2q+8, 2q+9} of the block's two k16
// steps, so each of its four words is copied by its own 4-byte cp.async to where the 128-byte
// swizzled layout (ops/linear_mma.cuh, tile_offset) keeps those inputs. Rows and trellis of a
// stage share a commit group, two stages ahead in a ring of four; the decode of stage st + 1
// overlaps the tensor cores' group of stage st (gemm_block_sums_wgmma).
#include <type_traits>

#include "gpu-worker/backends/cuda/exl3/gemm_kernel.cuh"
#include "gpu-worker/backends/cuda/exl3/wgmma_layout.h"
#include "gpu-worker/backends/cuda/ops/linear_mma.cuh"
#include "gpu-worker/backends/cuda/ops/linear_wgmma.cuh"

namespace ft::cuda::exl3dev {

constexpr int kWgStages = 4;  // stage st + 2 is copied while group st − 1 may still read its rows
constexpr int kWgXBytes = kGemmRows * 128;  // 16 KB of rows per stage (64 inputs each)

template <int K>
constexpr int wg_stage_bytes() {  // rows first (1024-byte aligned for the swizzle), then trellis
  const int bytes = kWgXBytes + gemm_w_dwords<K, false>() * 4;
  return (bytes + 1023) / 1024 * 1024;
}
// The running sums live in shared memory ([g][i][thread], each thread its own words, written once
// a chunk): in registers beside the chain and two A buffers they pushed the block past 255.
constexpr int kWgTotBytes = kGemmGroups * 4 * GemmShape<false>::kThreads * 4;  // 64 KB
template <int K>
constexpr size_t wg_region_bytes() {  // the stages, or the epilogue's [64][128] tile after them
  const size_t stages = size_t{kWgStages} * wg_stage_bytes<K>();
  const size_t tile = size_t{64} * 128 * 4;
  return stages > tile ? stages : tile;
}
template <int K>
constexpr size_t wg_smem_bytes() {
  return wg_region_bytes<K>() + kWgTotBytes + 1024;
}

// The CTA's dynamic shared memory rounded up to 1024 bytes (the swizzle atom) in the shared
// window's own addresses, which are what the swizzle and the wgmma descriptors see.
__device__ __forceinline__ uint32_t* smem_align1024(uint32_t* raw) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(raw));
  return raw + (((a + 1023u) & ~1023u) - a) / 4;
}

#if FT_HAVE_WGMMA
// A thread's share of every stage's copies, its addresses computed once (recomputing them per
// stage was half the block's instructions: session 21's Nsight Compute profile): the row words
// where wgmma_layout.h puts them, zeros at or past row_end; the trellis as the stage's pairs ×
// kPairStage dwords in 16-byte chunks, chunk q = tid + 256 j.
template <int K>
struct WgStageCopy {
  static constexpr int kPairStage = kGemmSteps * LaneBits<K>::kStepDwords;
  static constexpr int kChunks = GemmShape<false>::kPairs * kPairStage / 4;
  static constexpr int kPerThread = (kChunks + 255) / 256;
  const __half* row_src[4];  // row of chunk m at stage 0 (row0's when past the end: not read)
  uint32_t row_dst[4];       // byte offset of word d in the slot (chunk m: + kWgRowChunkStride·m)
  uint32_t valid = 0;        // bit m: row of chunk m < row_end
  const uint32_t* w_src[kPerThread];
  uint32_t w_dst[kPerThread];  // byte offset in the slot (past the rows)

  __device__ __forceinline__ void init(const uint32_t* blk_trellis, int64_t pair_dwords, const __half* xh,
                                       int64_t in_p, int64_t row0, int64_t row_end, int tid) {
    const int n0 = tid >> 3, c = tid & 7;
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const bool ok = row0 + n0 + 32 * m < row_end;
      valid |= static_cast<uint32_t>(ok) << m;
      row_src[m] = xh + (ok ? row0 + n0 + 32 * m : row0) * in_p + 8 * c;
    }
#pragma unroll
    for (int d = 0; d < 4; ++d) row_dst[d] = wg_row_word_offset(tid, d);
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int q = tid + 256 * j, pp = q / (kPairStage / 4), qq = q % (kPairStage / 4);
      w_src[j] = blk_trellis + pp * pair_dwords + qq * 4;
      w_dst[j] = static_cast<uint32_t>(kWgXBytes + (pp * kPairStage + qq * 4) * 4);
    }
  }
  __device__ __forceinline__ void issue(unsigned char* slot, int s, int tid) const {
    const int64_t rs = static_cast<int64_t>(s) * 64;
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const bool ok = (valid >> m) & 1u;
#pragma unroll
      for (int d = 0; d < 4; ++d) cp_async4_zfill(slot + row_dst[d] + kWgRowChunkStride * m, row_src[m] + rs + 2 * d, ok);
    }
    const int64_t ws = static_cast<int64_t>(s) * kPairStage;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j)
      if (kChunks % 256 == 0 || tid + 256 * j < kChunks) cp_async16(slot + w_dst[j], w_src[j] + ws);
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
  unsigned char* const base = reinterpret_cast<unsigned char*>(smem);
  auto x_slot = [&](int s) { return base + (static_cast<unsigned>(s) % kWgStages) * kStageBytes; };
  auto w_slot = [&](int s) { return reinterpret_cast<uint32_t*>(x_slot(s) + kWgXBytes); };
  WgStageCopy<K> copy;
  copy.init(blk_trellis, pair_dwords, xh, in_p, row0, row_end, tid);

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
    for (int i = 0; i < 4; ++i) acc[4 * g + i] = 0.0f;
  float* const tot_s = reinterpret_cast<float*>(base + wg_region_bytes<K>()) + tid;

  auto issue = [&](int s) {
    if (s < n_stages) copy.issue(x_slot(s), s, tid);
    cp_async_commit();
  };
  issue(0);
  issue(1);

  // The tensor cores run stage st's group while the warps decode stage st + 1 into the other
  // A buffer (registers an in-flight wgmma reads stay untouched: the buffer index is a
  // compile-time constant of each half of the unrolled pair). A group stays pending across the
  // next iteration's barrier; its slot is refilled two iterations later (kWgStages = 4), after
  // every warpgroup's wait<1> has retired it. At a chunk's end the groups drain (wait<0>)
  // before the fold reads the chain.
  const int kc_stages = kc_steps / kGemmSteps;
  uint32_t a[2][kGemmSteps][4];
  auto stage = [&](auto buf_c, int st) {
    constexpr int buf = decltype(buf_c)::value;
    // Stage st landed (this thread's copies; stage st + 1's may still be in flight).
    cp_async_wait<1>();
    lin::fence_proxy_async_shared();
    // One barrier per stage: stage st is visible to every warp, and every warpgroup has retired
    // group st − 2 (its wait<1> last iteration) and decoded stage st − 2, so that slot takes
    // stage st + 2.
    __syncthreads();
    issue(st + 2);

    const uint32_t* wst = w_slot(st) + pw * kPairStage;
#pragma unroll
    for (int j = 0; j < kGemmSteps; ++j) lane_fragment<K, CB>(wst + j * kStep, geo, 0, a[buf][j]);
    const uint32_t xs = lin::smem_addr(x_slot(st));
#pragma unroll
    for (int q = 0; q < kGemmGroups * 4; ++q) lin::wgmma_fence_operand(acc[q]);
    lin::wgmma_fence();
#pragma unroll
    for (int j = 0; j < kGemmSteps; ++j) lin::wgmma_m64n128k16_rs(acc, a[buf][j], lin::wgmma_desc_sw128(xs + 32 * j));
    lin::wgmma_commit();
    if ((st + 1) % kc_stages == 0) {
      lin::wgmma_wait<0>();
#pragma unroll
      for (int q = 0; q < kGemmGroups * 4; ++q) lin::wgmma_fence_operand(acc[q]);
      const bool first = st + 1 == kc_stages;
#pragma unroll
      for (int g = 0; g < kGemmGroups; ++g)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float t = first ? 0.0f : tot_s[(4 * g + i) * S::kThreads];
          fold_chunk(t, acc[4 * g + i], first);
          tot_s[(4 * g + i) * S::kThreads] = t;
        }
    } else {
      lin::wgmma_wait<1>();
    }
  };
  for (int st = 0; st < n_stages; st += 2) {
    stage(std::integral_constant<int, 0>{}, st);
    if (st + 1 < n_stages) stage(std::integral_constant<int, 1>{}, st + 1);
  }
  lin::wgmma_wait<0>();
#pragma unroll
  for (int q = 0; q < kGemmGroups * 4; ++q) lin::wgmma_fence_operand(acc[q]);
#pragma unroll
  for (int g = 0; g < kGemmGroups; ++g)
#pragma unroll
    for (int i = 0; i < 4; ++i) tot[g][i] = tot_s[(4 * g + i) * S::kThreads];
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
