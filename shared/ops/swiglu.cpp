#include "shared/ops/swiglu.h"

#include <algorithm>

#include "shared/ops/activations.h"
#include "shared/ops/linear.h"

namespace ft {

void swiglu_clamped(const float* gate, const float* up, int64_t n, float limit, float* h) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    h[i] = silu(g) * u;
  }
}

void swiglu_mlp(const float* w_gate, const float* w_up, const float* w_down, int64_t dim, int64_t inter,
                float limit, const float* a, float* o, float* scratch) {
  float* g = scratch;
  float* u = scratch + inter;
  matvec(w_gate, nullptr, inter, dim, a, g);
  matvec(w_up, nullptr, inter, dim, a, u);
  swiglu_clamped(g, u, inter, limit, g);
  matvec(w_down, nullptr, dim, inter, g, o);
}

}  // namespace ft
