#include "shared/engine/linear_source.h"

#include "shared/core/error.h"
#include "shared/exl3/exl3_linear.h"
#include "shared/exl3/reference.h"
#include "shared/model/tensor_convert.h"

namespace ft {

bool has_linear(const TensorStore& store, const std::string& name) {
  return store.find(name + ".weight") != nullptr || store.find(name + ".trellis") != nullptr;
}

namespace {

void load_bias(const TensorStore& store, const std::string& name, int64_t out, bool bias_allowed, DenseLinear& l) {
  const TensorInfo* b = store.find(name + ".bias");
  if (!b) return;
  if (!bias_allowed) throw Error(b->where() + ": unexpected bias (this layer has none in glm5_next with this config)");
  expect_shape(*b, {out});
  l.bias = to_f32(*b);
}

}  // namespace

DenseLinear load_linear(const TensorStore& store, const std::string& name, int64_t out, int64_t in,
                        bool bias_allowed, bool keep_quantized) {
  DenseLinear l;
  l.out = out;
  l.in = in;
  if (const TensorInfo* w = store.find(name + ".weight")) {
    expect_shape(*w, {out, in});
    l.w = to_f32(*w);
    load_bias(store, name, out, bias_allowed, l);
    return l;
  }
  if (exl3::is_exl3_linear(store, name)) {
    // The exact dense equivalent: decoded trellis with both Hadamard/sign-scale transforms folded
    // in (exl3-format §6.2), sliced to the unpadded [out, in].
    auto qp = std::make_shared<exl3::Exl3Linear>(exl3::load_exl3_linear(store, name, out, in));
    const exl3::Exl3Linear& q = *qp;
    if (keep_quantized)
      l.exl3 = qp;
    else
      l.w = exl3::dense_weight(q, out, in);
    if (!q.bias.empty()) {
      if (!bias_allowed)
        throw Error(store.get(name + ".bias").where() + ": unexpected bias (this layer has none in glm5_next with this config)");
      l.bias.assign(q.bias.begin(), q.bias.begin() + out);
    }
    return l;
  }
  throw Error(store.source() + ": missing tensor " + name + ".weight");
}

}  // namespace ft
