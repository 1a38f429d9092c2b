#include "shared/sampling/logit_compare.h"

#include <algorithm>
#include <cmath>

namespace ft {

double top2_gap_over_rms(const float* row, int64_t n) {
  float a = -INFINITY, b = -INFINITY;
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) {
    ss += static_cast<double>(row[i]) * row[i];
    if (row[i] > a) {
      b = a;
      a = row[i];
    } else if (row[i] > b) {
      b = row[i];
    }
  }
  const double rms = std::sqrt(ss / static_cast<double>(std::max<int64_t>(n, 1)));
  return (static_cast<double>(a) - b) / std::max(rms, 1e-30);
}

LogitAgreement compare_logits(const float* a, const float* b, int64_t n) {
  LogitAgreement r;
  if (n <= 0) return r;
  const float* ia = std::max_element(a, a + n);
  const float* ib = std::max_element(b, b + n);
  const double ma = *ia, mb = *ib;
  double za = 0, zb = 0;
  for (int64_t i = 0; i < n; ++i) za += std::exp(a[i] - ma), zb += std::exp(b[i] - mb);
  const double lza = std::log(za), lzb = std::log(zb);
  for (int64_t i = 0; i < n; ++i) {
    const double la = a[i] - ma - lza, lb = b[i] - mb - lzb;
    r.kl += std::exp(la) * (la - lb);
  }
  r.same_top1 = (ia - a) == (ib - b);
  return r;
}

}  // namespace ft
