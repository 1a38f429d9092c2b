#include "gpu-worker/backends/cuda/ops/norms.h"

#include <string>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/programmatic.cuh"
#include "gpu-worker/backends/cuda/ops/misc_device.cuh"
#include "shared/core/error.h"

namespace ft::cuda {
namespace {

using misc::for_each_chunk;
using misc::group_sum;
using misc::store_chunk;

constexpr int kBlock = 256;
// Rows up to this width are reduced by one warp (≤ 32 values per lane, no block barrier); wider
// rows by the whole block. A function of the width only, so a row's tree never changes.
constexpr int64_t kWarpRowMax = 1024;

template <int TPR, bool VEC>
__global__ void __launch_bounds__(kBlock) rms_norm_rows_kernel(const float* x, int64_t ld_x, int64_t rows, int64_t n,
                                                               const float* w, float eps, float* y, int64_t ld_y) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  constexpr int ROWS = kBlock / TPR, WARPS = TPR / 32;
  __shared__ double partial[ROWS][WARPS];
  const int g = threadIdx.x / TPR, tid = threadIdx.x % TPR;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * ROWS + g;
  if (row >= rows) return;  // whole groups only: a group never waits on a missing member
  const float* xr = x + row * ld_x;
  float* yr = y + row * ld_y;

  misc::SumSq acc;
  const float* const in[2] = {xr, w ? w : xr};
  for_each_chunk<4, VEC, 1>(in, n, tid, TPR, [&](int64_t, const auto& v, int cnt) {
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (k < cnt) acc.add(v[0][k]);
  });
  const double ss = group_sum<WARPS>(acc.value(), partial[g], [] { __syncthreads(); });
  const float r = misc::inv_rms(ss, n, eps);

  for_each_chunk<4, VEC, 2>(in, n, tid, TPR, [&](int64_t c, const auto& v, int) {
    float o[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) o[k] = __fmul_rn(__fmul_rn(v[0][k], r), w ? v[1][k] : 1.0f);
    store_chunk<VEC>(yr, n, c, o);
  });
}

template <int TPR, bool VEC>
__global__ void __launch_bounds__(kBlock)
    layer_norm_rows_kernel(const float* x, int64_t ld_x, int64_t rows, int64_t n, const float* w, const float* b,
                           float eps, float* y, int64_t ld_y) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  constexpr int ROWS = kBlock / TPR, WARPS = TPR / 32;
  __shared__ double partial_mean[ROWS][WARPS], partial_var[ROWS][WARPS];
  const int g = threadIdx.x / TPR, tid = threadIdx.x % TPR;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * ROWS + g;
  if (row >= rows) return;
  const float* xr = x + row * ld_x;
  float* yr = y + row * ld_y;
  auto sync = [] { __syncthreads(); };
  const float* const in[3] = {xr, w, b};

  double sx = 0.0;
  for_each_chunk<4, VEC, 1>(in, n, tid, TPR, [&](int64_t, const auto& v, int cnt) {
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (k < cnt) sx = __dadd_rn(sx, static_cast<double>(v[0][k]));
  });
  const double mean = group_sum<WARPS>(sx, partial_mean[g], sync) / static_cast<double>(n);

  double sv = 0.0;
  for_each_chunk<4, VEC, 1>(in, n, tid, TPR, [&](int64_t, const auto& v, int cnt) {
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (k < cnt) {
        const double d = __dsub_rn(static_cast<double>(v[0][k]), mean);
        sv = __dadd_rn(sv, __dmul_rn(d, d));
      }
  });
  const double var = group_sum<WARPS>(sv, partial_var[g], sync) / static_cast<double>(n);
  const double r = 1.0 / sqrt(var + static_cast<double>(eps));

  for_each_chunk<4, VEC, 3>(in, n, tid, TPR, [&](int64_t c, const auto& v, int) {
    float o[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float t = static_cast<float>(__dmul_rn(__dsub_rn(static_cast<double>(v[0][k]), mean), r));
      o[k] = __fadd_rn(__fmul_rn(t, v[1][k]), v[2][k]);
    }
    store_chunk<VEC>(yr, n, c, o);
  });
}

void check_rows(const char* what, int64_t n, int64_t ld_x, int64_t ld_y) {
  if (n <= 0 || ld_x < n || ld_y < n)
    throw Error(std::string(what) + ": bad shape (n " + std::to_string(n) + ", ld_x " + std::to_string(ld_x) +
                ", ld_y " + std::to_string(ld_y) + ")");
}

template <int TPR, bool VEC, class... A>
void launch_rms(int64_t rows, cudaStream_t stream, A... a) {
  constexpr int ROWS = kBlock / TPR;
  const auto blocks = static_cast<unsigned>((rows + ROWS - 1) / ROWS);
  launch_chained(rms_norm_rows_kernel<TPR, VEC>, blocks, kBlock, 0, stream, a...);
  FT_CUDA_CHECK_LAUNCH();
}

template <int TPR, bool VEC, class... A>
void launch_layer(int64_t rows, cudaStream_t stream, A... a) {
  constexpr int ROWS = kBlock / TPR;
  const auto blocks = static_cast<unsigned>((rows + ROWS - 1) / ROWS);
  launch_chained(layer_norm_rows_kernel<TPR, VEC>, blocks, kBlock, 0, stream, a...);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rms_norm_rows(const float* x, int64_t ld_x, int64_t rows, int64_t n, const float* w, float eps, float* y,
                   int64_t ld_y, cudaStream_t stream) {
  check_rows("rms_norm_rows", n, ld_x, ld_y);
  if (rows <= 0) return;
  const bool vec = n % 4 == 0 && ld_x % 4 == 0 && ld_y % 4 == 0 && misc::aligned16(x) && misc::aligned16(y) &&
                   (!w || misc::aligned16(w));
  const bool warp = n <= kWarpRowMax;
  if (warp && vec) launch_rms<32, true>(rows, stream, x, ld_x, rows, n, w, eps, y, ld_y);
  else if (warp) launch_rms<32, false>(rows, stream, x, ld_x, rows, n, w, eps, y, ld_y);
  else if (vec) launch_rms<kBlock, true>(rows, stream, x, ld_x, rows, n, w, eps, y, ld_y);
  else launch_rms<kBlock, false>(rows, stream, x, ld_x, rows, n, w, eps, y, ld_y);
}

void layer_norm_rows(const float* x, int64_t ld_x, int64_t rows, int64_t n, const float* w, const float* b, float eps,
                     float* y, int64_t ld_y, cudaStream_t stream) {
  check_rows("layer_norm_rows", n, ld_x, ld_y);
  if (!w || !b) throw Error("layer_norm_rows: weight and bias are required");
  if (rows <= 0) return;
  const bool vec = n % 4 == 0 && ld_x % 4 == 0 && ld_y % 4 == 0 && misc::aligned16(x) && misc::aligned16(y) &&
                   misc::aligned16(w) && misc::aligned16(b);
  const bool warp = n <= kWarpRowMax;
  if (warp && vec) launch_layer<32, true>(rows, stream, x, ld_x, rows, n, w, b, eps, y, ld_y);
  else if (warp) launch_layer<32, false>(rows, stream, x, ld_x, rows, n, w, b, eps, y, ld_y);
  else if (vec) launch_layer<kBlock, true>(rows, stream, x, ld_x, rows, n, w, b, eps, y, ld_y);
  else launch_layer<kBlock, false>(rows, stream, x, ld_x, rows, n, w, b, eps, y, ld_y);
}

}  // namespace ft::cuda
