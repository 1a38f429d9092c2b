#pragma once
// Manifold-constrained hyper-connection site (spec §3.3): HC residual streams per token are mixed
// into one sublayer input (pre), and the sublayer output is written back (post) on top of a
// doubly-stochastic recombination M of the old streams (Sinkhorn).
#include <cstdint>
#include <vector>

namespace ft {

struct MhcParams {
  const float* fn;     // [NMIX, HC·D]
  const float* base;   // [NMIX]
  const float* scale;  // [3]
  int64_t hc, dim;
  float rms_eps;  // rms_norm_eps: the unweighted input norm
  float hc_eps;   // added to pre, to each softmax entry and to each Sinkhorn denominator
  int64_t sinkhorn_iters;
};

struct MhcMix {
  std::vector<float> pre;   // [HC]
  std::vector<float> post;  // [HC]
  std::vector<float> comb;  // [HC, HC], comb[i·HC + j] = M[i][j]
};

// The whole mapping from one token's streams X [HC, D] (stream-major).
MhcMix mhc_mix(const MhcParams& p, const float* X);

// Sinkhorn projection of the logits Z [hc, hc] (row-major), in place: row softmax + eps, a column
// step, then (iters − 1) × (row step, column step).
void sinkhorn(float* Z, int64_t hc, float eps, int64_t iters);

// y[D] = Σ_i pre_i · X[i]
void mhc_collapse(const MhcMix& m, const float* X, int64_t hc, int64_t dim, float* y);

// X[j] ← post_j · o + Σ_i M[i][j] · X_old[i], in place (X_old is copied first).
void mhc_expand(const MhcMix& m, const float* o, int64_t hc, int64_t dim, float* X);

}  // namespace ft
