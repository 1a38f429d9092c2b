// AVX2 + FMA + F16C path (compiled with those flags for this file only; picked at run time).
// Register block: NR weight rows × NT tokens of 8-lane accumulators. Rows are the outer loop so a
// block's weights stay in L1 while every token passes over them; a prefill batch therefore reads
// each weight from memory once.
#include <immintrin.h>

#include "cpu-expert-worker/dense_kernel.h"
#include "shared/core/half.h"

namespace ft::cew::detail {

namespace {

template <DenseType T>
inline __m256 load8(const void* W, int64_t i) {
  if constexpr (T == DenseType::F32) {
    return _mm256_loadu_ps(static_cast<const float*>(W) + i);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(W) + i));
    if constexpr (T == DenseType::BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    else return _mm256_cvtph_ps(h);
  }
}

template <DenseType T>
inline float load1(const void* W, int64_t i) {
  if constexpr (T == DenseType::F32) return static_cast<const float*>(W)[i];
  else if constexpr (T == DenseType::BF16) return bf16_to_f32(static_cast<const uint16_t*>(W)[i]);
  else return f16_to_f32(static_cast<const uint16_t*>(W)[i]);
}

template <DenseType T, int NR, int NT>
void block(const void* W, int64_t in, int64_t row, const float* x, int64_t xs, float* y, int64_t ys) {
  __m256 acc[NR][NT];
  for (int r = 0; r < NR; ++r)
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_setzero_ps();
  const int64_t in8 = in & ~int64_t{7};
  for (int64_t i = 0; i < in8; i += 8) {
    __m256 w[NR];
    for (int r = 0; r < NR; ++r) w[r] = load8<T>(W, (row + r) * in + i);
    for (int t = 0; t < NT; ++t) {
      const __m256 xv = _mm256_loadu_ps(x + t * xs + i);
      for (int r = 0; r < NR; ++r) acc[r][t] = _mm256_fmadd_ps(w[r], xv, acc[r][t]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int t = 0; t < NT; ++t) {
      alignas(32) float s[8];
      _mm256_store_ps(s, acc[r][t]);
      const float* xt = x + t * xs;
      for (int64_t i = in8, j = 0; i < in; ++i, ++j) s[j] += load1<T>(W, (row + r) * in + i) * xt[i];
      y[t * ys + r] = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    }
}

template <DenseType T, int NR>
void tokens(const void* W, int64_t in, int64_t row, const float* x, int64_t xs, int n, float* y, int64_t ys) {
  int t = 0;
  if constexpr (NR <= 2) {
    for (; t + 4 <= n; t += 4) block<T, NR, 4>(W, in, row, x + t * xs, xs, y + t * ys, ys);
    if (n - t == 3) return block<T, NR, 3>(W, in, row, x + t * xs, xs, y + t * ys, ys);
  }
  for (; t + 2 <= n; t += 2) block<T, NR, 2>(W, in, row, x + t * xs, xs, y + t * ys, ys);
  if (t < n) block<T, NR, 1>(W, in, row, x + t * xs, xs, y + t * ys, ys);
}

template <DenseType T>
void rows_t(const void* W, int64_t in, int64_t r0, int64_t rows, const float* x, int64_t xs, int n, float* y,
            int64_t ys) {
  // Few tokens: more rows per block so enough independent FMA chains stay in flight.
  int64_t r = 0;
  if (n <= 2) {
    for (; r + 4 <= rows; r += 4) tokens<T, 4>(W, in, r0 + r, x, xs, n, y + r, ys);
  } else {
    for (; r + 2 <= rows; r += 2) tokens<T, 2>(W, in, r0 + r, x, xs, n, y + r, ys);
  }
  for (; r < rows; ++r) tokens<T, 1>(W, in, r0 + r, x, xs, n, y + r, ys);
}

}  // namespace

void dense_rows_avx2(DenseType type, const void* W, int64_t in, int64_t r0, int64_t rows, const float* x, int64_t xs,
                     int n, float* y, int64_t ys) {
  switch (type) {
    case DenseType::F32: return rows_t<DenseType::F32>(W, in, r0, rows, x, xs, n, y, ys);
    case DenseType::BF16: return rows_t<DenseType::BF16>(W, in, r0, rows, x, xs, n, y, ys);
    case DenseType::F16: return rows_t<DenseType::F16>(W, in, r0, rows, x, xs, n, y, ys);
  }
}

}  // namespace ft::cew::detail
