#include "shared/engine/local_experts.h"

#include <vector>

#include "shared/core/error.h"
#include "shared/ops/swiglu.h"

namespace ft {

void LocalExperts::compute(int64_t layer, const float* a, int64_t n, const std::vector<Routing>& routes, float* out,
                           exl3::Operands operands) {
  if (operands != exl3::Operands::F32)
    throw Error("in-process reference experts compute fp32 operands only (layer " + std::to_string(layer) + ")");
  const ModelConfig& c = w_.cfg;
  const MoeWeights& moe = *w_.layers[layer].moe;
  if (moe.experts.empty()) throw Error("routed experts of layer " + std::to_string(layer) + " were not loaded");
  const int64_t D = c.hidden_size, Im = c.moe_intermediate_size;
  std::vector<float> scratch(static_cast<size_t>(2 * Im)), y(static_cast<size_t>(D));
  const float limit = static_cast<float>(c.swiglu_limit);
  for (int64_t t = 0; t < n; ++t) {
    float* o = out + t * D;
    for (int64_t d = 0; d < D; ++d) o[d] = 0.0f;
    const Routing& r = routes[t];
    for (size_t k = 0; k < r.experts.size(); ++k) {
      const MlpWeights& e = moe.experts[r.experts[k]];
      swiglu_mlp(e.gate.w.data(), e.up.w.data(), e.down.w.data(), D, Im, limit, a + t * D, y.data(), scratch.data());
      for (int64_t d = 0; d < D; ++d) o[d] += r.weights[k] * y[d];
    }
  }
}

}  // namespace ft
