#pragma once
// Reading checkpoint tensors into fp32 / integer vectors, with the shape and dtype checks that
// turn a malformed model into a message naming the file and tensor.
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "shared/model/safetensors.h"

namespace ft {

// BF16, F16, F32 or F64 → fp32 (F64 rounds). Any other dtype throws.
std::vector<float> to_f32(const TensorInfo& t);
// Same, writing into a caller buffer of t.numel() floats.
void to_f32(const TensorInfo& t, float* out);
// I64, I32, I16, I8, U8 → int64. Any other dtype throws.
std::vector<int64_t> to_i64(const TensorInfo& t);

// Throws "<file>: tensor <name> has shape [a, b], expected [c, d]".
void expect_shape(const TensorInfo& t, std::initializer_list<int64_t> shape);
void expect_shape(const TensorInfo& t, const std::vector<int64_t>& shape);

}  // namespace ft
