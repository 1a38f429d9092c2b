#pragma once
// The tiled fp16 linear kernel on Hopper's warpgroup MMA (sm_90a): the loads, the shared-memory
// layout, the items and the epilogue of linear_f16_tiled.cuh, with each stage's products issued as
// wgmma.m64n128k16 from shared memory instead of per-warp ldmatrix + mma.sync. The reduction
// contract (ops/linear.h) is kept the same way: every thread's chain accumulators start from
// zero at each chunk boundary and are added, in chunk order, to a running total — so a row gets
// the bits of the mma.sync kernels (a wgmma k16 step is the mma.sync k16 step's arithmetic).
//
// Block: BM = 128 rows × BN = 128 outputs, two warpgroups (256 threads), warpgroup w computes
// rows 64w … 64w + 63 against all 128 columns. Stage pipeline with one barrier per stage: stage s
// is copied STAGES − 2 stages ahead, and its slot is reused only after every warpgroup has
// waited for the wgmma of the stage before it (wgmma.wait_group 1 before the barrier).
#include <cuda_fp16.h>

#include <cstdint>

#include "gpu-worker/backends/cuda/ops/linear_contract.cuh"
#include "gpu-worker/backends/cuda/ops/linear_mma.cuh"
#include "gpu-worker/backends/cuda/ops/linear_stage_loads.cuh"
#include "gpu-worker/backends/cuda/ops/linear_tma.cuh"
#include "gpu-worker/backends/cuda/ops/linear_wgmma.cuh"

namespace ft::cuda::lin {

template <int STAGES_>
struct WgmmaCfg {
  static constexpr int BM = 128, BN = 128, STAGES = STAGES_;
  static constexpr int kThreads = 256;
  // One warpgroup multiplies all BN columns: SwiGLU's gate/up interleave spans the whole tile.
  using Loads = StageLoads<BM, BN, kThreads, BN>;
  static constexpr int kStageBytes = Loads::kStageBytes;  // 32 KB: a multiple of the 1 KB swizzle atom
  // + 1 KB so the stages can start on a 1024-byte boundary whatever the dynamic base.
  static constexpr int kSmemBytes = STAGES * kStageBytes + 1024;
  static_assert(STAGES >= 3, "one stage computing, one in flight, one landing");
};

// Problems whose rows come in sorted order (moe_dense_problems.cuh, SortedRows): their own row
// tables, their weights through per-expert maps, and SwiGLU's B as [64 gate rows; 64 up rows].
template <class P>
constexpr bool kSortedRows = requires { P::kSortedRows; };

template <class Cfg, bool SWIGLU>
__host__ __device__ constexpr int wgmma_block_n() {
  return SWIGLU ? Cfg::BN / 2 : Cfg::BN;
}

// One stage's k16 steps (k ∈ [kb, min(kb + 64, kend))) into the warpgroup's chain; where chunk
// c ends here (`ends`), the chain is added to the running total and starts again from zero.
// swa: the warpgroup's 64 A rows of the stage, sb: the stage's B rows.
__device__ __forceinline__ void wgmma_stage(float (&chain)[64], float (&total)[64], uint32_t swa, uint32_t sb,
                                            int64_t kb, int64_t kend, bool ends) {
#if FT_HAVE_WGMMA
#pragma unroll
  for (int q = 0; q < 64; ++q) wgmma_fence_operand(chain[q]);
  wgmma_fence();
  if (kb + kStageK <= kend) {
#pragma unroll
    for (int j = 0; j < kStageK / 16; ++j)
      wgmma_m64n128k16(chain, wgmma_desc_sw128(swa + 32 * j), wgmma_desc_sw128(sb + 32 * j), true);
  } else {  // the last chunk's last stage: its k16 steps up to the chunk's end
    const int steps = static_cast<int>((kend - kb + 15) / 16);
    for (int j = 0; j < steps; ++j)
      wgmma_m64n128k16(chain, wgmma_desc_sw128(swa + 32 * j), wgmma_desc_sw128(sb + 32 * j), true);
  }
  wgmma_commit();
  if (ends) {  // total += P_c, next chain from 0
    wgmma_wait<0>();
#pragma unroll
    for (int q = 0; q < 64; ++q) {
      wgmma_fence_operand(chain[q]);
      total[q] = __fadd_rn(total[q], chain[q]);
      chain[q] = 0.0f;
    }
  } else {
    wgmma_wait<1>();
  }
#endif
}

// The epilogue: element 4i + 2h + e of warpgroup wg's 64 × 128 tile sits at row
// 16 wq + g + 8h, column 8i + 2 t + e — the mma.sync fragment (mi = 0, ni = i) of linear_f16_tiled.cuh.
template <class Cfg, class P>
__device__ __forceinline__ void wgmma_store_tile(const P& p, const LinItem& it, const float (&total)[64],
                                                 const int32_t* s_id, const float* s_scale, int tid) {
  constexpr int BN = Cfg::BN;
  const int warp = tid >> 5, lane = tid & 31, wg = warp >> 2, wq = warp & 3;
  const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = wg * 64 + wq * 16 + g + 8 * h;
    if (r >= it.rows) continue;
    const int32_t id = s_id[r];
    const float rs = s_scale[r];
    if constexpr (!P::kSwiglu) {
#pragma unroll
      for (int i = 0; i < BN / 8; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t n = it.n0 + 8 * i + 2 * t4 + e;
          if (n < p.out) p.store(it, id, n, total[4 * i + 2 * h + e], rs);
        }
    } else {
      // h column n0 + 8q + 2t + e: its gate and up accumulators — n8 tiles 2q and 2q + 1 where B
      // interleaves them, tiles q and q + BN/16 where B is [64 gate rows; 64 up rows] (sorted rows).
#pragma unroll
      for (int q = 0; q < BN / 16; ++q) {
        const int gi = kSortedRows<P> ? q : 2 * q, ui = kSortedRows<P> ? q + BN / 16 : 2 * q + 1;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t hc = it.n0 + 8 * q + 2 * t4 + e;
          if (hc < p.out) p.store_swiglu(it, id, hc, total[4 * gi + 2 * h + e], total[4 * ui + 2 * h + e], rs);
        }
      }
    }
  }
}

