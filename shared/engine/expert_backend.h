#pragma once
// Where the routed experts of an MoE layer are computed. The reference engine asks once per MoE
// layer for the whole batch of tokens, so a remote tier (the cpu-expert-worker) sees one request
// per layer and step.
#include <cstdint>
#include <vector>

#include "shared/ops/router.h"

namespace ft {

class ExpertBackend {
 public:
  virtual ~ExpertBackend() = default;
  // a: [n, D] MLP-site inputs; routes[t]: chosen experts (ascending) with weights.
  // out: [n, D] ← Σ_k w_k·Expert_k(a_t), summed in ascending expert order.
  virtual void compute(int64_t layer, const float* a, int64_t n, const std::vector<Routing>& routes, float* out) = 0;
  // Whether the tier answers now (a remote tier may try to reconnect); in-process tiers always do.
  virtual bool healthy() { return true; }
};

}  // namespace ft
