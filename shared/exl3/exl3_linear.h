#pragma once
// Loader for EXL3-quantized linears (spec exl3-format §2.3): `<name>.trellis` + `.suh`/`.svh`
// (or legacy `.su`/`.sv`), optional `.bias`, optional codebook marker `.mcg` / `.mul1`.
// K and the codebook are per tensor; tensor data may be unaligned (EXL3 writers do not align).
#include <cstdint>
#include <string>
#include <vector>

#include "shared/exl3/codebook.h"
#include "shared/model/safetensors.h"

namespace ft::exl3 {

struct Exl3Linear {
  std::string name;  // module key, e.g. "model.layers.3.mlp.experts.17.down_proj"
  std::string where; // "<file>: tensor <name>.trellis", for messages
  int K = 0;
  Codebook codebook = Codebook::Inst3;
  int64_t in_p = 0, out_p = 0;     // padded sizes, multiples of 128
  const uint8_t* trellis = nullptr; // [in_p/16][out_p/16][16K] int16, little-endian, maybe unaligned
  std::vector<float> suh;           // [in_p] (legacy `.su` expanded to ±1)
  std::vector<float> svh;           // [out_p]
  std::vector<float> bias;          // [out_p] or empty

  int64_t trellis_bytes() const { return in_p * out_p * K / 8; }
};

inline int64_t pad128(int64_t n) { return (n + 127) / 128 * 128; }

// True when `<name>.trellis` exists.
bool is_exl3_linear(const TensorStore& store, const std::string& name);

// Reads and validates one EXL3 linear. Throws ft::Error naming file and tensor for a missing or
// inconsistent part: shapes that disagree, K outside 1..8, dims not multiples of 128, both codebook
// markers, a marker with a value other than the fixed multiplier, an unsupported `.scale`.
Exl3Linear load_exl3_linear(const TensorStore& store, const std::string& name);

// Same, and checks the padded sizes against the logical [out, in] the model config expects.
Exl3Linear load_exl3_linear(const TensorStore& store, const std::string& name, int64_t out, int64_t in);

}  // namespace ft::exl3
