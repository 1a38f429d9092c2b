#include "shared/ops/mhc.h"

#include <cmath>

#include "shared/ops/activations.h"
#include "shared/ops/linear.h"
#include "shared/ops/norms.h"

namespace ft {

void sinkhorn(float* Z, int64_t hc, float eps, int64_t iters) {
  for (int64_t i = 0; i < hc; ++i) {
    float* row = Z + i * hc;
    float mx = row[0];
    for (int64_t j = 1; j < hc; ++j) mx = std::max(mx, row[j]);
    float s = 0.0f;
    for (int64_t j = 0; j < hc; ++j) s += (row[j] = std::exp(row[j] - mx));
    for (int64_t j = 0; j < hc; ++j) row[j] = row[j] / s + eps;
  }
  auto col_step = [&] {
    for (int64_t j = 0; j < hc; ++j) {
      float s = 0.0f;
      for (int64_t i = 0; i < hc; ++i) s += Z[i * hc + j];
      for (int64_t i = 0; i < hc; ++i) Z[i * hc + j] /= (s + eps);
    }
  };
  auto row_step = [&] {
    for (int64_t i = 0; i < hc; ++i) {
      float s = 0.0f;
      for (int64_t j = 0; j < hc; ++j) s += Z[i * hc + j];
      for (int64_t j = 0; j < hc; ++j) Z[i * hc + j] /= (s + eps);
    }
  };
  col_step();
  for (int64_t it = 1; it < iters; ++it) {
    row_step();
    col_step();
  }
}

MhcMix mhc_mix(const MhcParams& p, const float* X) {
  const int64_t hc = p.hc, n = p.hc * p.dim, nmix = (2 + hc) * hc;
  std::vector<float> xn(static_cast<size_t>(n));
  rms_norm(X, nullptr, n, p.rms_eps, xn.data());
  std::vector<float> m(static_cast<size_t>(nmix));
  matvec(p.fn, nullptr, nmix, n, xn.data(), m.data());
  MhcMix r;
  r.pre.resize(hc);
  r.post.resize(hc);
  r.comb.resize(hc * hc);
  for (int64_t i = 0; i < hc; ++i) r.pre[i] = sigmoid(p.scale[0] * m[i] + p.base[i]) + p.hc_eps;
  for (int64_t j = 0; j < hc; ++j) r.post[j] = 2.0f * sigmoid(p.scale[1] * m[hc + j] + p.base[hc + j]);
  for (int64_t k = 0; k < hc * hc; ++k) r.comb[k] = p.scale[2] * m[2 * hc + k] + p.base[2 * hc + k];
  sinkhorn(r.comb.data(), hc, p.hc_eps, p.sinkhorn_iters);
  return r;
}

void mhc_collapse(const MhcMix& m, const float* X, int64_t hc, int64_t dim, float* y) {
  for (int64_t d = 0; d < dim; ++d) {
    float s = 0.0f;
    for (int64_t i = 0; i < hc; ++i) s += m.pre[i] * X[i * dim + d];
    y[d] = s;
  }
}

void mhc_expand(const MhcMix& m, const float* o, int64_t hc, int64_t dim, float* X) {
  std::vector<float> old(X, X + hc * dim);
  for (int64_t j = 0; j < hc; ++j) {
    for (int64_t d = 0; d < dim; ++d) {
      float s = m.post[j] * o[d];
      for (int64_t i = 0; i < hc; ++i) s += m.comb[i * hc + j] * old[i * dim + d];
      X[j * dim + d] = s;
    }
  }
}

}  // namespace ft
