// moe_dense_experts (ops/moe.h): routed experts resident in VRAM as dense fp16, the GPU twin of
// the per-pick swiglu_mlp calls in shared/engine/local_experts.cpp.
//
//   1. xh, xs = to_f16_rows(x)                          (per token)
//   2. tiles  = the dispatch's pick lists cut into tiles of ≤ BM rows (one small block)
//   3. h[p]   = swiglu(gate_e·x_t, up_e·x_t)            (grouped linear, gate and up tiles paired)
//   4. hh, hs = to_f16_rows(h)                          (per pick)
//   5. Y[p]   = down_e·h[p]                             (grouped linear)
// Steps 3 and 5 are the kernels of linear_f16 over a grouped problem (rows gathered through the
// dispatch), so every pick's row gets the bits of separate linear_f16 / swiglu_rows calls on
// that row; their grids are persistent, sized from n and top_k and the device only, and read the
// number of tiles from device memory, so a decode step can be captured in a graph.
//
// Decode-sized calls (≤ 32 tokens) skip step 2: each active expert is one tile, read from the
// dispatch (GroupedBase::direct), and at ≤ 8 tokens steps 3 and 5 launch programmatically, their
// first weight stages streaming while the conversion ahead of them ends.
//
// Prefill-sized calls with the experts' tensor maps on an sm_90 device (the sorted-row form):
//   2b. xs_rows = xh[sorted_pick[i] / top_k]               (moe_sort_rows_kernel)
// and steps 3 and 5 on the copy engine's kernel, whose A tiles are then plain row ranges:
// GateUp writes h in sorted order (so hh is too) and Down stores each row at its pick.
#include <algorithm>
#include <cstdint>
#include <cub/block/block_scan.cuh>
#include <string>
#include <type_traits>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/env_policy.h"
#include "gpu-worker/backends/cuda/ops/linear.h"
#include "gpu-worker/backends/cuda/ops/linear_f16_kernels.cuh"
#include "gpu-worker/backends/cuda/ops/linear_f16_wgmma.h"
#include "gpu-worker/backends/cuda/ops/linear_launch.cuh"
#include "gpu-worker/backends/cuda/ops/linear_tma_map.h"
#include "gpu-worker/backends/cuda/ops/moe.h"
#include "gpu-worker/backends/cuda/ops/moe_dense_problems.cuh"
#include "shared/core/error.h"

namespace ft::cuda {
namespace {

constexpr int kTileThreads = 1024;

__global__ void __launch_bounds__(kTileThreads)
    moe_tiles_kernel(const int32_t* offsets, const int32_t* active, const int32_t* n_active, int bm, MoeTile* tiles,
                     int32_t* n_tiles) {
  using Scan = cub::BlockScan<int32_t, kTileThreads>;
  __shared__ typename Scan::TempStorage tmp;
  const int na = *n_active;
  int32_t carry = 0;
  for (int a0 = 0; a0 < na; a0 += kTileThreads) {
    const int a = a0 + static_cast<int>(threadIdx.x);
    int32_t e = 0, first = 0, cnt = 0;
    if (a < na) {
      e = active[a];
      first = offsets[e];
      cnt = offsets[e + 1] - first;
    }
    const int32_t nt = (cnt + bm - 1) / bm;
    int32_t pos, total;
    Scan(tmp).ExclusiveSum(nt, pos, total);
    __syncthreads();
    for (int32_t i = 0; i < nt; ++i) tiles[carry + pos + i] = MoeTile{e, first + i * bm, std::min(bm, cnt - i * bm)};
    carry += total;
  }
  if (threadIdx.x == 0) *n_tiles = carry;
}

// Step 2b: row i of dst = x's fp16 row of pick sorted_pick[i] (one warp a row, 16-byte units);
// rows past the dispatch's picks (those of out-of-range experts) are zeroed, so every row the
// copy engine may read was written.
constexpr int kSortThreads = 256;
__global__ void __launch_bounds__(kSortThreads)
    moe_sort_rows_kernel(const int32_t* offsets, const int32_t* active, const int32_t* n_active,
                         const int32_t* sorted_pick, int top_k, const __half* xh, int64_t ld, int64_t picks,
                         __half* dst) {
  const int na = *n_active;
  const int64_t total = na > 0 ? offsets[active[na - 1] + 1] : 0;  // picks with an expert in range
  const int64_t units = ld / 8;
  const int lane = threadIdx.x & 31;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * kSortThreads + threadIdx.x) / 32; i < picks;
       i += static_cast<int64_t>(gridDim.x) * (kSortThreads / 32)) {
    uint4* out = reinterpret_cast<uint4*>(dst + i * ld);
    if (i < total) {
      const uint4* in = reinterpret_cast<const uint4*>(xh + (sorted_pick[i] / top_k) * ld);
      for (int64_t u = lane; u < units; u += 32) out[u] = in[u];
    } else {
      for (int64_t u = lane; u < units; u += 32) out[u] = make_uint4(0, 0, 0, 0);
    }
  }
}

