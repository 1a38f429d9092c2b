#pragma once
// Manifold-constrained hyper-connection sites on the GPU — the twin of shared/ops/mhc.h (spec
// §3.3), for N tokens at once, fp32 throughout.
//
// Streams X are [N, HC, D] (token-major, stream-major inside a token: X[t][i][d], contiguous).
// Per token the engine runs
//   m_raw = F·x̂                     ft::cuda::linear_f32 on the RAW flattened streams [N, HC·D];
//   mhc_site_in                      1/rms(x̂) (the unweighted norm, folded into m = m_raw·r),
//                                    pre/post/comb + Sinkhorn → mix; y = Σ_i pre_i·X_i;
//                                    a = RMSNorm(y)·w (the sublayer input);
//   (sublayer: a → o)
//   mhc_site_out                     X_j ← post_j·o + Σ_i M[i][j]·X_i (in place).
// The mix of a token is one row of NMIX = 2·HC + HC² floats laid out like m: [pre | post | comb],
// comb[i·HC + j] = M[i][j] (as MhcMix). Folding r after the projection differs from the
// reference (which projects the normalised values) by fp32 rounding only.
//
// Every token is one block with a fixed split and fixed reduction trees (width-dependent only):
// a token's bits do not depend on N, its position, or the other tokens. HC ≤ 4 and D ≤ 8192.
#include <cuda_runtime.h>

#include <cstdint>

namespace ft::cuda {

// NMIX: mixing logits per token, which is also the width of a mix row.
constexpr int64_t mhc_nmix(int64_t hc) { return (2 + hc) * hc; }

// One site's parameters (device pointers into weight memory) and the model's constants.
struct MhcSite {
  const float* base = nullptr;    // [NMIX]
  const float* scale = nullptr;   // [3]
  const float* norm_w = nullptr;  // [D]: the sublayer norm (input_layernorm / post_attention_layernorm)
  int64_t hc = 0, dim = 0;
  float rms_eps = 1e-5f;  // rms_norm_eps: the unweighted x̂ norm and the sublayer norm
  float hc_eps = 1e-6f;   // added to pre, to each softmax entry and to each Sinkhorn denominator
  int64_t sinkhorn_iters = 20;
};

// For t < n_tokens: from X[t] and m_raw[t] (NMIX floats, rows ld_m apart) writes mix[t] (NMIX
// floats, rows NMIX apart; none when mix is null), a[t] = RMSNorm(Σ_i pre_i·X[t][i])·norm_w (rows
// ld_a apart) and, when y is not null, the collapse itself y[t] (rows D apart).
void mhc_site_in(const MhcSite& p, const float* X, const float* m_raw, int64_t ld_m, int64_t n_tokens, float* mix,
                 float* a, int64_t ld_a, float* y, cudaStream_t stream);

// mix[t] alone, the bits mhc_site_in writes: the sublayer needs only a (its pre is computed by
// the workers themselves), and post/comb only at the site's output, so the engine runs this —
// whose Sinkhorn is a chain of ~40 dependent divisions — beside the sublayer.
void mhc_site_mix(const MhcSite& p, const float* X, const float* m_raw, int64_t ld_m, int64_t n_tokens, float* mix,
                  cudaStream_t stream);

// X[t][j] ← post_j·o[t] + Σ_i M[i][j]·X_old[t][i] for t < n_tokens, in place (the reference's
// mhc_expand: same products and order, so equal bits for the same mix). o rows ld_o apart.
//
// routed (optional): a MoE sublayer's routed sum folded in, so o is the sublayer's output only
// after it — per token and d, r = Σ_k weight[t·top_k+k]·Y[t·top_k+k][d] (k ascending, from 0) and
// o' = o + r (accumulate) or r: moe_combine's operations (ops/moe.h), so the bits of moe_combine
// into o followed by this call without it. Y rows are dim apart; o itself is not written.
struct RoutedSum {
  const float* Y = nullptr;
  const float* weight = nullptr;
  int top_k = 0;
  bool accumulate = false;
};
void mhc_site_out(const float* mix, const float* o, int64_t ld_o, int64_t n_tokens, int64_t hc, int64_t dim, float* X,
                  cudaStream_t stream, const RoutedSum* routed = nullptr);

}  // namespace ft::cuda
