#pragma once
// Scalar activations shared by every op (fp32).
#include <cmath>

namespace ft {

inline float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }
inline float silu(float z) { return z * sigmoid(z); }
// torch.nn.functional.softplus with beta 1, threshold 20.
inline float softplus(float y) { return y > 20.0f ? y : std::log1p(std::exp(y)); }

}  // namespace ft
