#pragma once
// Routed experts computed in-process from the fp32 weights (the reference tier).
#include "shared/engine/expert_backend.h"
#include "shared/engine/weights.h"

namespace ft {

class LocalExperts : public ExpertBackend {
 public:
  explicit LocalExperts(const ModelWeights& w) : w_(w) {}
  // Dense fp32 weights: F32 operands only.
  void compute(int64_t layer, const float* a, int64_t n, const std::vector<Routing>& routes, float* out,
               exl3::Operands operands) override;

 private:
  const ModelWeights& w_;
};

}  // namespace ft
