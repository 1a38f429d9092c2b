#include "shared/ops/router.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "shared/ops/activations.h"
#include "shared/ops/linear.h"
#include "shared/ops/topk.h"

namespace ft {

std::vector<int32_t> select_experts(const float* s, const float* bias, int64_t E, int64_t top_k, int64_t n_group,
                                    int64_t topk_group, float* margin) {
  std::vector<float> c(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) c[e] = s[e] + bias[e];
  if (n_group > 1) {
    const int64_t per = E / n_group;
    std::vector<float> gscore(static_cast<size_t>(n_group));
    for (int64_t g = 0; g < n_group; ++g) {
      auto two = topk_indices(c.data() + g * per, per, 2);
      gscore[g] = c[g * per + two[0]] + c[g * per + two[1]];
    }
    auto keep = topk_indices(gscore.data(), n_group, topk_group);
    std::vector<bool> kept(static_cast<size_t>(n_group), false);
    for (int32_t g : keep) kept[g] = true;
    for (int64_t e = 0; e < E; ++e)
      if (!kept[e / per]) c[e] = -std::numeric_limits<float>::infinity();
  }
  auto idx = topk_indices(c.data(), E, std::min(top_k + 1, E));
  if (margin) *margin = static_cast<int64_t>(idx.size()) > top_k ? c[idx[top_k - 1]] - c[idx[top_k]] : INFINITY;
  idx.resize(std::min<size_t>(idx.size(), static_cast<size_t>(top_k)));
  std::sort(idx.begin(), idx.end());
  return idx;
}

Routing route(const RouterParams& p, const float* a) {
  std::vector<float> s(static_cast<size_t>(p.n_experts));
  matvec(p.weight, nullptr, p.n_experts, p.dim, a, s.data());
  for (float& v : s) v = sigmoid(v);
  Routing r;
  r.experts = select_experts(s.data(), p.correction_bias, p.n_experts, p.top_k, p.n_group, p.topk_group, &r.margin);
  float sum = 0.0f;
  for (int32_t e : r.experts) {
    r.weights.push_back(s[e]);
    sum += s[e];
  }
  for (float& w : r.weights) {
    if (p.norm_topk_prob) w /= (sum + 1e-20f);
    w *= p.routed_scaling_factor;
  }
  return r;
}

}  // namespace ft
