#include "shared/exl3/quant_config.h"

#include <nlohmann/json.hpp>

#include "shared/core/error.h"

namespace ft::exl3 {

std::optional<QuantConfig> parse_quant_config(const std::string& json_text, const std::string& source) {
  if (json_text.empty()) return std::nullopt;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(source + ": quantization_config is not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(source + ": quantization_config must be an object");
  const std::string method = j.value("quant_method", std::string());
  if (method != "exl3")
    throw Error(source + ": quantization_config.quant_method is \"" + method + "\"; only \"exl3\" is supported");
  QuantConfig q;
  try {
    q.version = j.value("version", std::string());
    q.bits = j.value("bits", 0.0);
    q.head_bits = j.value("head_bits", 6);
    q.out_scales = j.value("out_scales", std::string("always"));
    if (j.contains("codebook")) {
      const std::string cb = j.at("codebook").get<std::string>();
      if (cb == "3inst") q.codebook = Codebook::Inst3;
      else if (cb == "mcg") q.codebook = Codebook::Mcg;
      else if (cb == "mul1") q.codebook = Codebook::Mul1;
      else throw Error(source + ": quantization_config.codebook \"" + cb + "\" is not one of 3inst, mcg, mul1");
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(source + ": quantization_config has a field of the wrong type: " + e.what());
  }
  if (!((q.head_bits >= 1 && q.head_bits <= 8) || q.head_bits == 16))
    throw Error(source + ": quantization_config.head_bits " + std::to_string(q.head_bits) + " is not in 1..8 or 16");
  return q;
}

}  // namespace ft::exl3
