#include "gpu-worker/backends/cuda/sampling/constraint_mask.h"

#include <cmath>

#include "gpu-worker/backends/cuda/core/cuda_check.h"

namespace ft::cuda {

namespace {

// Bias before the mask, as on the host: a masked token stays −∞ whatever its bias.
__global__ void bias_kernel(float* logits, int64_t ld, int64_t V, const LogitBiasEntry* bias, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const LogitBiasEntry e = bias[i];
  if (e.token < 0 || e.token >= V) return;
  float& x = logits[int64_t(e.row) * ld + e.token];
  x = e.bias <= -100.0f ? -INFINITY : x + e.bias;
}

// One thread per 32 logits (one mask word).
__global__ void mask_kernel(float* logits, int64_t ld, int64_t V, const uint32_t* words, int64_t wpr,
                            const uint8_t* has_mask) {
  const int64_t row = blockIdx.y;
  if (!has_mask[row]) return;
  const int64_t w = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (w * 32 >= V) return;
  const uint32_t bits = w < wpr ? words[row * wpr + w] : 0u;
  if (bits == 0xFFFFFFFFu) return;
  float* x = logits + row * ld + w * 32;
  const int n = int(V - w * 32 < 32 ? V - w * 32 : 32);
  for (int j = 0; j < n; ++j)
    if (!((bits >> j) & 1u)) x[j] = -INFINITY;
}

}  // namespace

void apply_token_constraints(float* logits, int64_t ld, int64_t rows, int64_t V, const uint32_t* words,
                             int64_t words_per_row, const uint8_t* has_mask, const LogitBiasEntry* bias, int64_t n_bias,
                             cudaStream_t stream) {
  if (rows <= 0) return;
  if (n_bias > 0) {
    bias_kernel<<<unsigned((n_bias + 127) / 128), 128, 0, stream>>>(logits, ld, V, bias, n_bias);
    FT_CUDA_CHECK(cudaGetLastError());
  }
  const int64_t wcount = (V + 31) / 32;
  const dim3 grid(unsigned((wcount + 255) / 256), unsigned(rows));
  mask_kernel<<<grid, 256, 0, stream>>>(logits, ld, V, words, words_per_row, has_mask);
  FT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ft::cuda
