#include "shared/engine/linear_source.h"

#include "shared/core/error.h"
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
                        bool bias_allowed) {
  DenseLinear l;
  l.out = out;
  l.in = in;
  if (const TensorInfo* w = store.find(name + ".weight")) {
    expect_shape(*w, {out, in});
    l.w = to_f32(*w);
    load_bias(store, name, out, bias_allowed, l);
    return l;
  }
  // EXL3 linears are recognised here once the EXL3 decoder (shared/exl3) provides the dense
  // equivalent; until then such a checkpoint is reported as unreadable below.
  if (store.find(name + ".trellis"))
    throw Error(store.source() + ": tensor " + name + ".trellis is an EXL3 linear, which this build cannot read");
  throw Error(store.source() + ": missing tensor " + name + ".weight");
}

}  // namespace ft
