#pragma once
// Dense fp32 projections, y = W·x (+ b) with W row-major [out, in] (nn.Linear layout).
#include <cstdint>

namespace ft {

// Dot product of two fp32 vectors; fixed summation order (8 interleaved partial sums, then a
// fixed tree) so every caller, batched or not, gets bit-identical results.
float dot(const float* a, const float* b, int64_t n);

// y[out] = W[out, in]·x[in] + bias (bias may be null).
void matvec(const float* W, const float* bias, int64_t out, int64_t in, const float* x, float* y);

// Y[n, out] = X[n, in]·Wᵀ + bias, row by row (each row exactly as matvec computes it).
void matmul(const float* W, const float* bias, int64_t out, int64_t in, const float* X, int64_t n, float* Y);

// y[in] = Wᵀ·x for W [out, in] (x has `out` entries). Used by absorbed attention.
void matvec_transposed(const float* W, int64_t out, int64_t in, const float* x, float* y);

}  // namespace ft
