#pragma once
// Clamped SwiGLU combine on the GPU — the twin of shared/ops/swiglu.h (spec §3.4):
// h = silu(min(g, limit)) · clamp(u, −limit, limit), the gate clamped from above only, the up
// projection on both sides. Elementwise, fp32, the reference's operations in its order (equal
// bits up to expf's last ulp), so trivially batch invariant.
#include <cuda_runtime.h>

#include <cstdint>

namespace ft::cuda {

// From a fused gate|up linear output gu [rows, 2·inter] (gate columns [0, inter), up columns
// [inter, 2·inter), rows ld_gu floats apart): h[r][i] for i < inter, rows ld_h floats apart.
// h may alias gu (in place over the gate half: each element is read before it is written).
void swiglu_rows(const float* gu, int64_t ld_gu, int64_t rows, int64_t inter, float limit, float* h, int64_t ld_h,
                 cudaStream_t stream);

}  // namespace ft::cuda
