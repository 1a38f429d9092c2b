// The sm_90a instantiations of the wgmma tiled linear (linear_f16_wgmma.cuh) and their launcher.
// This file alone is compiled for sm_90a (linear.cmake): its kernels exist only there, and
// linear_wgmma() finds out at run time whether the current device can load them.
#include "gpu-worker/backends/cuda/ops/linear_f16_wgmma.h"

#include <algorithm>
#include <atomic>
#include <string>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/device_attribute.h"
#include "gpu-worker/backends/cuda/core/env_policy.h"
#include "gpu-worker/backends/cuda/ops/linear_f16_dense.cuh"
#include "gpu-worker/backends/cuda/ops/linear_f16_wgmma.cuh"
#include "gpu-worker/backends/cuda/ops/linear_launch.cuh"
#include "gpu-worker/backends/cuda/ops/linear_tma_map.h"
#include "gpu-worker/backends/cuda/ops/moe_dense_problems.cuh"
#include "shared/core/error.h"

namespace ft::cuda {
namespace {

// 5 stages (161 KB): three stages in flight while one computes and one waits for reuse.
using DenseWgmma = lin::WgmmaCfg<5>;
// The copy engine's form: 6 stages (193 KB). The producer warp refills a slot as soon as the
// consumers release it, so a copy is issued up to five stages (~1,300 tensor cycles at full rate)
// before it is needed, more than a trip to HBM.
using DenseTma = lin::WgmmaCfg<6>;

std::atomic<int> g_policy{policy_from_env("FLASHTIER_LINEAR_WGMMA")};
// 0: per-thread copies (FLASHTIER_LINEAR_TMA=off), else the copy engine.
std::atomic<int> g_tma{env_off("FLASHTIER_LINEAR_TMA") ? 0 : 1};


template <class Cfg, class Pr>
void launch_grouped(Pr pr, int64_t tiles_bound, cudaStream_t stream) {
  pr.set_block_n(lin::wgmma_block_n<Cfg, Pr::kSwiglu>());
  lin::launch_items(lin::linear_wgmma_kernel<Cfg, Pr>, Cfg::kThreads, Cfg::kSmemBytes, tiles_bound * pr.n_blocks, true,
                    stream, pr);
}

}  // namespace

namespace lin {
bool linear_wgmma() {
  if (g_policy.load(std::memory_order_relaxed) == 0 || !current_device_is_sm90()) return false;
  static const bool loads =
      kernel_image_loads(reinterpret_cast<const void*>(lin::linear_wgmma_kernel<DenseWgmma, DenseProblem>));
  return current_device_limits().smem_optin >= DenseWgmma::kSmemBytes + 2048 && loads;
}
void set_linear_wgmma(int policy) { g_policy.store(policy, std::memory_order_relaxed); }
void set_linear_tma(int policy) { g_tma.store(policy, std::memory_order_relaxed); }
bool grouped_sorted_wgmma() {
  return g_tma.load(std::memory_order_relaxed) != 0 && linear_wgmma() &&
         current_device_limits().smem_optin >= DenseTma::kSmemBytes + 2048;
}
}  // namespace lin

namespace {
// The problem's operands as tensor maps of Cfg's tiles — BM activation rows and BN weight rows of
// 64 halves, the stage's bytes the kernel's barriers expect — where the copy engine can read both
// (linear_tma_map.h).
template <class Cfg>
bool encode_maps(const DenseProblem& pr, int64_t batch, lin::TmaMaps& maps) {
  static_assert(Cfg::kStageBytes == (Cfg::BM + Cfg::BN) * lin::kRowBytes, "a stage is the two tiles");
  return pr.rows < 0x7fffffff && pr.out < 0x7fffffff && pr.k.in8 < 0x7fffffff &&
         lin::encode_f16_tile_map(maps.a, pr.xh, pr.k.in8, pr.rows, batch, pr.ld_xh, pr.x_stride, Cfg::BM) &&
         lin::encode_f16_tile_map(maps.b, pr.w, pr.k.in8, pr.out, batch, pr.k.in8, pr.w_stride, Cfg::BN);
}

template <class Cfg>
void launch_dense(const DenseProblem& in, int64_t batch, cudaStream_t stream) {
  DenseProblem pr = in;
  pr.set_tiles(Cfg::BM, lin::wgmma_block_n<Cfg, false>(), batch);
  if (pr.items > 0x7fffffff) throw Error("linear_f16: too many tiles (" + std::to_string(pr.items) + ")");
  // Both forms cut the problem into the same tiles, so one tiling serves either.
  static_assert(DenseTma::BM == Cfg::BM && DenseTma::BN == Cfg::BN, "one tiling for both forms");
  lin::TmaMaps maps;
  if (g_tma.load(std::memory_order_relaxed) != 0 &&
      lin::current_device_limits().smem_optin >= DenseTma::kSmemBytes + 2048 && encode_maps<DenseTma>(pr, batch, maps)) {
    lin::launch_items(lin::linear_wgmma_tma_kernel<DenseTma, DenseProblem>, lin::tma_threads<DenseTma>(),
                      DenseTma::kSmemBytes, pr.items, true, stream, pr, maps);
    return;
  }
  lin::launch_items(lin::linear_wgmma_kernel<Cfg, DenseProblem>, Cfg::kThreads, Cfg::kSmemBytes, pr.items, false,
                    stream, pr);
}
}  // namespace

void launch_dense_wgmma(const DenseProblem& pr, int64_t batch, cudaStream_t stream) {
  launch_dense<DenseWgmma>(pr, batch, stream);
}

}  // namespace ft::cuda

namespace ft::cuda {
void launch_grouped_wgmma(const GateUpProblem& pr, int64_t tiles_bound, cudaStream_t stream) {
  launch_grouped<DenseWgmma>(pr, tiles_bound, stream);
}
void launch_grouped_wgmma(const DownProblem& pr, int64_t tiles_bound, cudaStream_t stream) {
  launch_grouped<DenseWgmma>(pr, tiles_bound, stream);
}
}  // namespace ft::cuda

namespace ft::cuda {
namespace {
template <class Pr>
void launch_grouped_sorted(Pr pr, int64_t tiles_bound, const CUtensorMap& rows, cudaStream_t stream) {
  static_assert(lin::kSortedRows<Pr>, "rows in sorted order");
  pr.set_block_n(lin::wgmma_block_n<DenseTma, Pr::kSwiglu>());
  lin::TmaMaps maps;
  maps.a = rows;
  maps.b = rows;  // unused: the weights come through pr.maps
  lin::launch_items(lin::linear_wgmma_tma_kernel<DenseTma, Pr>, lin::tma_threads<DenseTma>(), DenseTma::kSmemBytes,
                    tiles_bound * pr.n_blocks, true, stream, pr, maps);
}
}  // namespace

void launch_grouped_sorted_wgmma(const GateUpSortedProblem& pr, int64_t tiles_bound, const CUtensorMap& rows,
                                 cudaStream_t stream) {
  launch_grouped_sorted(pr, tiles_bound, rows, stream);
}
void launch_grouped_sorted_wgmma(const DownSortedProblem& pr, int64_t tiles_bound, const CUtensorMap& rows,
                                 cudaStream_t stream) {
  launch_grouped_sorted(pr, tiles_bound, rows, stream);
}
}  // namespace ft::cuda
