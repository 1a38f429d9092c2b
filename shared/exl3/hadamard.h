#pragma once
// 128-point Hadamard transform of EXL3 (spec exl3-format §6.1): natural-order Sylvester matrix,
// normalised by 1/sqrt(128) after the butterflies. fp32 throughout; the fast kernels use the same
// butterfly order, so both produce identical bits.
#include <cstdint>

namespace ft::exl3 {

constexpr int kHad = 128;
constexpr float kHadScale = 0.08838834764831845f;  // 1/sqrt(128)

// In place: v ← FWHT(v)·(1/sqrt(128)) on one 128-block.
void hadamard128(float* v);
// Every consecutive 128-block of v[0 … n), n a multiple of 128.
void hadamard_blocks(float* v, int64_t n);

}  // namespace ft::exl3
