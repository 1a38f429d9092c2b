#pragma once
// Where the routed experts of an MoE layer are computed. The reference engine asks once per MoE
// layer for the whole batch of tokens, so a remote tier (the cpu-expert-worker) sees one request
// per layer and step.
#include <cstdint>
#include <vector>

#include "shared/exl3/operands.h"
#include "shared/ops/router.h"

namespace ft {

class ExpertBackend {
 public:
  virtual ~ExpertBackend() = default;
  // a: [n, D] MLP-site inputs; routes[t]: chosen experts (ascending) with weights.
  // out: [n, D] ← Σ_k w_k·Expert_k(a_t), summed in ascending expert order.
  // operands: F32 is the reference math; F16Rows asks an EXL3 tier to round each projection's
  // input as the GPU engine's kernels do (exl3/operands.h), so a layer whose experts are split
  // between the GPU and this tier sums alike on both sides. Tiers that cannot throw ft::Error.
  virtual void compute(int64_t layer, const float* a, int64_t n, const std::vector<Routing>& routes, float* out,
                       exl3::Operands operands) = 0;
  // Whether the tier answers now (a remote tier may try to reconnect); in-process tiers always do.
  virtual bool healthy() { return true; }
};

}  // namespace ft
