#pragma once
// Normalisations of the glm5_next forward pass (architecture spec §3.2, §4.5, §4.8, §5.3).
#include <cstdint>

namespace ft {

// y = x / sqrt(mean(x²) + eps) ⊙ w (plain weight, not 1 + w). w may be null (unweighted).
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y);

// LayerNorm with biased variance: (x − mean) / sqrt(var + eps) ⊙ w + b.
void layer_norm(const float* x, const float* w, const float* b, int64_t n, float eps, float* y);

// x ← x / sqrt(Σx² + eps) (eps inside the root, as KDA's q/k normalisation does).
void l2_normalize(float* x, int64_t n, float eps);

}  // namespace ft
