#pragma once
// The grouped problems of moe_dense_experts (ops/moe.h) as the linear kernels see them: tiles of
// one expert's picks, gate+up with the SwiGLU epilogue, down. Shared by moe_dense.cu and the
// sm_90a wgmma instantiation (linear_f16_wgmma.cu).
#include <cuda_fp16.h>

#include <cstdint>

#include "gpu-worker/backends/cuda/ops/linear_contract.cuh"
#include "gpu-worker/backends/cuda/ops/linear_tma.cuh"
#include "gpu-worker/backends/cuda/ops/moe.h"

namespace ft::cuda {

// A tile: rows [start, start + rows) of the dispatch's sorted_pick, all of one expert.
struct MoeTile {
  int32_t expert, start, rows;
};

// Items of both grouped problems: tile-major, output block fastest (a tile's rows stay in L1/L2
// while its expert's weights stream).
//
// Tiles come from a device tile list, or — `direct`, where the caller knows every active expert
// fits one tile (n ≤ the kernel's rows: a token's experts are distinct, so an expert has at most
// n picks) — straight from the dispatch: tile a is active expert a, no tile-list kernel between
// the dispatch and the experts. The dispatch then ended before the kernel ahead of this one began,
// so a `programmatic` launch may read its items before its grid_dependency_wait (through L2:
// nothing of them may come from lines an SM cached before).
struct GroupedBase {
  lin::KGeom k;
  int64_t out = 0;
  const DenseExpert* experts = nullptr;
  const MoeTile* tiles = nullptr;
  const int32_t* n_tiles = nullptr;
  int64_t n_blocks = 0;
  int block_n = 0;
  const int32_t* sorted_pick = nullptr;
  bool direct = false;
  const int32_t* offsets = nullptr;   // direct: the dispatch's
  const int32_t* active = nullptr;    // direct
  const int32_t* n_active = nullptr;  // direct
  bool programmatic = false;          // launched to start early (linear_f16_skinny.cuh, starts_early)
  bool trigger = false;               // lets the kernel after it launch early (lin::linear_trigger)

  // The kernel's output block: every grouped launcher sets it before launching.
  void set_block_n(int bn) {
    block_n = bn;
    n_blocks = (out + bn - 1) / bn;
  }
  __device__ int64_t n_items() const {
    return static_cast<int64_t>(direct ? __ldcg(n_active) : *n_tiles) * n_blocks;
  }
  __device__ bool load_tile(int64_t idx, lin::LinItem& it) const {
    const int64_t ti = idx / n_blocks;
    MoeTile t;
    if (direct) {
      t.expert = __ldcg(active + ti);
      t.start = __ldcg(offsets + t.expert);
      t.rows = __ldcg(offsets + t.expert + 1) - t.start;
    } else {
      t = tiles[ti];
    }
    it.n0 = (idx % n_blocks) * block_n;
    it.g = t.expert;
    it.base = t.start;
    it.rows = t.rows;
    return t.rows > 0;
  }
  // Linear w of the tile's expert into the item's weight slot `which` (0, or 1: SwiGLU's up).
  __device__ static void bind(lin::LinItem& it, int which, const LinearF16& w) {
    (which ? it.w1 : it.w0) = w.w;
    (which ? it.ws1 : it.ws0) = w.w_scale;
    (which ? it.bias1 : it.bias0) = w.bias;
  }
  __device__ int32_t row_id(const lin::LinItem& it, int i) const { return sorted_pick[it.base + i]; }
  __device__ const __half* w_row(const lin::LinItem& it, int which, int64_t n) const {
    return n < out ? (which ? it.w1 : it.w0) + n * k.in8 : nullptr;
  }
};

// Step 3: rows are tokens (pick p reads x row p / top_k), outputs h[p][i].
struct GateUpProblem : GroupedBase {
  static constexpr bool kSwiglu = true;
  int top_k = 1;
  const __half* xh = nullptr;
  int64_t ld_xh = 0;
  const float* xs = nullptr;
  float* h = nullptr;
  int64_t ld_h = 0;
  float limit = 0.0f;