// Workspace carve-up for n tokens (offsets grow with n, so a buffer sized for max_n fits).
struct Scratch {
  __half* xh;
  float* xs;
  float* h;
  __half* hh;
  float* hs;
  MoeTile* tiles;
  int32_t* n_tiles;
  __half* xrows;  // the sorted-row form's x rows (null unless carved for it)
  size_t bytes;
};
constexpr int kMinTileRows = 8;  // the smallest tile of any kernel below: bounds the tile count
int64_t max_tiles(int64_t picks) { return picks + picks / kMinTileRows; }

Scratch carve(void* ws, int64_t n, int top_k, int64_t D, int64_t I, bool sorted_rows) {
  const int64_t D8 = (D + 7) / 8 * 8, I8 = (I + 7) / 8 * 8, P = n * top_k;
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off += (bytes + 255) / 256 * 256;
    return static_cast<char*>(ws) + at;
  };
  Scratch s;
  s.xh = reinterpret_cast<__half*>(take(static_cast<size_t>(n * D8) * sizeof(__half)));
  s.xs = reinterpret_cast<float*>(take(static_cast<size_t>(n) * sizeof(float)));
  s.h = reinterpret_cast<float*>(take(static_cast<size_t>(P * I) * sizeof(float)));
  s.hh = reinterpret_cast<__half*>(take(static_cast<size_t>(P * I8) * sizeof(__half)));
  s.hs = reinterpret_cast<float*>(take(static_cast<size_t>(P) * sizeof(float)));
  s.tiles = reinterpret_cast<MoeTile*>(take(static_cast<size_t>(max_tiles(P)) * sizeof(MoeTile)));
  s.n_tiles = reinterpret_cast<int32_t*>(take(sizeof(int32_t)));
  s.xrows = sorted_rows ? reinterpret_cast<__half*>(take(static_cast<size_t>(P * D8) * sizeof(__half))) : nullptr;
  s.bytes = off;
  return s;
}

template <class Cfg, class Pr>
void launch_grouped_skinny(Pr pr, int64_t tiles_bound, cudaStream_t stream) {
  const int wk = lin::skinny_warps_along_k(pr.k.chunks), wn = lin::kSkinnyWarps / wk;
  pr.set_block_n(lin::skinny_block_n<Cfg, Pr::kSwiglu>(wn));
  const size_t smem = lin::skinny_smem_bytes<Cfg>(pr.k.chunks, wn);
  // Only the one-row-group shapes have the early prologue (linear_f16_skinny.cuh).
  if (Cfg::RG != 1) pr.programmatic = false;
  lin::launch_items_early(pr.programmatic, lin::linear_skinny_kernel<Cfg, Pr>, lin::kSkinnyThreads, smem,
                          tiles_bound * pr.n_blocks, true, stream, pr, wk);
}

template <class Cfg, class Pr>
void launch_grouped_tiled(Pr pr, int64_t tiles_bound, cudaStream_t stream) {
  pr.set_block_n(lin::tiled_block_n<Cfg, Pr::kSwiglu>());
  lin::launch_items(lin::linear_tiled_kernel<Cfg, Pr>, Cfg::kThreads, Cfg::kSmemBytes, tiles_bound * pr.n_blocks, true,
                    stream, pr);
}

