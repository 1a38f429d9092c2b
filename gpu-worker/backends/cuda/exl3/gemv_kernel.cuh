#pragma once
// The skinny EXL3 linear kernel (internal header: instantiated per K in gemv_k*.cu).
//
// A CTA of 4 warps computes one 128-column output block (one Hadamard block, warp w the pair
// 4β + w) for a batch of up to 8·NGMAX rows, either
//   * over all chunks (FULL: the warps fold the chunk sums themselves, then the CTA applies the
//     output transform from shared memory), or
//   * over one chunk c (SPLIT, for narrow outputs: the chunk sum goes to the workspace and the
//     CTA that completes a block's last chunk — a counter, not a reduction — adds the chunk sums
//     left to right and applies the output transform).
// Both orders of work give the same bits. CTAs loop over items (grid-stride).
#include "gpu-worker/backends/cuda/exl3/gemv.cuh"

namespace ft::cuda::exl3dev {

struct LinearArgs {
  const uint32_t* trellis = nullptr;
  const __half* svh = nullptr;
  const float* bias = nullptr;
  int64_t in_p = 0, out_p = 0, out = 0;
  int kc_steps = 0, chunks = 0, nblk = 0;
  const __half* xh = nullptr;  // [rows][in_p] permuted fp16
  const float* row_scale = nullptr;
  int64_t rows = 0;
  int nrb = 0;  // row batches of 8·NGMAX rows
  float* y = nullptr;
  int64_t ld_y = 0;
  int accumulate = 0;
  float* partials = nullptr;  // SPLIT: [chunks][rows][out_p]
  int* counters = nullptr;    // SPLIT: [nblk], zero between launches
};

template <int K, int NGMAX>
constexpr size_t gemv_smem_bytes() {
  const size_t ring = size_t{kWarps} * ring_stages<K>() * stage_dwords<K>() * 4;
  const size_t tile = size_t{8} * NGMAX * 128 * 4;
  return (ring > tile ? ring : tile) + kSmemAlignSlack;
}

template <int K, int CB, int NGMAX, bool SPLIT>
__global__ void __launch_bounds__(kWarps * 32) exl3_gemv_kernel(const LinearArgs p) {
  extern __shared__ __align__(16) uint32_t smem_raw[];
  uint32_t* const smem = smem_align128(smem_raw);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  using WP = WarpPair<K, CB, NGMAX>;
  uint32_t* ring = smem + warp * WP::S * WP::kStage;
  float* tile = reinterpret_cast<float*>(smem);  // [8·NGMAX][128], after the main loop
  __shared__ int s_last;
  LaneGeom<K> geo;
  geo.init(lane);

  const int per_rb = p.nblk * (SPLIT ? p.chunks : 1);
  const int n_items = p.nrb * per_rb;
  const int64_t pair_dwords = p.in_p / 16 * LaneBits<K>::kStepDwords;
  const int n_steps_all = static_cast<int>(p.in_p / 16);
  for (int item = blockIdx.x; item < n_items; item += gridDim.x) {
    const int rb = item / per_rb;
    const int rest = item - rb * per_rb;
    const int blk = SPLIT ? rest / p.chunks : rest;
    const int c = SPLIT ? rest - blk * p.chunks : 0;
    const int64_t r0 = static_cast<int64_t>(rb) * 8 * NGMAX;
    const int nr = static_cast<int>(p.rows - r0 < 8 * NGMAX ? p.rows - r0 : 8 * NGMAX);
    const int ng = (nr + 7) / 8;
    const int step0 = SPLIT ? c * p.kc_steps : 0;
    const int n_steps = SPLIT ? p.kc_steps : n_steps_all;

    const __half* xrow[NGMAX];
#pragma unroll
    for (int g = 0; g < NGMAX; ++g) {
      const int64_t r = r0 + min(8 * g + (lane >> 2), nr - 1);  // rows past the batch reuse its last (discarded)
      xrow[g] = p.xh + r * p.in_p + static_cast<int64_t>(step0) * 16 + 8 * (lane & 3);
    }
    const int pair = 4 * blk + warp;
    const uint32_t* src = p.trellis + pair * pair_dwords + static_cast<int64_t>(step0) * LaneBits<K>::kStepDwords;
    float tot[2][NGMAX][4];
    WP::run(src, n_steps, p.kc_steps, xrow, ng, ring, geo, lane, tot);

    if constexpr (SPLIT) {
      // This chunk's sums to the workspace, then the block's last CTA finishes it.
      float* part = p.partials + (static_cast<int64_t>(c) * p.rows + r0) * p.out_p + 128 * blk;
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int g = 0; g < NGMAX; ++g)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int r = acc_row(g, lane, i);
            if (r < nr) part[static_cast<int64_t>(r) * p.out_p + acc_col(warp, h, lane, i)] = tot[h][g][i];
          }
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) s_last = atomicAdd(p.counters + blk, 1) == p.chunks - 1;
      __syncthreads();
      if (s_last) {
        __threadfence();
        for (int r = warp; r < nr; r += kWarps) {
          float v[4];
          fold_chunks(p.partials + (r0 + r) * p.out_p + 128 * blk + 4 * lane, p.rows * p.out_p, p.chunks, v);
          const int64_t col0 = 128 * static_cast<int64_t>(blk);
          finish_row(v, lane, p.svh + col0, p.bias ? p.bias + col0 : nullptr, p.row_scale[r0 + r],
                     p.y + (r0 + r) * p.ld_y + col0, static_cast<int>(p.out - col0 < 128 ? p.out - col0 : 128),
                     p.accumulate != 0);
        }
        if (threadIdx.x == 0) p.counters[blk] = 0;
      }
      __syncthreads();
    } else {
      __syncthreads();  // every warp's ring reads are done: the tile may overwrite it
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int g = 0; g < NGMAX; ++g)
#pragma unroll
          for (int i = 0; i < 4; ++i) tile[acc_row(g, lane, i) * 128 + acc_col(warp, h, lane, i)] = tot[h][g][i];
      __syncthreads();
      const int64_t col0 = 128 * static_cast<int64_t>(blk);
      for (int r = warp; r < nr; r += kWarps) {
        const float4 s = *reinterpret_cast<const float4*>(tile + r * 128 + 4 * lane);
        float v[4] = {s.x, s.y, s.z, s.w};
        finish_row(v, lane, p.svh + col0, p.bias ? p.bias + col0 : nullptr, p.row_scale[r0 + r],
                   p.y + (r0 + r) * p.ld_y + col0, static_cast<int>(p.out - col0 < 128 ? p.out - col0 : 128),
                   p.accumulate != 0);
      }
      __syncthreads();
    }
  }
}

// Host side of one K (gemv_k<K>.cu): launches the kernel for codebook cb.
struct GemvLaunch {
  int ngmax = 1;
  bool split = false;
  bool gemm = false;  // the prefill kernel (gemm_kernel.cuh) instead
  bool wide = false;  // its wide shape (16 warps × 256 columns)
  bool programmatic = false;  // programmatic dependent launch (sm_90+)
  int grid = 0;
};
template <int K>
void launch_gemv(int cb, const GemvLaunch& l, const LinearArgs& a, cudaStream_t stream);

}  // namespace ft::cuda::exl3dev