  __device__ bool load_item(int64_t idx, lin::LinItem& it) const {
    if (!load_tile(idx, it)) return false;
    bind(it, 0, experts[it.g].gate);
    bind(it, 1, experts[it.g].up);
    return true;
  }
  __device__ const __half* a_row(const lin::LinItem&, int32_t pick) const { return xh + (pick / top_k) * ld_xh; }
  __device__ float a_scale(const lin::LinItem&, int32_t pick) const { return xs[pick / top_k]; }
  __device__ void store_swiglu(const lin::LinItem& it, int32_t pick, int64_t i, float acc_g, float acc_u,
                               float row_scale) const {
    const float g = lin::linear_value(acc_g, row_scale, it.ws0, it.bias0, i);
    const float u = lin::linear_value(acc_u, row_scale, it.ws1, it.bias1, i);
    h[pick * ld_h + i] = lin::swiglu_value(g, u, limit);
  }
};

// Step 5: rows are picks, outputs Y[p][d].
struct DownProblem : GroupedBase {
  static constexpr bool kSwiglu = false;
  const __half* hh = nullptr;
  int64_t ld_hh = 0;
  const float* hs = nullptr;
  float* y = nullptr;
  int64_t ld_y = 0;

  __device__ bool load_item(int64_t idx, lin::LinItem& it) const {
    if (!load_tile(idx, it)) return false;
    bind(it, 0, experts[it.g].down);
    return true;
  }
  __device__ const __half* a_row(const lin::LinItem&, int32_t pick) const { return hh + pick * ld_hh; }
  __device__ float a_scale(const lin::LinItem&, int32_t pick) const { return hs[pick]; }
  __device__ void store(const lin::LinItem& it, int32_t pick, int64_t n, float acc, float row_scale) const {
    y[pick * ld_y + n] = lin::linear_value(acc, row_scale, it.ws0, it.bias0, n);
  }
};

// The prefill form on the copy engine's kernel (sm_90, linear_wgmma_tma_kernel): x's fp16 rows
// copied into the dispatch's sorted order first (moe_sort_rows), so a tile's rows are consecutive
// rows of one matrix that one tensor map describes, and each expert's weights come through its own
// maps (DenseExpertMaps: gate and up as two 64-row boxes, so B holds 64 gate rows then the same
// 64 up rows and the epilogue pairs column j with j + 64). Row ids are positions in sorted order:
// GateUp writes h in that order, and Down — whose rows are then a plain tile of hh — stores each
// row at its pick. Every row meets the same operands in the same k order as in the gathered form,
// so the same bits.
struct SortedRows {
  static constexpr bool kSortedRows = true;  // (lin::kSortedRows); SwiGLU's B = [64 gate rows; 64 up rows]
  const DenseExpertMaps* maps = nullptr;
};

struct GateUpSortedProblem : GateUpProblem, SortedRows {
  // Row i of a tile: its position base + i (h's row), scaled by its token's x scale.
  __device__ void fill_rows(const lin::LinItem& it, int32_t* s_id, float* s_scale, int tid, int nthr) const {
    for (int i = tid; i < it.rows; i += nthr) {
      const int32_t pos = static_cast<int32_t>(it.base) + i;
      s_id[i] = pos;
      s_scale[i] = xs[sorted_pick[pos] / top_k];
    }
  }
  // The tile's expert's maps, uploaded by cudaMemcpy, made visible to the copy engine.
  __device__ void acquire_maps(const lin::LinItem& it) const {
#if FT_HAVE_WGMMA
    lin::tensormap_acquire(&maps[it.g].gate);
    lin::tensormap_acquire(&maps[it.g].up);
#endif
  }
  // Stage k's weights: the expert's gate rows n0 … n0 + 63, then its up rows.
  __device__ void tma_weights(uint32_t sb, const lin::LinItem& it, int k, uint32_t bar, uint64_t policy) const {
#if FT_HAVE_WGMMA
    const DenseExpertMaps* m = maps + it.g;
    lin::tma_load_3d(sb, &m->gate, k, static_cast<int>(it.n0), 0, bar, policy);
    lin::tma_load_3d(sb + 64 * lin::kRowBytes, &m->up, k, static_cast<int>(it.n0), 0, bar, policy);
#endif
  }
};

struct DownSortedProblem : DownProblem, SortedRows {
  // Row i of a tile: stored at its pick, scaled by hh's row scale at its position.
  __device__ void fill_rows(const lin::LinItem& it, int32_t* s_id, float* s_scale, int tid, int nthr) const {
    for (int i = tid; i < it.rows; i += nthr) {
      const int32_t pos = static_cast<int32_t>(it.base) + i;
      s_id[i] = sorted_pick[pos];
      s_scale[i] = hs[pos];
    }
  }
  __device__ void acquire_maps(const lin::LinItem& it) const {
#if FT_HAVE_WGMMA
    lin::tensormap_acquire(&maps[it.g].down);
#endif
  }
  __device__ void tma_weights(uint32_t sb, const lin::LinItem& it, int k, uint32_t bar, uint64_t policy) const {
#if FT_HAVE_WGMMA
    lin::tma_load_3d(sb, &maps[it.g].down, k, static_cast<int>(it.n0), 0, bar, policy);
#endif
  }
};

}  // namespace ft::cuda
