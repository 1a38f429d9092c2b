#include "shared/exl3/operands.h"

#include <cmath>

#include "shared/core/half.h"

namespace ft::exl3 {

int f16_row_exponent(float m) {
  if (!(m > 0.0f) || !std::isfinite(m)) return 0;
  int E = 0;
  std::frexp(m, &E);
  const int e = 15 - E;
  return e < 126 ? e : 126;
}

float round_row_to_f16(float* row, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::fmax(m, std::fabs(row[i]));  // fmax drops NaN, as the GPU's fmaxf
  const int e = f16_row_exponent(m);
  const float up = std::ldexp(1.0f, e);  // e ∈ [−113, 126]: exact
  for (int64_t i = 0; i < n; ++i) row[i] = f16_to_f32(f32_to_f16(row[i] * up));
  return std::ldexp(1.0f, -e);
}

}  // namespace ft::exl3
