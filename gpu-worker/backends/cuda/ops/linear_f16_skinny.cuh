#pragma once
// The skinny (decode-shaped) fp16 linear kernel: few rows, memory bound, every weight byte read
// once at HBM speed.
//
// A block owns one block of outputs for all of K and all of its rows (≤ 8·RG). Its 8 warps
// split the K chunks of the contract: warp (wk, wn) takes chunks wk and wk + WK (WK = the
// largest power of two ≤ min(chunks, 8), so ≤ 2 chunks per warp) for its own T n8-tiles of the
// block (WN = 8 / WK warp columns). Each warp streams its chunks through a private ring of
// S shared-memory stages (64 k wide: weights 8·T rows, activations 8·RG rows) with cp.async,
// feeds the tensor cores through ldmatrix, and keeps one accumulator set per chunk, each
// started from zero (the contract's P_c). At the end the chunk partials go to shared memory
// and one thread per output folds them in chunk order (P_0 + P_1 + …), exactly as the tiled
// kernel's running total does, then applies the common epilogue (linear_contract.cuh).
//
// The kernel walks items (blocks of outputs, optionally of a grouped problem) from a Problem
// (see linear_f16.cu / moe_dense.cu): grid-stride over items, so dense calls launch one block
// per item and grouped calls a persistent grid sized from n and top_k only.
#include <cuda_fp16.h>

#include <cstdint>

#include "gpu-worker/backends/cuda/core/programmatic.cuh"
#include "gpu-worker/backends/cuda/ops/linear_contract.cuh"
#include "gpu-worker/backends/cuda/ops/linear_mma.cuh"

