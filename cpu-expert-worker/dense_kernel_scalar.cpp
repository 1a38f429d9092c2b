// Portable path: ft::dot's loop with the weight converted on the fly.
#include "cpu-expert-worker/dense_kernel.h"
#include "shared/core/half.h"

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
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = (r0 + r) * in;
    for (int t = 0; t < n; ++t) {
      const float* xt = x + t * xs;
      float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t i = 0;
      for (; i + 8 <= in; i += 8)
        for (int j = 0; j < 8; ++j) s[j] += load<T>(W, base + i + j) * xt[i + j];
      for (int j = 0; i < in; ++i, ++j) s[j] += load<T>(W, base + i) * xt[i];
      y[t * ys + r] = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    }
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