template <class Cfg, class P>
__global__ void __launch_bounds__(Cfg::kThreads, 1) linear_wgmma_kernel(const P p) {
#if FT_HAVE_WGMMA
  constexpr int BM = Cfg::BM, STAGES = Cfg::STAGES;
  constexpr int AHEAD = STAGES - 2;  // stages copied ahead of the one computed
  extern __shared__ unsigned char smem[];
  __shared__ int32_t s_id[BM];
  __shared__ float s_scale[BM];

  const int tid = threadIdx.x, wg = tid >> 7;  // warpgroup
  const KGeom kg = p.k;
  const int nst = total_stages(kg);
  const int spc = kg.kc / kStageK;
  const uint64_t policy = l2_evict_first_policy();
  const uint32_t sbase = (smem_addr(smem) + 1023u) & ~1023u;

  const int64_t n_items = p.n_items();
  for (int64_t idx = blockIdx.x; idx < n_items; idx += gridDim.x) {
    LinItem it;
    if (!p.load_item(idx, it)) continue;  // uniform over the block
    typename Cfg::Loads loads;
    loads.begin(p, it, s_id, s_scale, tid);
    auto load_stage = [&](int s) { loads.load_slot(sbase, s, STAGES, kg, tid, policy); };

    float chain[64], total[64];
#pragma unroll
    for (int q = 0; q < 64; ++q) chain[q] = 0.0f, total[q] = 0.0f;

#pragma unroll
    for (int s = 0; s < AHEAD; ++s) {
      if (s < nst) load_stage(s);
      cp_async_commit();
    }
    for (int s = 0; s < nst; ++s) {
      cp_async_wait<AHEAD - 1>();
      fence_proxy_async_shared();
      // Stage s landed for every thread; every warpgroup has finished the wgmma of stage s − 1's
      // predecessor (waited below in the last iteration), whose slot the next copy takes.
      __syncthreads();
      if (s + AHEAD < nst) load_stage(s + AHEAD);
      cp_async_commit();

      const uint32_t sa = sbase + static_cast<uint32_t>((s % STAGES) * Cfg::kStageBytes);
      const uint32_t sb = sa + BM * kRowBytes;
      const uint32_t swa = sa + static_cast<uint32_t>(wg * 64 * kRowBytes);
      const int c = s / spc;
      const int64_t kb = static_cast<int64_t>(kStageK) * s, kend = chunk_end(kg, c);
      const bool ends = s == nst - 1 || (s + 1) % spc == 0;  // chunk c ends here
      wgmma_stage(chain, total, swa, sb, kb, kend, ends);
    }
    wgmma_wait<0>();  // already drained at the last chunk's end; explicit for ptxas
    cp_async_wait<0>();

    wgmma_store_tile<Cfg>(p, it, total, s_id, s_scale, tid);
    __syncthreads();  // shared memory and row tables are rewritten by the next item
  }
#endif
}

