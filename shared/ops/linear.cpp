#include "shared/ops/linear.h"

namespace ft {

float dot(const float* a, const float* b, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += a[i + j] * b[i + j];
  for (int j = 0; i < n; ++i, ++j) s[j] += a[i] * b[i];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

void matvec(const float* W, const float* bias, int64_t out, int64_t in, const float* x, float* y) {
  for (int64_t o = 0; o < out; ++o) y[o] = dot(W + o * in, x, in) + (bias ? bias[o] : 0.0f);
}

void matmul(const float* W, const float* bias, int64_t out, int64_t in, const float* X, int64_t n, float* Y) {
  for (int64_t t = 0; t < n; ++t) matvec(W, bias, out, in, X + t * in, Y + t * out);
}

void matvec_transposed(const float* W, int64_t out, int64_t in, const float* x, float* y) {
  for (int64_t i = 0; i < in; ++i) y[i] = 0.0f;
  for (int64_t o = 0; o < out; ++o) {
    const float xo = x[o];
    const float* row = W + o * in;
    for (int64_t i = 0; i < in; ++i) y[i] += row[i] * xo;
  }
}

}  // namespace ft
