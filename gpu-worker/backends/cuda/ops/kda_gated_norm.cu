// The gated output norm of a KDA layer (spec §4.8): per row and head, the weighted RMSNorm of
// shared/ops/norms.cpp times σ(gate), as ReferenceEngine::kda_layer applies it.
#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/programmatic.cuh"
#include "gpu-worker/backends/cuda/ops/kda.h"
#include "gpu-worker/backends/cuda/ops/kda_common.cuh"

namespace ft::cuda {

using namespace kda_detail;

namespace {

constexpr int kNormWarps = 8;

// One warp per (row, head); the sum of squares reduces over the lanes in a fixed butterfly.
template <int DL>
__global__ __launch_bounds__(kNormWarps * 32) void gated_norm_kernel(const float* o, int64_t ld_o,
                                                                     const float* __restrict__ gate, int64_t ld_gate,
                                                                     const float* __restrict__ norm_w, int64_t rows,
                                                                     int64_t H, float eps, float* y, int64_t ld_y) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  constexpr int PER = (DL + 31) / 32;
  const int lane = threadIdx.x & 31;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kNormWarps + (threadIdx.x >> 5);
  if (item >= rows * H) return;
  const int64_t row = item / H, h = item % H;
  const float* x = o + row * ld_o + h * DL;
  float xv[PER];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int d = lane + 32 * i;
    xv[i] = d < DL ? x[d] : 0.0f;
    ss += xv[i] * xv[i];
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(DL) + eps);
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int d = lane + 32 * i;
    if (d < DL) y[row * ld_y + h * DL + d] = ((xv[i] * inv) * norm_w[d]) * sigmoid(gate[row * ld_gate + h * DL + d]);
  }
}

}  // namespace

void kda_gated_norm(const float* o, int64_t ld_o, const float* gate, int64_t ld_gate, const float* norm_w, int64_t rows,
                    const KdaShape& shape, float eps, float* y, int64_t ld_y, cudaStream_t stream) {
  check_shape(shape, "kda_gated_norm", true);
  const int64_t Q = shape.width();
  require(rows >= 0 && ld_o >= Q && ld_gate >= Q && ld_y >= Q, "kda_gated_norm", "bad rows or row strides");
  if (rows == 0) return;
  const int64_t blocks = (rows * shape.heads + kNormWarps - 1) / kNormWarps;
  require(blocks < (int64_t{1} << 31), "kda_gated_norm", "too many rows");
  dispatch_token_head_dim(shape.head_dim, [&](auto dl) {
    launch_chained(gated_norm_kernel<decltype(dl)::value>, static_cast<unsigned>(blocks), kNormWarps * 32, 0, stream, o,
                   ld_o, gate, ld_gate, norm_w, rows, shape.heads, eps, y, ld_y);
  });
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
