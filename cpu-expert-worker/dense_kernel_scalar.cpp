// Portable path: each weight row converted to fp32, then ft::dot — the reference engine's own
// dot product, so this path equals it bit for bit by construction.
#include <vector>

#include "cpu-expert-worker/dense_kernel.h"
#include "shared/core/half.h"
#include "shared/ops/linear.h"

namespace ft::cew::detail {

namespace {

template <DenseType T>
inline float load(const void* W, int64_t i) {
  if constexpr (T == DenseType::F32) return static_cast<const float*>(W)[i];
  else if constexpr (T == DenseType::BF16) return bf16_to_f32(static_cast<const uint16_t*>(W)[i]);
  else return f16_to_f32(static_cast<const uint16_t*>(W)[i]);
}

template <DenseType T>
void rows_t(const void* W, int64_t in, int64_t r0, int64_t rows, const float* x, int64_t xs, int n, float* y,
            int64_t ys) {
  std::vector<float> row(static_cast<size_t>(in));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = (r0 + r) * in;
    for (int64_t i = 0; i < in; ++i) row[i] = load<T>(W, base + i);
    for (int t = 0; t < n; ++t) y[t * ys + r] = dot(row.data(), x + t * xs, in);
  }
}

}  // namespace

void dense_rows_scalar(DenseType type, const void* W, int64_t in, int64_t r0, int64_t rows, const float* x, int64_t xs,
                       int n, float* y, int64_t ys) {
  switch (type) {
    case DenseType::F32: return rows_t<DenseType::F32>(W, in, r0, rows, x, xs, n, y, ys);
    case DenseType::BF16: return rows_t<DenseType::BF16>(W, in, r0, rows, x, xs, n, y, ys);
    case DenseType::F16: return rows_t<DenseType::F16>(W, in, r0, rows, x, xs, n, y, ys);
  }
}

}  // namespace ft::cew::detail
