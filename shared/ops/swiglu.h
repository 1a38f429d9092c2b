#pragma once
// Clamped SwiGLU combine of glm5_next MLPs (spec §3.4): the gate is clamped from above only,
// the up projection on both sides — asymmetric on purpose (spec §10 item 7).
#include <cstdint>

namespace ft {

// h[i] = silu(min(gate[i], limit)) · clamp(up[i], −limit, limit)
void swiglu_clamped(const float* gate, const float* up, int64_t n, float limit, float* h);

// Full dense MLP: o = W_down·swiglu(W_gate·a, W_up·a). Scratch must hold 2·inter floats.
void swiglu_mlp(const float* w_gate, const float* w_up, const float* w_down, int64_t dim, int64_t inter,
                float limit, const float* a, float* o, float* scratch);

}  // namespace ft
