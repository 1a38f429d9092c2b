#pragma once
// The tiled (prefill) fp16 linear kernel: BM rows × BN outputs per block, K streamed through
// STAGES 64-wide shared-memory stages with cp.async, fragments through ldmatrix, mma.sync
// m16n8k16. The contract (ops/linear.h) shapes the accumulation: every warp keeps a chain
// accumulator, started from zero at each chunk boundary, and a running total it adds the chain
// to when a chunk ends (total = 0 + P_0 + P_1 + …), the same fold the skinny kernel does across
// its warps, so a row gets the same bits from either kernel.
//
// Items come from a Problem as in the skinny kernel (grid-stride; dense calls one block per
// item). Stage copies: linear_stage_loads.cuh (SwiGLU gate/up interleaved per warp column block).
#include <cuda_fp16.h>

#include <cstdint>

#include "gpu-worker/backends/cuda/ops/linear_contract.cuh"
#include "gpu-worker/backends/cuda/ops/linear_mma.cuh"
#include "gpu-worker/backends/cuda/ops/linear_stage_loads.cuh"

namespace ft::cuda::lin {

template <int BM_, int BN_, int WM_, int WN_, int STAGES_>
struct TiledCfg {
  static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_, STAGES = STAGES_;
  static constexpr int kThreads = 32 * WM * WN;
  static constexpr int kWarpM = BM / WM, kWarpN = BN / WN;
  static constexpr int MI = kWarpM / 16, NI = kWarpN / 8;
  using Loads = StageLoads<BM, BN, kThreads, kWarpN>;
  static constexpr int kStageBytes = Loads::kStageBytes;
  static constexpr int kSmemBytes = STAGES * kStageBytes;
  static_assert(MI * 16 == kWarpM && NI * 8 == kWarpN && NI % 2 == 0, "warp tile");
};

template <class Cfg, bool SWIGLU>
__host__ __device__ constexpr int tiled_block_n() {
  return SWIGLU ? Cfg::BN / 2 : Cfg::BN;
}

template <class Cfg, class P>
__global__ void __launch_bounds__(Cfg::kThreads, 1) linear_tiled_kernel(const P p) {
  constexpr int BM = Cfg::BM, STAGES = Cfg::STAGES, MI = Cfg::MI, NI = Cfg::NI;
  constexpr bool SWIGLU = P::kSwiglu;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int32_t s_id[BM];
  __shared__ float s_scale[BM];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wm = warp / Cfg::WN, wn = warp % Cfg::WN;
  const KGeom kg = p.k;
  const int nst = total_stages(kg);
  const int spc = kg.kc / kStageK;  // stages per full chunk
  const uint64_t policy = l2_evict_first_policy();
  const uint32_t sbase = smem_addr(smem);

  const int64_t n_items = p.n_items();
  for (int64_t idx = blockIdx.x; idx < n_items; idx += gridDim.x) {
    LinItem it;
    if (!p.load_item(idx, it)) continue;  // uniform over the block
    typename Cfg::Loads loads;
    loads.begin(p, it, s_id, s_scale, tid);
    auto load_stage = [&](int s) { loads.load_slot(sbase, s, STAGES, kg, tid, policy); };

    float chain[MI][NI][4], total[MI][NI][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int q = 0; q < 4; ++q) chain[mi][ni][q] = 0.0f, total[mi][ni][q] = 0.0f;

    auto k16_step = [&](uint32_t sa, uint32_t sb, int j) {
      uint32_t a[MI][4];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
        ldmatrix_x4(a[mi], sa + tile_offset(wm * Cfg::kWarpM + 16 * mi + (lane & 7) + 8 * ((lane >> 3) & 1),
                                            2 * j + (lane >> 4)));
#pragma unroll
      for (int pr = 0; pr < NI / 2; ++pr) {
        uint32_t b[4];
        ldmatrix_x4(
            b, sb + tile_offset(wn * Cfg::kWarpN + 8 * (2 * pr + (lane >> 4)) + (lane & 7), 2 * j + ((lane >> 3) & 1)));
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
          mma_16816(chain[mi][2 * pr], a[mi], b[0], b[1]);
          mma_16816(chain[mi][2 * pr + 1], a[mi], b[2], b[3]);
        }
      }
    };

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < nst) load_stage(s);
      cp_async_commit();
    }
    for (int s = 0; s < nst; ++s) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();  // stage s landed for every thread; every warp is done with slot s − 1
      if (s + STAGES - 1 < nst) load_stage(s + STAGES - 1);
      cp_async_commit();
      const uint32_t sa = sbase + static_cast<uint32_t>((s % STAGES) * Cfg::kStageBytes);
      const uint32_t sb = sa + BM * kRowBytes;
      const int c = s / spc;
      const int64_t kb = static_cast<int64_t>(kStageK) * s, kend = chunk_end(kg, c);
      if (kb + kStageK <= kend) {
#pragma unroll
        for (int j = 0; j < kStageK / 16; ++j) k16_step(sa, sb, j);
      } else {
#pragma unroll
        for (int j = 0; j < kStageK / 16; ++j)
          if (kb + 16 * j < kend) k16_step(sa, sb, j);
      }
      if (s == nst - 1 || (s + 1) % spc == 0) {  // chunk c ends: total += P_c, next chain from 0
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
          for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              total[mi][ni][q] = __fadd_rn(total[mi][ni][q], chain[mi][ni][q]);
              chain[mi][ni][q] = 0.0f;
            }
      }
    }
    cp_async_wait<0>();

    // Epilogue: fragment (mi, ni) element q sits at row 16 mi + g + 8 (q / 2), column 8 ni + 2 t + q % 2.
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = wm * Cfg::kWarpM + 16 * mi + g + 8 * h;
        if (r >= it.rows) continue;
        const int32_t id = s_id[r];
        const float rs = s_scale[r];
        if constexpr (!SWIGLU) {
#pragma unroll
          for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int64_t n = it.n0 + wn * Cfg::kWarpN + 8 * ni + 2 * t4 + e;
              if (n < p.out) p.store(it, id, n, total[mi][ni][2 * h + e], rs);
            }
        } else {
#pragma unroll
          for (int pr = 0; pr < NI / 2; ++pr)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int64_t hc = it.n0 + wn * (NI / 2) * 8 + 8 * pr + 2 * t4 + e;
              if (hc < p.out)
                p.store_swiglu(it, id, hc, total[mi][2 * pr][2 * h + e], total[mi][2 * pr + 1][2 * h + e], rs);
            }
        }
      }
    __syncthreads();  // shared memory and row tables are rewritten by the next item
  }
}

}  // namespace ft::cuda::lin
