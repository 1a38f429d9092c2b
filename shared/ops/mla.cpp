#include "shared/ops/mla.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "shared/ops/linear.h"

namespace ft {

void mla_absorb_query(const float* kv_b, const float* q, const MlaDims& d, float* q_abs) {
  const int64_t rows = d.nope + d.v_dim;
  for (int64_t h = 0; h < d.heads; ++h)
    matvec_transposed(kv_b + h * rows * d.latent, d.nope, d.latent, q + h * d.nope, q_abs + h * d.latent);
}

void mla_attend(const float* q_abs, const float* latent, const int32_t* sel, int64_t n_sel, const MlaDims& d,
                float scale, float* ctx) {
  std::vector<float> p(static_cast<size_t>(n_sel));
  for (int64_t h = 0; h < d.heads; ++h) {
    const float* qh = q_abs + h * d.latent;
    float* ch = ctx + h * d.latent;
    std::fill(ch, ch + d.latent, 0.0f);
    if (n_sel == 0) continue;
    float mx = -INFINITY;
    for (int64_t i = 0; i < n_sel; ++i) mx = std::max(mx, p[i] = dot(qh, latent + sel[i] * d.latent, d.latent) * scale);
    float den = 0.0f;
    for (int64_t i = 0; i < n_sel; ++i) den += (p[i] = std::exp(p[i] - mx));
    for (int64_t i = 0; i < n_sel; ++i) p[i] /= den;
    for (int64_t i = 0; i < n_sel; ++i) {
      const float* c = latent + sel[i] * d.latent;
      for (int64_t r = 0; r < d.latent; ++r) ch[r] += p[i] * c[r];
    }
  }
}

void mla_expand_values(const float* kv_b, const float* ctx, const MlaDims& d, float* out) {
  const int64_t rows = d.nope + d.v_dim;
  for (int64_t h = 0; h < d.heads; ++h)
    matvec(kv_b + (h * rows + d.nope) * d.latent, nullptr, d.v_dim, d.latent, ctx + h * d.latent, out + h * d.v_dim);
}

}  // namespace ft
