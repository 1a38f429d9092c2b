#pragma once
// Where the reference engine gets a linear layer's fp32 weight from: a dense checkpoint tensor
// (`<name>.weight`, BF16/F16/F32) or, for quantized checkpoints, the exact dense equivalent of an
// EXL3 linear (`<name>.trellis` + `.suh`/`.svh`).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shared/exl3/exl3_linear.h"
#include "shared/model/safetensors.h"

namespace ft {

// y = W·x (+ b) with W row-major [out, in].
struct DenseLinear {
  int64_t out = 0, in = 0;
  std::vector<float> w;     // empty when the linear is kept quantized (exl3 set)
  std::vector<float> bias;  // empty when the layer has none
  // The EXL3 linear itself, when loaded with keep_quantized (the CUDA engine uploads trellises
  // and never needs the dense weight). Its trellis points into the model's mapped files.
  std::shared_ptr<const exl3::Exl3Linear> exl3;
};

// True when the checkpoint holds a linear under `name` in any supported encoding.
bool has_linear(const TensorStore& store, const std::string& name);

// Loads linear `name` ("model.language_model.layers.3.self_attn.q_a_proj") with the expected
// shape. A bias is read when `<name>.bias` exists and `bias_allowed`; a bias where none is
// allowed, a wrong shape or a wrong dtype throws ft::Error naming the file and tensor.
// With keep_quantized an EXL3 linear is returned as DenseLinear::exl3 (bias in `bias`, w empty).
DenseLinear load_linear(const TensorStore& store, const std::string& name, int64_t out, int64_t in,
                        bool bias_allowed = false, bool keep_quantized = false);

}  // namespace ft
