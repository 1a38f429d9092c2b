// linear_f16 / linear_f16_batched (ops/linear.h): the dense problem (rows of xh against one
// weight, optionally per batch group) on the skinny kernel for ≤ 32 rows and the tiled kernel
// above (its wgmma form on sm_90 where grids fill the GPU). Both kernels obey the reduction contract, so the choice (a function of the row count
// and the grid size) never changes a bit.
#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/env_policy.h"
#include "gpu-worker/backends/cuda/core/programmatic.cuh"
#include "gpu-worker/backends/cuda/ops/linear.h"
#include "gpu-worker/backends/cuda/ops/linear_f16_dense.cuh"
#include "gpu-worker/backends/cuda/ops/linear_f16_kernels.cuh"
#include "gpu-worker/backends/cuda/ops/linear_f16_wgmma.h"
#include "gpu-worker/backends/cuda/ops/linear_launch.cuh"
#include "shared/core/error.h"

namespace ft::cuda {
namespace {

// Rounds of resident blocks a skinny launch of this configuration takes.
template <class Cfg>
int64_t skinny_rounds(const DenseProblem& pr, int64_t batch, int wk) {
  const int wn = lin::kSkinnyWarps / wk;
  const int block_n = lin::skinny_block_n<Cfg, false>(wn);
  const int64_t items = (pr.out + block_n - 1) / block_n * batch;
  auto kernel = lin::linear_skinny_kernel<Cfg, DenseProblem>;
  const int per_sm = lin::prepare_kernel(reinterpret_cast<const void*>(kernel), lin::kSkinnyThreads,
                                         lin::skinny_smem_bytes<Cfg>(pr.k.chunks, wn));
  const int64_t resident = static_cast<int64_t>(per_sm) * lin::current_device_limits().sm_count;
  return (items + resident - 1) / resident;
}

template <class Cfg>
void launch_skinny(DenseProblem pr, int64_t batch, int wk, cudaStream_t stream) {
  const int wn = lin::kSkinnyWarps / wk;
  pr.rows_per_item = Cfg::kRows;
  pr.block_n = lin::skinny_block_n<Cfg, false>(wn);
  pr.n_blocks = (pr.out + pr.block_n - 1) / pr.block_n;
  pr.m_tiles = 1;
  pr.items = pr.n_blocks * batch;
  const size_t smem = lin::skinny_smem_bytes<Cfg>(pr.k.chunks, wn);
  auto kernel = lin::linear_skinny_kernel<Cfg, DenseProblem>;
  lin::prepare_kernel(reinterpret_cast<const void*>(kernel), lin::kSkinnyThreads, smem);
  pr.programmatic = lin::linear_programmatic(pr.rows);
  pr.trigger = lin::linear_trigger();
  launch_maybe_early(pr.programmatic, kernel, static_cast<unsigned>(pr.items), lin::kSkinnyThreads, smem, stream, pr,
                     wk);
}

template <class Cfg>
void launch_tiled(DenseProblem pr, int64_t batch, cudaStream_t stream) {
  pr.set_tiles(Cfg::BM, lin::tiled_block_n<Cfg, false>(), batch);
  if (pr.items > 0x7fffffff) throw Error("linear_f16: too many tiles (" + std::to_string(pr.items) + ")");
  lin::launch_items(lin::linear_tiled_kernel<Cfg, DenseProblem>, Cfg::kThreads, Cfg::kSmemBytes, pr.items, false,
                    stream, pr);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

void run_dense(const LinearF16& L, int64_t batch, int64_t w_stride, const __half* xh, int64_t ld_xh, int64_t x_stride,
               const float* row_scale, int64_t scale_stride, int64_t rows, float* y, int64_t ld_y, int64_t y_stride,
               cudaStream_t stream, bool accumulate, const char* what) {
  const auto shape = [&] {
    return std::string(what) + " (" + std::to_string(L.out) + "×" + std::to_string(L.in) + ", k_chunk " +
           std::to_string(L.k_chunk) + ", rows " + std::to_string(rows) + ", ld_xh " + std::to_string(ld_xh) + ")";
  };
  if (L.out <= 0 || L.in <= 0 || !L.w || rows < 0 || batch < 0) throw Error("bad linear " + shape());
  const int64_t in8 = (L.in + 7) / 8 * 8;
  if (L.k_chunk <= 0 || L.k_chunk % lin::kStageK != 0 || (L.in + L.k_chunk - 1) / L.k_chunk > lin::kMaxChunks)
    throw Error("k_chunk must be a multiple of 64 giving at most 16 chunks (use linear_k_chunk): " + shape());
  if (ld_xh < in8 || ld_xh % 8 != 0 || !aligned16(xh) || !aligned16(L.w) || w_stride % 8 != 0 || x_stride % 8 != 0)
    throw Error(
        "fp16 operands must be 16-byte aligned with rows a multiple of 8 halves apart, ld_xh ≥ in rounded "
        "up to 8: " +
        shape());
  if (rows > 1 && ld_y < L.out) throw Error("ld_y < out: " + shape());
  if (rows > 0x7fffffff) throw Error("too many rows: " + shape());
  if (rows == 0 || batch == 0) return;

  DenseProblem pr;
  pr.k = lin::make_kgeom(L.in, L.k_chunk);
  pr.out = L.out;
  pr.w = L.w;
  pr.w_stride = w_stride;
  pr.ws = L.w_scale;
  pr.bias = L.bias;
  pr.xh = xh;
  pr.ld_xh = ld_xh;
  pr.x_stride = x_stride;
  pr.rs = row_scale;
  pr.rs_stride = scale_stride;
  pr.y = y;
  pr.ld_y = ld_y;
  pr.y_stride = y_stride;
  pr.accumulate = accumulate;
  pr.rows = rows;

  if (rows <= lin::kSkinnyMaxRows) {
    const int wk = lin::skinny_warps_along_k(pr.k.chunks);
    static const bool pairs = !env_off("FLASHTIER_LINEAR_PAIRS");
    if (rows <= 8 && pairs && skinny_rounds<lin::SkinnyRows8>(pr, batch, wk) == 2 &&
        skinny_rounds<lin::SkinnyRows8Pair>(pr, batch, wk) == 1)
      launch_skinny<lin::SkinnyRows8Pair>(pr, batch, wk, stream);
    else if (rows <= 8) launch_skinny<lin::SkinnyRows8>(pr, batch, wk, stream);
    else if (rows <= 16) launch_skinny<lin::SkinnyRows16>(pr, batch, wk, stream);
    else launch_skinny<lin::SkinnyRows32>(pr, batch, wk, stream);
    return;
  }
  const lin::DeviceLimits& dev = lin::current_device_limits();
  const int64_t large_tiles = (rows + 127) / 128 * ((L.out + 127) / 128) * batch;
  if (large_tiles < dev.sm_count) launch_tiled<lin::TiledMedium>(pr, batch, stream);
  else if (lin::linear_wgmma()) launch_dense_wgmma(pr, batch, stream);
  else if (dev.smem_optin >= lin::TiledLarge4::kSmemBytes) launch_tiled<lin::TiledLarge4>(pr, batch, stream);
  else launch_tiled<lin::TiledLarge3>(pr, batch, stream);
}

}  // namespace

void linear_f16(const LinearF16& L, const __half* xh, int64_t ld_xh, const float* row_scale, int64_t rows, float* y,
                int64_t ld_y, cudaStream_t stream, LinearStore store) {
  run_dense(L, 1, 0, xh, ld_xh, 0, row_scale, 0, rows, y, ld_y, 0, stream, store == LinearStore::Accumulate,
            "linear_f16");
}

void linear_f16_batched(const LinearF16& L, int64_t batch, int64_t w_stride, const __half* xh, int64_t ld_xh,
                        int64_t x_stride, const float* row_scale, int64_t scale_stride, int64_t rows, float* y,
                        int64_t ld_y, int64_t y_stride, cudaStream_t stream) {
  if (L.bias) throw Error("linear_f16_batched: bias must be null");
  run_dense(L, batch, w_stride, xh, ld_xh, x_stride, row_scale, scale_stride, rows, y, ld_y, y_stride, stream, false,
            "linear_f16_batched");
}

}  // namespace ft::cuda
