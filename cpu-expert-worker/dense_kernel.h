#pragma once
// Dense expert projections from weights stored as on disk (F32, BF16, F16), computed in fp32.
//
// y[t·ys + r] = Σ_i W[r0 + r][i] · x[t·xs + i]   for r < rows, t < n
//
// Every output is summed in the order of ft::dot (shared/ops/linear.h): lane j of 8 takes the
// inputs i ≡ j (mod 8), the remainder goes to lanes 0, 1, … and the lanes meet in a fixed tree. So
// a token's result never depends on n or on the other tokens (batch invariance), and the scalar
// path equals ft::dot on the fp32 weights bit for bit; the AVX2 path differs from it only by FMA's
// single rounding.
#include <cstdint>

namespace ft::cew {

enum class DenseType : uint8_t { F32, BF16, F16 };
enum class DenseSimd : uint8_t { Scalar, Avx2 };

const char* dense_simd_name(DenseSimd s);
bool dense_simd_supported(DenseSimd s);
// AVX2+FMA+F16C when the CPU has them, unless FLASHTIER_SIMD=scalar.
DenseSimd best_dense_simd();

void dense_rows(DenseSimd simd, DenseType type, const void* W, int64_t in, int64_t r0, int64_t rows, const float* x,
                int64_t xs, int n, float* y, int64_t ys);

namespace detail {
void dense_rows_scalar(DenseType type, const void* W, int64_t in, int64_t r0, int64_t rows, const float* x, int64_t xs,
                       int n, float* y, int64_t ys);
void dense_rows_avx2(DenseType type, const void* W, int64_t in, int64_t r0, int64_t rows, const float* x, int64_t xs,
                     int n, float* y, int64_t ys);
}  // namespace detail

}  // namespace ft::cew
