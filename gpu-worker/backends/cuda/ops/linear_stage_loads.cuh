#pragma once
// The copies that feed one stage of the tiled linear kernels (mma.sync and wgmma alike): BM
// activation rows and BN weight rows of 64 halves each, global → shared with cp.async in the
// swizzled layout of linear_mma.cuh, zero-filled past the rows of the item, past `out` and past
// the padded width. SwiGLU problems interleave gate and up in B per column block of kColBlock
// outputs (the columns one warp, or one warpgroup, multiplies): within a block, n8-tile 2q is the
// gate and 2q + 1 the up of the same h columns, so each thread holds both values of its outputs.
#include <cuda_fp16.h>

#include <cstdint>

#include "gpu-worker/backends/cuda/ops/linear_contract.cuh"
#include "gpu-worker/backends/cuda/ops/linear_mma.cuh"

namespace ft::cuda::lin {

template <int BM, int BN, int NTHR, int kColBlock>
struct StageLoads {
  static constexpr int kAUnits = BM * 8 / NTHR, kBUnits = BN * 8 / NTHR;
  static constexpr int kStageBytes = (BM + BN) * kRowBytes;
  static_assert(kAUnits * NTHR == BM * 8 && kBUnits * NTHR == BN * 8, "copy split");

  // Copy unit e = tid + NTHR·m is row e / 8, 16-byte unit e % 8 (= tid % 8).
  int u;
  const __half* asrc[kAUnits];
  bool aok[kAUnits];
  const __half* bsrc[kBUnits];
  bool bok[kBUnits];

  // The item's row ids and scales into the block's tables (the caller syncs before use).
  template <class P>
  static __device__ __forceinline__ void fill_rows(const P& p, const LinItem& it, int32_t* s_id, float* s_scale,
                                                   int tid) {
    for (int i = tid; i < it.rows; i += NTHR) {
      const int32_t id = p.row_id(it, i);
      s_id[i] = id;
      s_scale[i] = p.a_scale(it, id);
    }
  }

  // An item begins: its row table filled and published to the block, then this thread's sources.
  template <class P>
  __device__ __forceinline__ void begin(const P& p, const LinItem& it, int32_t* s_id, float* s_scale, int tid) {
    fill_rows(p, it, s_id, s_scale, tid);
    __syncthreads();
    init(p, it, s_id, tid);
  }

  template <class P>
  __device__ __forceinline__ void init(const P& p, const LinItem& it, const int32_t* s_id, int tid) {
    u = tid & 7;
#pragma unroll
    for (int m = 0; m < kAUnits; ++m) {
      const int row = (tid + NTHR * m) >> 3;
      aok[m] = row < it.rows;
      asrc[m] = (aok[m] ? p.a_row(it, s_id[row]) : it.w0) + 8 * u;
    }
#pragma unroll
    for (int m = 0; m < kBUnits; ++m) {
      const int b = (tid + NTHR * m) >> 3;
      const __half* row;
      if constexpr (P::kSwiglu) {
        const int blk = b / kColBlock, within = b % kColBlock, ni = within >> 3, j = within & 7;
        row = p.w_row(it, ni & 1, it.n0 + blk * (kColBlock / 2) + (ni >> 1) * 8 + j);
      } else {
        row = p.w_row(it, 0, it.n0 + b);
      }
      bok[m] = row != nullptr;
      bsrc[m] = (row ? row : it.w0) + 8 * u;
    }
  }

  // Stage s into its slot of a ring of `stages` slots starting at sbase.
  __device__ __forceinline__ void load_slot(uint32_t sbase, int s, int stages, const KGeom& kg, int tid,
                                            uint64_t policy) const {
    load(sbase + static_cast<uint32_t>((s % stages) * kStageBytes), s, kg, tid, policy);
  }

  // Stage s (k ∈ [64 s, 64 s + 64)) into the slot at sa (A rows), sa + BM·128 (B rows).
  __device__ __forceinline__ void load(uint32_t sa, int s, const KGeom& kg, int tid, uint64_t policy) const {
    const uint32_t sb = sa + BM * kRowBytes;
    const int64_t kb = static_cast<int64_t>(kStageK) * s;
    const bool kok = kb + 8 * u < kg.in8;
#pragma unroll
    for (int m = 0; m < kAUnits; ++m) {
      const int row = (tid + NTHR * m) >> 3;
      const bool ok = aok[m] && kok;
      cp_async_ca16(sa + tile_offset(row, u), ok ? asrc[m] + kb : asrc[m], ok);
    }
#pragma unroll
    for (int m = 0; m < kBUnits; ++m) {
      const int b = (tid + NTHR * m) >> 3;
      const bool ok = bok[m] && kok;
      cp_async_cg16(sb + tile_offset(b, u), ok ? bsrc[m] + kb : bsrc[m], ok, policy);
    }
  }
};

}  // namespace ft::cuda::lin
