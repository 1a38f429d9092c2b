#include "shared/ops/kda.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "shared/ops/activations.h"

namespace ft {

void short_conv_step(float* window, const float* z, const float* w, int64_t C, int64_t K, float* out) {
  for (int64_t c = 0; c < C; ++c) {
    float s = w[c * K + (K - 1)] * z[c];
    for (int64_t j = 0; j < K - 1; ++j) s += w[c * K + j] * window[j * C + c];
    out[c] = silu(s);
  }
  if (K > 1) {
    std::memmove(window, window + C, static_cast<size_t>((K - 2) * C) * sizeof(float));
    std::memcpy(window + (K - 2) * C, z, static_cast<size_t>(C) * sizeof(float));
  }
}

void kda_forget_gate(const float* r, const float* a_log, int64_t heads, int64_t head_dim,
                     std::optional<float> lower_bound, float* g) {
  for (int64_t h = 0; h < heads; ++h) {
    const float alpha = std::exp(a_log[h]);
    for (int64_t d = 0; d < head_dim; ++d) {
      const float x = r[h * head_dim + d];
      g[h * head_dim + d] = lower_bound ? *lower_bound * sigmoid(alpha * x) : -alpha * softplus(x);
    }
  }
}

void kda_step(float* S, const float* q, const float* k, const float* v, const float* g, float beta, int64_t dk,
              int64_t dv, float* o) {
  for (int64_t d = 0; d < dk; ++d) {
    const float decay = std::exp(g[d]);
    float* row = S + d * dv;
    for (int64_t j = 0; j < dv; ++j) row[j] *= decay;
  }
  std::vector<float> delta(static_cast<size_t>(dv), 0.0f);
  for (int64_t d = 0; d < dk; ++d) {
    const float* row = S + d * dv;
    for (int64_t j = 0; j < dv; ++j) delta[j] += row[j] * k[d];
  }
  for (int64_t j = 0; j < dv; ++j) delta[j] = beta * (v[j] - delta[j]);
  for (int64_t d = 0; d < dk; ++d) {
    float* row = S + d * dv;
    for (int64_t j = 0; j < dv; ++j) row[j] += k[d] * delta[j];
  }
  for (int64_t j = 0; j < dv; ++j) o[j] = 0.0f;
  for (int64_t d = 0; d < dk; ++d) {
    const float* row = S + d * dv;
    for (int64_t j = 0; j < dv; ++j) o[j] += row[j] * q[d];
  }
}

}  // namespace ft