// Kernel family by tokens per call: an expert has at most n rows, so n ≤ 32 fits one skinny
// item per active expert; beyond, tiled blocks of 64 rows (128 from 1024 tokens on, where
// experts are expected to hold many rows each).
enum class Family { Skinny8, Skinny16, Skinny32, TiledMedium, TiledLarge };
Family family_for(int64_t n) {
  if (n <= 8) return Family::Skinny8;
  if (n <= 16) return Family::Skinny16;
  if (n <= 32) return Family::Skinny32;
  return n < 1024 ? Family::TiledMedium : Family::TiledLarge;
}
int tile_rows(Family f) {
  switch (f) {
    case Family::Skinny8: return 8;
    case Family::Skinny16: return 16;
    case Family::Skinny32: return 32;
    case Family::TiledMedium: return lin::TiledMedium::BM;
    case Family::TiledLarge: return lin::TiledLarge3::BM;
  }
  return 8;
}

// Down projections of ≤ 8 tokens stream two n8 tiles per warp: an item is then 16 outputs × I
// (64 KB at the real widths) instead of 32 KB, whose ring fill and chunk fold cost as much as
// the streaming. Same contract, same bits. FLASHTIER_MOE_DOWN_PAIRS=off keeps one tile (A/B).
bool down_pairs() {
  static const bool on = !env_off("FLASHTIER_MOE_DOWN_PAIRS");
  return on;
}

// The sorted-row form where it can run (FLASHTIER_MOE_SORTED=off: the gathered form, for A/B).
// Its A tiles are the wgmma kernels' 128 rows, the prefill family's tiles.
bool sorted_rows_on() {
  static const bool on = !env_off("FLASHTIER_MOE_SORTED");
  return on;
}
constexpr int kSortedTileRows = 128;
static_assert(lin::TiledLarge3::BM == kSortedTileRows, "sorted tiles are the prefill family's");
// Decode-sized calls read their tiles from the dispatch (FLASHTIER_MOE_DIRECT=off: the tile list
// and plain launches, for A/B).
bool direct_tiles_on() {
  static const bool on = !env_off("FLASHTIER_MOE_DIRECT");
  return on;
}

template <class Pr>
void launch_grouped(Family f, const Pr& pr, int64_t tiles_bound, cudaStream_t stream) {
  using Skinny8 = std::conditional_t<Pr::kSwiglu, lin::SkinnySwiglu8, lin::SkinnyRows8>;
  switch (f) {
    case Family::Skinny8:
      if (!Pr::kSwiglu && down_pairs()) return launch_grouped_skinny<lin::SkinnyRows8Pair>(pr, tiles_bound, stream);
      return launch_grouped_skinny<Skinny8>(pr, tiles_bound, stream);
    case Family::Skinny16: return launch_grouped_skinny<lin::SkinnyRows16>(pr, tiles_bound, stream);
    case Family::Skinny32: return launch_grouped_skinny<lin::SkinnyRows32>(pr, tiles_bound, stream);
    case Family::TiledMedium: return launch_grouped_tiled<lin::TiledMedium>(pr, tiles_bound, stream);
    case Family::TiledLarge:
      if (lin::linear_wgmma()) return launch_grouped_wgmma(pr, tiles_bound, stream);
      if (lin::current_device_limits().smem_optin >= lin::TiledLarge4::kSmemBytes)
        return launch_grouped_tiled<lin::TiledLarge4>(pr, tiles_bound, stream);
      return launch_grouped_tiled<lin::TiledLarge3>(pr, tiles_bound, stream);
  }
}

}  // namespace

size_t moe_dense_workspace_bytes(int64_t max_n, int top_k, int64_t D, int64_t I, bool sorted_rows) {
  return carve(nullptr, max_n, top_k, D, I, sorted_rows).bytes;
}

bool moe_dense_expert_maps(const DenseExpert& e, DenseExpertMaps& out) {
  auto encode = [](CUtensorMap& map, const LinearF16& L, int box_rows) {
    const int64_t in8 = (L.in + 7) / 8 * 8;
    return lin::encode_f16_tile_map(map, L.w, in8, L.out, 1, in8, 0, box_rows);
  };
  return encode(out.gate, e.gate, 64) && encode(out.up, e.up, 64) && encode(out.down, e.down, 128);
}

