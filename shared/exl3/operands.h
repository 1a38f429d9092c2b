#pragma once
// How the transformed input of an EXL3 linear, xh = (x ⊙ suh)·Ĥ, enters its matmul.
//   F32:     as it is (the reference engine, the CPU backend).
//   F16Rows: as the GPU's tensor-core kernels take it: per row, fp16 of xh·2^e, with e putting
//            the row's largest |value| in [2^14, 2^15), and the row's outputs (after Ĥ and svh,
//            before bias) multiplied by 2^−e. A CPU tier computing part of a layer for the GPU
//            engine rounds the same way, so its sums equal the GPU's up to accumulation order.
#include <cstdint>

namespace ft::exl3 {

enum class Operands : uint8_t { F32 = 0, F16Rows = 1 };

// e for a row whose largest |value| is m: m·2^e ∈ [2^14, 2^15); 0 when m is 0, NaN or infinite;
// at most 126 (gpu-worker/backends/cuda/exl3/device.cuh row_exponent, ops/linear.h to_f16_rows).
int f16_row_exponent(float max_abs);

// In place: row[i] ← fp16(row[i]·2^e) as fp32 (round to nearest even), e from the row's largest
// |value| (NaN ignored). Returns 2^−e, the factor of the row's outputs.
float round_row_to_f16(float* row, int64_t n);

}  // namespace ft::exl3
