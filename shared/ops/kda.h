#pragma once
// Kimi Delta Attention building blocks (spec §4): the causal depthwise short convolution, the
// per-channel forget gate, and one step of the gated delta-rule recurrence. The recurrent form
// is the normative one; the chunked form transformers uses for prefill equals it up to rounding.
#include <cstdint>
#include <optional>

namespace ft {

// One convolution step for C channels with kernel width K. `window` holds the previous K−1 raw
// inputs, oldest first ([K−1, C]); taps w are [C, K] with tap K−1 on the current input.
// out[c] = silu(Σ_j w[c][j]·in_{t−K+1+j}[c]); then the window shifts in `z`.
void short_conv_step(float* window, const float* z, const float* w, int64_t channels, int64_t kernel, float* out);

// Forget gate in log space for Q = heads·head_dim channels from r = W_fb·W_fa·a + dt_bias:
// λ·σ(exp(A_log[h])·r) with a lower bound λ, else −exp(A_log[h])·softplus(r).
void kda_forget_gate(const float* r, const float* a_log, int64_t heads, int64_t head_dim,
                     std::optional<float> lower_bound, float* g);

// One recurrence step for one head (state S [dk, dv], rows = key channels), in place:
// decay rows by exp(g), delta-rule write with strength beta, then read with q.
void kda_step(float* S, const float* q, const float* k, const float* v, const float* g, float beta, int64_t dk,
              int64_t dv, float* o);

}  // namespace ft
