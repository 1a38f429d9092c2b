#pragma once
// MoE router of glm5_next (spec §3.5): sigmoid scores, a correction bias used only to choose
// experts, optional group-limited selection, normalised and scaled weights.
#include <cstdint>
#include <vector>

namespace ft {

struct RouterParams {
  const float* weight;           // [E, D]
  const float* correction_bias;  // [E]
  int64_t n_experts, dim, top_k, n_group, topk_group;
  bool norm_topk_prob;
  float routed_scaling_factor;
};

struct Routing {
  std::vector<int32_t> experts;  // ascending expert id (the order experts are accumulated in)
  std::vector<float> weights;    // aligned with experts
  // Biased score of the last chosen expert minus that of the best rejected one: how close the
  // choice was to flipping (diagnostics; +inf when every expert was chosen).
  float margin = 0.0f;
};

Routing route(const RouterParams& p, const float* a);

// The selection step alone, from sigmoid scores s [E]: biased choice with group limit.
// `margin` (optional) receives the choice's margin as in Routing::margin.
std::vector<int32_t> select_experts(const float* s, const float* correction_bias, int64_t n_experts, int64_t top_k,
                                    int64_t n_group, int64_t topk_group, float* margin = nullptr);

}  // namespace ft
