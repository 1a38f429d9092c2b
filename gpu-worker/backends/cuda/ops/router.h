#pragma once
// MoE routing on the GPU — the twin of shared/ops/router.h (spec §3.5) after the router linear:
// the engine computes logits = W_router·a with ft::cuda::linear_f32 (ops/linear.h); this turns
// them into each token's experts and weights, fp32 throughout:
//   s = σ(logit); c = s + correction_bias (choice only); group limit (groups of E/n_group
//   consecutive experts scored by the sum of their two largest c, the topk_group best kept, the
//   others' c = −∞); the top_k largest c, ties to the LOWER expert id (spec §7.2, shared/ops/topk);
//   w = s of the chosen, ÷ (Σ w + 1e-20) if norm_topk_prob, × routed_scaling_factor.
// Experts come out in ascending id order with their weights aligned (MoeRoutes in ops/moe.h), the
// weight sum taken in that order, as route() does. One warp per token: no cross-token state.
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu-worker/backends/cuda/ops/moe.h"

namespace ft::cuda {

struct RouterConfig {
  int64_t n_experts = 0;   // E ≤ 1024
  int64_t top_k = 0;       // 1 … min(32, E)
  int64_t n_group = 1;     // divides E, ≤ 32; E/n_group ≥ 2 when n_group > 1
  int64_t topk_group = 1;  // 1 … n_group
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
};

// For t < n_tokens, from logits[t] (E floats, rows ld_logits apart): experts[t·top_k + k] and
// weights[t·top_k + k] for k < top_k, and when margin is not null margin[t] = c of the last
// chosen − c of the best rejected (+inf when every expert is chosen; Routing::margin).
// A NaN logit counts as −∞ for the choice (the reference leaves NaN ordering undefined).
void route_tokens(const float* logits, int64_t ld_logits, int64_t n_tokens, const float* correction_bias,
                  const RouterConfig& cfg, int32_t* experts, float* weights, float* margin, cudaStream_t stream);

// route_tokens, and — where one warp can sort the step's picks (n_tokens ≤ 4, n_tokens·top_k ≤ 32)
// and FLASHTIER_ROUTE_DISPATCH=on (set_route_dispatch: 0 off, 1 auto = off until measured, 2 on)
// — moe_dispatch's arrays for n_experts = cfg.n_experts in the same launch (ops/moe.h; sized for
// at least n_tokens). Returns whether it filled them; if not, the caller runs moe_dispatch.
bool route_and_dispatch(const float* logits, int64_t ld_logits, int64_t n_tokens, const float* correction_bias,
                        const RouterConfig& cfg, int32_t* experts, float* weights, const MoeDispatch& dispatch,
                        cudaStream_t stream);
void set_route_dispatch(int policy);

}  // namespace ft::cuda