void moe_dense_experts(const DenseExpert* experts, const MoeRoutes& r, const MoeDispatch& d, const float* x,
                       int64_t ld_x, int64_t D, int64_t I, float limit, float* Y, void* workspace,
                       cudaStream_t stream, const DenseExpertMaps* maps) {
  if (r.n < 0 || r.top_k <= 0 || D <= 0 || I <= 0 || (r.n > 1 && ld_x < D))
    throw Error("moe_dense_experts: bad shape (n " + std::to_string(r.n) + ", top_k " + std::to_string(r.top_k) +
                ", D " + std::to_string(D) + ", I " + std::to_string(I) + ")");
  if (r.n == 0) return;
  const int64_t P = r.n * r.top_k, D8 = (D + 7) / 8 * 8, I8 = (I + 7) / 8 * 8;
  if (P > 0x7fffffff) throw Error("moe_dense_experts: too many picks");
  const Family fam = family_for(r.n);
  const int bm = tile_rows(fam);
  // The sorted-row form: where its maps exist, the call is prefill-sized and this device runs it.
  bool sorted = maps && fam == Family::TiledLarge && sorted_rows_on() && lin::grouped_sorted_wgmma();
  const Scratch s = carve(workspace, r.n, r.top_k, D, I, maps != nullptr);
  CUtensorMap xrows_map, hrows_map;
  if (sorted)
    sorted = lin::encode_f16_tile_map(xrows_map, s.xrows, D8, P, 1, D8, 0, kSortedTileRows) &&
             lin::encode_f16_tile_map(hrows_map, s.hh, I8, P, 1, I8, 0, kSortedTileRows);
  // Skinny families (n ≤ their rows): each active expert one tile (at most n picks), no tile list.
  const bool direct = fam != Family::TiledMedium && fam != Family::TiledLarge && direct_tiles_on();
  const bool early = direct && fam == Family::Skinny8 && lin::linear_programmatic(r.n);
  const int64_t tiles_bound = direct ? P : P + P / bm;
  // (Σ_e ⌈cnt_e / bm⌉ ≤ n_active + P / bm, n_active ≤ P)

  to_f16_rows(x, ld_x, r.n, D, s.xh, D8, s.xs, stream);
  if (!direct) {
    moe_tiles_kernel<<<1, kTileThreads, 0, stream>>>(d.offsets, d.active, d.n_active, bm, s.tiles, s.n_tiles);
    FT_CUDA_CHECK_LAUNCH();
  }
  if (sorted) {
    const int64_t blocks = std::min<int64_t>((P + kSortThreads / 32 - 1) / (kSortThreads / 32), 65535);
    moe_sort_rows_kernel<<<static_cast<unsigned>(blocks), kSortThreads, 0, stream>>>(
        d.offsets, d.active, d.n_active, d.sorted_pick, r.top_k, s.xh, D8, P, s.xrows);
    FT_CUDA_CHECK_LAUNCH();
  }

  auto grouped = [&](auto& pr) {
    pr.experts = experts;
    pr.tiles = s.tiles;
    pr.n_tiles = s.n_tiles;
    pr.sorted_pick = d.sorted_pick;
    pr.direct = direct;
    pr.offsets = d.offsets;
    pr.active = d.active;
    pr.n_active = d.n_active;
    pr.programmatic = early;
    pr.trigger = lin::linear_trigger();
  };
  GateUpProblem gu;
  gu.k = lin::make_kgeom(D, linear_k_chunk(D, I));
  gu.out = I;
  grouped(gu);
  gu.top_k = r.top_k;
  gu.xh = s.xh;
  gu.ld_xh = D8;
  gu.xs = s.xs;
  gu.h = s.h;
  gu.ld_h = I;
  gu.limit = limit;
  if (sorted) launch_grouped_sorted_wgmma(GateUpSortedProblem{gu, SortedRows{maps}}, tiles_bound, xrows_map, stream);
  else launch_grouped(fam, gu, tiles_bound, stream);

  to_f16_rows(s.h, I, P, I, s.hh, I8, s.hs, stream);

  DownProblem dn;
  dn.k = lin::make_kgeom(I, linear_k_chunk(I, D));
  dn.out = D;
  grouped(dn);
  dn.hh = s.hh;
  dn.ld_hh = I8;
  dn.hs = s.hs;
  dn.y = Y;
  dn.ld_y = D;
  if (sorted) launch_grouped_sorted_wgmma(DownSortedProblem{dn, SortedRows{maps}}, tiles_bound, hrows_map, stream);
  else launch_grouped(fam, dn, tiles_bound, stream);
}

}  // namespace ft::cuda
