#include "shared/ops/norms.h"

#include <cmath>

namespace ft {

void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y) {
  double ss = 0.0;  // the sum of squares in double costs nothing and removes a rounding source
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * r) * (w ? w[i] : 1.0f);
}

void layer_norm(const float* x, const float* w, const float* b, int64_t n, float eps, float* y) {
  double mean = 0.0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= static_cast<double>(n);
  double var = 0.0;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= static_cast<double>(n);
  const double r = 1.0 / std::sqrt(var + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>((x[i] - mean) * r) * w[i] + b[i];
}

void l2_normalize(float* x, int64_t n, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float r = static_cast<float>(1.0 / std::sqrt(ss + eps));
  for (int64_t i = 0; i < n; ++i) x[i] *= r;
}

}  // namespace ft