namespace ft::cuda::lin {

constexpr int kSkinnyWarps = 8;
constexpr int kSkinnyThreads = 32 * kSkinnyWarps;

template <int RG_, int T_, int S_>
struct SkinnyCfg {
  static constexpr int RG = RG_;           // activation row groups of 8 (1, 2 or 4)
  static constexpr int T = T_;             // n8 weight tiles per warp (SwiGLU: 2 = gate + up)
  static constexpr int S = S_;             // ring stages per warp
  static constexpr int MT = (RG + 1) / 2;  // m16 tiles
  static constexpr int kRows = 8 * RG;     // rows per item
  static constexpr int kSlotBytes = (8 * T + 8 * RG) * kRowBytes;
  static constexpr int kRingBytes = kSkinnyWarps * S * kSlotBytes;
};

// Dynamic shared memory of a launch: the rings, reused for the chunk partials.
template <class Cfg>
inline size_t skinny_smem_bytes(int chunks, int wn) {
  const size_t partials = static_cast<size_t>(chunks) * Cfg::kRows * (8 * Cfg::T * wn) * sizeof(float);
  return partials > static_cast<size_t>(Cfg::kRingBytes) ? partials : static_cast<size_t>(Cfg::kRingBytes);
}

// Outputs per item: SwiGLU blocks hold 8 h columns per warp column (gate + up tiles).
template <class Cfg, bool SWIGLU>
__host__ __device__ constexpr int skinny_block_n(int wn) {
  return SWIGLU ? 8 * wn : 8 * Cfg::T * wn;
}

// Whether this problem's launch may have started before the kernel ahead of it ended (dense
// problems can say so: their items and weight rows are known without reading memory).
template <class P>
__device__ __forceinline__ bool starts_early(const P& p) {
  if constexpr (requires { p.programmatic; }) return p.programmatic;
  else return false;
}

// Whether this launch lets its dependents launch once its own wait is over (linear_trigger()).
template <class P>
__device__ __forceinline__ bool triggers(const P& p) {
  if constexpr (requires { p.trigger; }) return p.trigger;
  else return false;
}

template <class Cfg, class P>
__global__ void __launch_bounds__(kSkinnyThreads, 1) linear_skinny_kernel(const P p, const int wk_count) {
  constexpr int RG = Cfg::RG, T = Cfg::T, S = Cfg::S, MT = Cfg::MT, R = Cfg::kRows;
  constexpr bool SWIGLU = P::kSwiglu;
  static_assert(!SWIGLU || T == 2, "SwiGLU items pair one gate and one up tile");
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int32_t s_id[R];
  __shared__ float s_scale[R];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int WK = wk_count, WN = kSkinnyWarps / wk_count;
  const int wk = warp % WK, wn = warp / WK;
  const KGeom kg = p.k;
  const int NT = 8 * T * WN;  // partial columns per block
  const uint64_t policy = l2_evict_first_policy();
  const uint32_t ring = smem_addr(smem) + static_cast<uint32_t>(warp * S * Cfg::kSlotBytes);
  float* partial = reinterpret_cast<float*>(smem);

  // This warp's chunks and stages (every warp has chunk wk: WK ≤ chunks).
  const int c0 = wk, c1 = wk + WK;
  const int st0 = chunk_stages(kg, c0);
  const int st1 = c1 < kg.chunks ? chunk_stages(kg, c1) : 0;
  const int nst = st0 + st1;
  // (Only the ≤ 8-row shape is launched so: its registers have room for the extra prologue.)
  bool early = false;
  if constexpr (RG == 1) early = starts_early(p);

  // Weight copy sources of this lane for an item: units lane + 32 m (row i = idx / 8 of the
  // warp's 8·T rows, unit idx % 8).
  const __half* wsrc[2 * T];
  bool wok[2 * T];
  auto weight_sources = [&](const LinItem& it) {
#pragma unroll
    for (int m = 0; m < 2 * T; ++m) {
      const int e = lane + 32 * m, i = e >> 3, u = e & 7, t = i >> 3, j = i & 7;
      const int64_t n = SWIGLU ? it.n0 + 8 * wn + j : it.n0 + 8 * (wn * T + t) + j;
      const __half* row = p.w_row(it, SWIGLU ? t : 0, n);
      wok[m] = row != nullptr;
      wsrc[m] = (row ? row : it.w0) + 8 * u;
    }
  };
  auto stage_k = [&](int s) -> int64_t {
    return s < st0 ? static_cast<int64_t>(c0) * kg.kc + kStageK * s
                   : static_cast<int64_t>(c1) * kg.kc + kStageK * (s - st0);
  };
  auto load_weights = [&](int s) {
    const uint32_t slot = ring + static_cast<uint32_t>((s % S) * Cfg::kSlotBytes);
    const int64_t kb = stage_k(s);
#pragma unroll
    for (int m = 0; m < 2 * T; ++m) {
      const int e = lane + 32 * m, i = e >> 3, u = e & 7;
      const bool ok = wok[m] && kb + 8 * u < kg.in8;
      cp_async_cg16(slot + tile_offset(i, u), ok ? wsrc[m] + kb : wsrc[m], ok, policy);
    }
  };

  const int64_t n_items = p.n_items();
  // Launched programmatically: the first item's first weight stages stream while the kernel
  // ahead (the activations' conversion) ends. Nothing that kernel writes is read, and nothing
  // is written, before the wait; those copies join the first stage's commit group below.
  int prefetched = 0;
  if (early) {
    LinItem it;
    if (blockIdx.x < n_items && p.load_item(blockIdx.x, it)) {
      weight_sources(it);
      prefetched = nst < S - 1 ? nst : S - 1;
      for (int s = 0; s < prefetched; ++s) load_weights(s);
    }
    grid_dependency_wait();
  }
  // Everything this grid reads from the kernel ahead is final now: the kernel after it may
  // launch and wait (core/programmatic.cuh) beside this one's last items.
  if (triggers(p)) grid_dependents_launch();

  for (int64_t idx = blockIdx.x; idx < n_items; idx += gridDim.x) {
    LinItem it;
    if (!p.load_item(idx, it)) continue;  // uniform over the block
    if (tid < it.rows) {
      const int32_t id = p.row_id(it, tid);
      s_id[tid] = id;
      s_scale[tid] = p.a_scale(it, id);
    }
    __syncthreads();

    weight_sources(it);
    // Activation copy sources of this lane: units (row (lane / 8) + 4 m, unit lane % 8).
    const __half* asrc[2 * RG];
    bool aok[2 * RG];
#pragma unroll
    for (int m = 0; m < 2 * RG; ++m) {
      const int i = (lane >> 3) + 4 * m, u = lane & 7;
      aok[m] = i < it.rows;
      asrc[m] = (aok[m] ? p.a_row(it, s_id[i]) : it.w0) + 8 * u;
    }

    auto load_stage = [&](int s, bool weights) {
      const uint32_t slot = ring + static_cast<uint32_t>((s % S) * Cfg::kSlotBytes);
      const int64_t kb = stage_k(s);
      if (weights) load_weights(s);
#pragma unroll
      for (int m = 0; m < 2 * RG; ++m) {
        const int i = (lane >> 3) + 4 * m, u = lane & 7;
        const bool ok = aok[m] && kb + 8 * u < kg.in8;
        // After a programmatic start nothing may come from lines cached before the wait: L2 only.
        if (early) cp_async_cg16_l2(slot + tile_offset(8 * T + i, u), ok ? asrc[m] + kb : asrc[m], ok);
        else cp_async_ca16(slot + tile_offset(8 * T + i, u), ok ? asrc[m] + kb : asrc[m], ok);
      }
    };
    // The k16 steps of one stage that lie inside its chunk, in ascending order.
    auto mma_stage = [&](uint32_t slot, int64_t kb, int64_t kend, float(&acc)[MT][T][4]) {
#pragma unroll
      for (int j = 0; j < kStageK / 16; ++j) {
        if (kb + 16 * j < kend) {
          uint32_t a[MT][4];
          if constexpr (RG == 1) {
            ldmatrix_x2(a[0][0], a[0][2], slot + tile_offset(8 * T + (lane & 7), 2 * j + ((lane >> 3) & 1)));
            a[0][1] = 0u;
            a[0][3] = 0u;
          } else {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
              ldmatrix_x4(
                  a[mt], slot + tile_offset(8 * T + 16 * mt + (lane & 7) + 8 * ((lane >> 3) & 1), 2 * j + (lane >> 4)));
          }
#pragma unroll
          for (int t = 0; t < T; ++t) {
            uint32_t b0, b1;
            ldmatrix_x2(b0, b1, slot + tile_offset(8 * t + (lane & 7), 2 * j + ((lane >> 3) & 1)));
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) mma_16816(acc[mt][t], a[mt], b0, b1);
          }
        }
      }
    };

    float acc0[MT][T][4], acc1[MT][T][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int t = 0; t < T; ++t)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc0[mt][t][q] = 0.0f, acc1[mt][t][q] = 0.0f;

#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
      if (s < nst) load_stage(s, s >= prefetched);
      cp_async_commit();
    }
    prefetched = 0;
    for (int s = 0; s < nst; ++s) {
      cp_async_wait<S - 2>();
      __syncwarp();  // every lane's copies of stage s landed; every lane is done with slot s − 1
      if (s + S - 1 < nst) load_stage(s + S - 1, true);
      cp_async_commit();
      const uint32_t slot = ring + static_cast<uint32_t>((s % S) * Cfg::kSlotBytes);
      if (s < st0) mma_stage(slot, stage_k(s), chunk_end(kg, c0), acc0);
      else mma_stage(slot, stage_k(s), chunk_end(kg, c1), acc1);
    }
    cp_async_wait<0>();
    __syncthreads();  // all rings idle: their memory now holds the partials

