#include "shared/exl3/exl3_linear.h"

#include <cstring>

#include "shared/core/error.h"
#include "shared/core/half.h"
#include "shared/model/tensor_convert.h"

namespace ft::exl3 {

namespace {

std::vector<float> read_f16_vector(const TensorInfo& t, int64_t n) {
  if (t.dtype != DType::F16 && t.dtype != DType::BF16 && t.dtype != DType::F32)
    throw Error(t.where() + ": dtype " + dtype_name(t.dtype) + ", expected F16");
  expect_shape(t, {n});
  return to_f32(t);
}

// Legacy packed signs: bit j of uint16 word i is the sign of element 16i + j (set = −1).
std::vector<float> read_sign_bits(const TensorInfo& t, int64_t n) {
  if (t.dtype != DType::I16) throw Error(t.where() + ": dtype " + dtype_name(t.dtype) + ", expected I16 (packed signs)");
  expect_shape(t, {n / 16});
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n / 16; ++i) {
    uint16_t w;
    std::memcpy(&w, t.data + 2 * i, 2);
    for (int j = 0; j < 16; ++j) v[16 * i + j] = (w >> j) & 1 ? -1.0f : 1.0f;
  }
  return v;
}

std::vector<float> read_scales(const TensorStore& store, const std::string& name, const char* full, const char* legacy,
                               int64_t n) {
  if (const TensorInfo* t = store.find(name + full)) return read_f16_vector(*t, n);
  if (const TensorInfo* t = store.find(name + legacy)) return read_sign_bits(*t, n);
  throw Error(store.source() + ": EXL3 linear " + name + " has a .trellis but neither " + name + full + " nor " + name +
              legacy);
}

void check_marker(const TensorInfo& t, uint32_t expected) {
  if (t.dtype != DType::I32 || t.numel() != 1)
    throw Error(t.where() + ": codebook marker must be a scalar I32, got " + dtype_name(t.dtype) + " " + t.shape_str());
  uint32_t v;
  std::memcpy(&v, t.data, 4);
  if (v != expected)
    throw Error(t.where() + ": codebook marker value " + std::to_string(v) + " differs from the fixed multiplier " +
                std::to_string(expected) + " (an experimental pre-2025-10-12 codebook this loader cannot decode)");
}

}  // namespace

bool is_exl3_linear(const TensorStore& store, const std::string& name) { return store.find(name + ".trellis") != nullptr; }

Exl3Linear load_exl3_linear(const TensorStore& store, const std::string& name) {
  const TensorInfo& tr = store.get(name + ".trellis");
  Exl3Linear q;
  q.name = name;
  q.where = tr.where();
  if (tr.dtype != DType::I16) throw Error(tr.where() + ": dtype " + dtype_name(tr.dtype) + ", expected I16");
  if (tr.shape.size() != 3 || tr.shape[2] % 16 != 0 || tr.shape[0] <= 0 || tr.shape[1] <= 0)
    throw Error(tr.where() + " has shape " + tr.shape_str() + ", expected [in/16, out/16, 16*K]");
  const int64_t k = tr.shape[2] / 16;
  if (k < 1 || k > 8)
    throw Error(tr.where() + " has shape " + tr.shape_str() + ": K = " + std::to_string(k) + " is outside 1..8");
  q.K = static_cast<int>(k);
  q.in_p = tr.shape[0] * 16;
  q.out_p = tr.shape[1] * 16;
  if (q.in_p % 128 != 0 || q.out_p % 128 != 0)
    throw Error(tr.where() + " has shape " + tr.shape_str() + ": padded sizes " + std::to_string(q.in_p) + " x " +
                std::to_string(q.out_p) + " are not multiples of 128");
  if (static_cast<int64_t>(tr.nbytes) != q.trellis_bytes())
    throw Error(tr.where() + ": holds " + std::to_string(tr.nbytes) + " bytes, shape implies " +
                std::to_string(q.trellis_bytes()));
  q.trellis = tr.data;

  const TensorInfo* mcg = store.find(name + ".mcg");
  const TensorInfo* mul1 = store.find(name + ".mul1");
  if (mcg && mul1) throw Error(mcg->where() + ": EXL3 linear " + name + " carries both .mcg and .mul1 codebook markers");
  if (mcg) {
    check_marker(*mcg, kMcgMult);
    q.codebook = Codebook::Mcg;
  } else if (mul1) {
    check_marker(*mul1, kMul1Mult);
    q.codebook = Codebook::Mul1;
  }
  if (const TensorInfo* s = store.find(name + ".scale"))
    throw Error(s->where() + ": EXL3 .scale tensors are not supported (current exllamav3 does not write them)");

  q.suh = read_scales(store, name, ".suh", ".su", q.in_p);
  q.svh = read_scales(store, name, ".svh", ".sv", q.out_p);
  if (const TensorInfo* b = store.find(name + ".bias")) q.bias = read_f16_vector(*b, q.out_p);
  return q;
}

Exl3Linear load_exl3_linear(const TensorStore& store, const std::string& name, int64_t out, int64_t in) {
  Exl3Linear q = load_exl3_linear(store, name);
  if (q.in_p != pad128(in) || q.out_p != pad128(out))
    throw Error(q.where + " stores a " + std::to_string(q.in_p) + " x " + std::to_string(q.out_p) +
                " (in x out, padded) linear, expected in " + std::to_string(in) + " → " + std::to_string(pad128(in)) +
                ", out " + std::to_string(out) + " → " + std::to_string(pad128(out)));
  return q;
}

}  // namespace ft::exl3
