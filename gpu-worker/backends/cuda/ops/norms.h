#pragma once
// Row normalisations on the GPU — the twins of shared/ops/norms.h (spec §3.2), fp32 in and out.
//
// Numerics mirror the reference op for op: the sum of squares (rms) is exact to ~2^-46 (a
// float-float sum; the reference sums in double), r = 1/√(mean + eps) is formed in double and
// rounded once, then y = (x·r)·w in fp32 without contraction — so outputs equal the reference's
// except where the sum's last bits flip r's rounding. LayerNorm keeps mean and variance in
// double like the reference.
//
// Batch invariance: a row is reduced by a thread group whose size is a function of the width n
// only, over a fixed tree; the bits of a row never depend on the number of rows, their order, or
// on whether the rows are 16-byte aligned (float4 and scalar loads walk the same order).
#include <cuda_runtime.h>

#include <cstdint>

namespace ft::cuda {

// y[r] = x[r] / √(mean(x[r]²) + eps) ⊙ w for r < rows (w may be null: unweighted). Rows are n
// floats wide, ld_x / ld_y floats apart; y may alias x (in place).
void rms_norm_rows(const float* x, int64_t ld_x, int64_t rows, int64_t n, const float* w, float eps, float* y,
                   int64_t ld_y, cudaStream_t stream);

// y[r] = (x[r] − mean) / √(biased var + eps) ⊙ w + b (the indexer key norm, eps 1e-6 there).
// w and b are required. y may alias x.
void layer_norm_rows(const float* x, int64_t ld_x, int64_t rows, int64_t n, const float* w, const float* b, float eps,
                     float* y, int64_t ld_y, cudaStream_t stream);

}  // namespace ft::cuda