    // partial[c][row][col], col = 8·(wn·T + t) + column within the tile.
    auto put = [&](int c, const float(&acc)[MT][T][4]) {
      const int g = lane >> 2, q = lane & 3;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int t = 0; t < T; ++t) {
          const int col = 8 * (wn * T + t) + 2 * q;
          const int r0 = 16 * mt + g;
          *reinterpret_cast<float2*>(partial + (static_cast<int64_t>(c) * R + r0) * NT + col) =
              make_float2(acc[mt][t][0], acc[mt][t][1]);
          if (r0 + 8 < R)
            *reinterpret_cast<float2*>(partial + (static_cast<int64_t>(c) * R + r0 + 8) * NT + col) =
                make_float2(acc[mt][t][2], acc[mt][t][3]);
        }
    };
    put(c0, acc0);
    if (c1 < kg.chunks) put(c1, acc1);
    __syncthreads();

    auto fold = [&](int r, int col) {
      float s = 0.0f;
      for (int c = 0; c < kg.chunks; ++c) s = __fadd_rn(s, partial[(static_cast<int64_t>(c) * R + r) * NT + col]);
      return s;
    };
    if constexpr (!SWIGLU) {
      for (int e = tid; e < it.rows * NT; e += kSkinnyThreads) {
        const int r = e / NT, col = e % NT;
        const int64_t n = it.n0 + col;
        if (n < p.out) p.store(it, s_id[r], n, fold(r, col), s_scale[r]);
      }
    } else {
      const int NH = 8 * WN;
      for (int e = tid; e < it.rows * NH; e += kSkinnyThreads) {
        const int r = e / NH, hc = e % NH;
        const int colg = 16 * (hc >> 3) + (hc & 7);
        const int64_t h = it.n0 + hc;
        if (h < p.out) p.store_swiglu(it, s_id[r], h, fold(r, colg), fold(r, colg + 8), s_scale[r]);
      }
    }
    __syncthreads();  // partials and row tables are rewritten by the next item
  }
}

}  // namespace ft::cuda::lin
