#pragma once
// `quantization_config` of an EXL3 model's config.json (spec exl3-format §2.4). Informational
// except for quant_method: per-tensor shapes and markers are authoritative for K and codebook.
#include <optional>
#include <string>

#include "shared/exl3/codebook.h"

namespace ft::exl3 {

struct QuantConfig {
  std::string version;
  double bits = 0.0;                  // average K over decoder tensors
  int head_bits = 6;                  // 1..8, or 16 for an FP16 lm_head
  std::optional<Codebook> codebook;   // absent in pre-2025-10-12 models (which used 3INST)
  std::string out_scales = "always";
};

// Parses the raw JSON object (ModelConfig::quantization_config_json). Returns nullopt for an
// empty string (unquantized model). Throws ft::Error naming `source` for another quant_method
// or malformed fields.
std::optional<QuantConfig> parse_quant_config(const std::string& json_text, const std::string& source);

}  // namespace ft::exl3
