#include "shared/model/tensor_convert.h"

#include <cstring>

#include "shared/core/error.h"
#include "shared/core/half.h"

namespace ft {

namespace {
template <typename T>
T load(const uint8_t* p, int64_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}
}  // namespace

void to_f32(const TensorInfo& t, float* out) {
  const int64_t n = t.numel();
  switch (t.dtype) {
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(load<uint16_t>(t.data, i));
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(load<uint16_t>(t.data, i));
      return;
    case DType::F32:
      std::memcpy(out, t.data, static_cast<size_t>(n) * 4);
      return;
    case DType::F64:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(load<double>(t.data, i));
      return;
    default:
      throw Error(t.where() + ": dtype " + dtype_name(t.dtype) + " where a BF16/F16/F32 tensor is expected");
  }
}

std::vector<float> to_f32(const TensorInfo& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  to_f32(t, v.data());
  return v;
}

std::vector<int64_t> to_i64(const TensorInfo& t) {
  const int64_t n = t.numel();
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case DType::I64: v[i] = load<int64_t>(t.data, i); break;
      case DType::I32: v[i] = load<int32_t>(t.data, i); break;
      case DType::I16: v[i] = load<int16_t>(t.data, i); break;
      case DType::I8: v[i] = load<int8_t>(t.data, i); break;
      case DType::U8: v[i] = load<uint8_t>(t.data, i); break;
      default: throw Error(t.where() + ": dtype " + dtype_name(t.dtype) + " where an integer tensor is expected");
    }
  }
  return v;
}

void expect_shape(const TensorInfo& t, const std::vector<int64_t>& shape) {
  if (t.shape != shape) {
    TensorInfo want;
    want.shape = shape;
    throw Error(t.where() + " has shape " + t.shape_str() + ", expected " + want.shape_str());
  }
}

void expect_shape(const TensorInfo& t, std::initializer_list<int64_t> shape) {
  expect_shape(t, std::vector<int64_t>(shape));
}

}  // namespace ft