// The dense problem with its stages brought in by the copy engine (linear_tma.cuh), by a warp of
// its own: Cfg::kThreads consumer threads (two warpgroups) multiply, and one more warp — the
// producer — issues each stage's two tiles (activations, weights) on the slot's `full` barrier
// as soon as the slot's `empty` barrier says every consumer warp is done with its last stage. The
// same bytes in the same layout as the per-thread copies of linear_wgmma_kernel, so the same bits,
// without their per-stage address arithmetic (~300 instructions per warp and stage in session
// 21's profile) and without a block barrier per stage: the warpgroups run apart, and on a
// persistent grid the producer brings the next item's stages in while the consumers store the
// last one's outputs.
template <class Cfg>
constexpr int tma_threads() {
  return Cfg::kThreads + 32;
}
template <class Cfg, class P>
__global__ void __launch_bounds__(tma_threads<Cfg>(), 1) linear_wgmma_tma_kernel(const P p, const __grid_constant__ TmaMaps maps) {
#if FT_HAVE_WGMMA
  constexpr int BM = Cfg::BM, STAGES = Cfg::STAGES, kConsumers = Cfg::kThreads;
  constexpr uint32_t kStageBytes = Cfg::kStageBytes;
  extern __shared__ unsigned char smem[];
  __shared__ int32_t s_id[BM];
  __shared__ float s_scale[BM];
  __shared__ alignas(8) uint64_t s_full[STAGES];
  __shared__ alignas(8) uint64_t s_empty[STAGES];

  const int tid = threadIdx.x;
  const KGeom kg = p.k;
  const int nst = total_stages(kg);
  const uint32_t sbase = (smem_addr(smem) + 1023u) & ~1023u;
  const uint32_t full0 = smem_addr(s_full), empty0 = smem_addr(s_empty);
  if (tid == 0) {
    for (int i = 0; i < STAGES; ++i) {
      mbar_init(full0 + 8 * i, 1);
      mbar_init(empty0 + 8 * i, kConsumers / 32);  // one arrival per consumer warp
    }
    mbar_init_fence();
  }
  __syncthreads();  // the last block-wide barrier: roles part here
  const int64_t n_items = p.n_items();
  // The role as a value the compiler sees uniform over each warpgroup (a wgmma in a branch it
  // cannot prove uniform gets serialized).
  const int role = __shfl_sync(0xffffffffu, tid / 128, 0);

  if (role == kConsumers / 128) {  // the producer warp: its lane 0 issues every stage
    if (tid == kConsumers) {
      const uint64_t policy = l2_evict_first_policy();
      int fill = 0;
      uint32_t parity = 0;
      bool reuse = false;  // whether the slot to fill held a stage before
      int64_t acquired = -1;  // the expert whose maps this thread has acquired last
      for (int64_t idx = blockIdx.x; idx < n_items; idx += gridDim.x) {
        LinItem it;
        if (!p.load_item(idx, it)) continue;
        const int m0 = static_cast<int>(it.base), n0 = static_cast<int>(it.n0);
        const int g = kSortedRows<P> ? 0 : static_cast<int>(it.g);  // sorted rows: one matrix, any expert
        if constexpr (kSortedRows<P>) {  // the expert's maps, when it changes (items are tile-major)
          if (it.g != acquired) p.acquire_maps(it), acquired = it.g;
        }
        for (int s = 0; s < nst; ++s) {
          if (reuse) mbar_wait(empty0 + 8 * fill, parity);
          const uint32_t sa = sbase + static_cast<uint32_t>(fill) * kStageBytes, bar = full0 + 8 * fill;
          mbar_arrive_expect_tx(bar, kStageBytes);
          tma_load_3d(sa, &maps.a, kStageK * s, m0, g, bar);
          if constexpr (kSortedRows<P>) p.tma_weights(sa + BM * kRowBytes, it, kStageK * s, bar, policy);
          else tma_load_3d(sa + BM * kRowBytes, &maps.b, kStageK * s, n0, g, bar, policy);
          if (++fill == STAGES) {
            fill = 0;
            if (reuse) parity ^= 1u;
            reuse = true;
          }
        }
      }
    }
    return;
  }

  // The consumers: the two warpgroups, rows 64·wg … 64·wg + 63 of each item.
  const int wg = role;
  const int spc = kg.kc / kStageK;
  int use = 0;  // the next slot to compute, and the parity of its current phase
  uint32_t parity = 0;
  for (int64_t idx = blockIdx.x; idx < n_items; idx += gridDim.x) {
    LinItem it;
    if (!p.load_item(idx, it)) continue;  // uniform over the block
    if constexpr (kSortedRows<P>) p.fill_rows(it, s_id, s_scale, tid, kConsumers);
    else Cfg::Loads::fill_rows(p, it, s_id, s_scale, tid);
    consumer_sync<kConsumers>();  // the row tables

    float chain[64], total[64];
#pragma unroll
    for (int q = 0; q < 64; ++q) chain[q] = 0.0f, total[q] = 0.0f;

    int left = spc, c = 0;  // stages left in chunk c
    int64_t kend = chunk_end(kg, 0);
    int pending = -1;  // the slot whose wgmma may still run (the stage before this one)
    for (int s = 0; s < nst; ++s) {
      const int slot = use;
      const uint32_t sa = sbase + static_cast<uint32_t>(slot) * kStageBytes;
      mbar_wait(full0 + 8 * slot, parity);
      if (++use == STAGES) use = 0, parity ^= 1u;
      const bool ends = --left == 0 || s == nst - 1;  // chunk c ends here
      wgmma_stage(chain, total, sa + static_cast<uint32_t>(wg * 64 * kRowBytes), sa + BM * kRowBytes,
                  static_cast<int64_t>(kStageK) * s, kend, ends);
      // wgmma_stage waited for all but this stage's group (all of them at a chunk's end): this
      // warp is done reading those slots.
      if ((tid & 31) == 0) {
        if (pending >= 0) mbar_arrive(empty0 + 8 * pending);
        if (ends) mbar_arrive(empty0 + 8 * slot);
      }
      pending = ends ? -1 : slot;
      if (ends) left = spc, kend = chunk_end(kg, ++c);
    }
    wgmma_wait<0>();  // already drained at the last chunk's end; explicit for ptxas

    wgmma_store_tile<Cfg>(p, it, total, s_id, s_scale, tid);
    consumer_sync<kConsumers>();  // the row tables are rewritten by the next item
  }
#endif
}

}  // namespace ft::cuda::lin
