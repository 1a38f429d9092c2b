#pragma once
// Where the reference engine gets a linear layer's fp32 weight from: a dense checkpoint tensor
// (`<name>.weight`, BF16/F16/F32) or, for quantized checkpoints, the exact dense equivalent of an
// EXL3 linear (`<name>.trellis` + `.suh`/`.svh`).
#include <cstdint>
#include <string>
#include <vector>

#include "shared/model/safetensors.h"

namespace ft {

// y = W·x (+ b) with W row-major [out, in].
struct DenseLinear {
  int64_t out = 0, in = 0;
  std::vector<float> w;
  std::vector<float> bias;  // empty when the layer has none
};

// True when the checkpoint holds a linear under `name` in any supported encoding.
bool has_linear(const TensorStore& store, const std::string& name);

// Loads linear `name` ("model.language_model.layers.3.self_attn.q_a_proj") with the expected
// shape. A bias is read when `<name>.bias` exists and `bias_allowed`; a bias where none is
// allowed, a wrong shape or a wrong dtype throws ft::Error naming the file and tensor.
DenseLinear load_linear(const TensorStore& store, const std::string& name, int64_t out, int64_t in,
                        bool bias_allowed = false);

}  // namespace ft
