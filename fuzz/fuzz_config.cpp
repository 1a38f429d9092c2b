// Arbitrary text as a model's config.json: parse_config gives a config or throws ft::Error
// naming the field, never crashes (e.g. on layer lists shorter than num_hidden_layers).
#include <cstddef>
#include <cstdint>
#include <string>

#include "shared/core/error.h"
#include "shared/model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const ft::ModelConfig c = ft::parse_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) (void)c.is_sparse(l);
  } catch (const ft::Error&) {
  }
  return 0;
}
