#pragma once
// Synthetic glm5_next models for benchmarks at the real widths: a ModelWeights skeleton whose
// large tensors are placeholders (shapes only) that upload_model draws on the GPU, so a 35 GB
// bf16-sized model never passes through host memory. The small tensors (norms, gates, conv taps)
// hold plausible values so activations stay finite through every layer.
#include <cstdint>
#include <string>

#include "shared/engine/weights.h"

namespace ft::cuda {

// A config with the real model's widths and depth and `overrides_json` (a JSON object's members,
// e.g. "\"n_routed_experts\": 8") applied on top of the defaults.
ModelConfig synthetic_config(const std::string& overrides_json);

ModelWeights synthetic_weights(const ModelConfig& c, uint64_t seed);

}  // namespace ft::cuda
