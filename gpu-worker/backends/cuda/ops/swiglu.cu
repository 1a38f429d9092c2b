#include "gpu-worker/backends/cuda/ops/swiglu.h"

#include <string>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/programmatic.cuh"
#include "gpu-worker/backends/cuda/ops/misc_device.cuh"
#include "shared/core/error.h"

namespace ft::cuda {
namespace {

using misc::load_chunk;
using misc::store_chunk;

constexpr int kThreads = 256;

// swiglu_clamped for one value: std::min / std::clamp spelled out (their NaN behaviour included).
__device__ __forceinline__ float swiglu_one(float g, float u, float limit) {
  g = limit < g ? limit : g;
  u = u < -limit ? -limit : (limit < u ? limit : u);
  return __fmul_rn(__fmul_rn(g, misc::sigmoid_ref(g)), u);
}

// Rows on grid.x (row counts reach n·top_k), 4 consecutive values per thread along grid.y.
template <bool VEC>
__global__ void __launch_bounds__(kThreads)
    swiglu_rows_kernel(const float* gu, int64_t ld_gu, int64_t inter, float limit, float* h, int64_t ld_h) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  const int64_t r = blockIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  if (4 * c >= inter) return;
  const float* gr = gu + r * ld_gu;
  float g[4], u[4];
  load_chunk<VEC>(gr, inter, c, g);
  load_chunk<VEC>(gr + inter, inter, c, u);
#pragma unroll
  for (int k = 0; k < 4; ++k) g[k] = swiglu_one(g[k], u[k], limit);
  store_chunk<VEC>(h + r * ld_h, inter, c, g);
}

}  // namespace

void swiglu_rows(const float* gu, int64_t ld_gu, int64_t rows, int64_t inter, float limit, float* h, int64_t ld_h,
                 cudaStream_t stream) {
  if (inter <= 0 || ld_gu < 2 * inter || ld_h < inter)
    throw Error("swiglu_rows: bad shape (inter " + std::to_string(inter) + ", ld_gu " + std::to_string(ld_gu) +
                ", ld_h " + std::to_string(ld_h) + ")");
  if (rows <= 0) return;
  const bool vec = inter % 4 == 0 && ld_gu % 4 == 0 && ld_h % 4 == 0 && misc::aligned16(gu) && misc::aligned16(h);
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((inter + 4 * kThreads - 1) / (4 * kThreads)));
  if (vec)
    launch_chained(swiglu_rows_kernel<true>, grid, kThreads, 0, stream, gu, ld_gu, inter, limit, h, ld_h);
  else
    launch_chained(swiglu_rows_kernel<false>, grid, kThreads, 0, stream, gu, ld_gu, inter, limit, h, ld_h);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
