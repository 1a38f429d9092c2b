#pragma once
// Reference math of an EXL3 linear (spec exl3-format §6): the exact dense equivalent for the
// reference engine, and the fused forward y = (((x ⊙ suh)·Ĥ)·Wq·Ĥ) ⊙ svh (+ bias) in fp32 that
// the fast kernels must match to accumulation-order noise.
#include <cstdint>
#include <vector>

#include "shared/exl3/exl3_linear.h"
#include "shared/exl3/operands.h"

namespace ft::exl3 {

// W_eff = diag(suh)·Ĥ_in·Wq·Ĥ_out·diag(svh), [in_p][out_p], computed in double, rounded once.
std::vector<float> effective_weight(const Exl3Linear& q);

// HF-orientation dense weight [out][in] (the unpadded slice of W_effᵀ), for y = W·x.
std::vector<float> dense_weight(const Exl3Linear& q, int64_t out, int64_t in);

// x: [rows][in_p] → y: [rows][out_p], fp32: suh, 128-point Hadamard, Wq (decoded, fp32 FMA in
// ascending input order), Hadamard, svh, bias. `wq` is the decoded trellis [in_p][out_p].
// F16Rows rounds each row's transformed input as operands.h says and scales its outputs back
// (·2^−e after svh, before bias: the GPU kernels' order).
void forward_reference(const Exl3Linear& q, const float* wq, const float* x, int64_t rows, float* y,
                       Operands operands = Operands::F32);

// Input side alone: xh = ((x ⊙ suh)·Ĥ) for one row of in_p values.
void input_transform(const float* x, const float* suh, int64_t in_p, float* xh);
// Output side alone, in place on one row of out_p values: y = (z·Ĥ) ⊙ svh (+ bias).
void output_transform(float* z, const float* svh, const float* bias, int64_t out_p);

}  // namespace ft::exl3
