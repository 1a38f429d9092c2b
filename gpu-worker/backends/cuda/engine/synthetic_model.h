#pragma once
// Synthetic glm5_next models for benchmarks at the real widths: a ModelWeights skeleton whose
// large tensors are placeholders (shapes only) that upload_model draws on the GPU, so a 35 GB
// bf16-sized model never passes through host memory. The small tensors (norms, gates, conv taps)
// hold plausible values so activations stay finite through every layer.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shared/engine/weights.h"
#include "shared/exl3/codebook.h"

namespace ft::cuda {

// A config with the real model's widths and depth and `overrides_json` (a JSON object's members,
// e.g. "\"n_routed_experts\": 8") applied on top of the defaults.
ModelConfig synthetic_config(const std::string& overrides_json);

ModelWeights synthetic_weights(const ModelConfig& c, uint64_t seed);

// The same model quantized as an EXL3 checkpoint is: every linear an EXL3 linear with random
// trellis bits (K bits per weight, lm_head head_K), except what the engine keeps dense anyway
// (router, MLA's kv_b, the indexer's weights_proj: placeholders). Routed experts are left out:
// they come from an expert segment (gpu-worker/tiers/synthetic_segment.h). Every trellis points
// into one shared random pool, which must outlive the weights' upload.
struct SyntheticExl3Options {
  int K = 3, head_K = 6;
  exl3::Codebook codebook = exl3::Codebook::Mul1;
  uint64_t seed = 1;
};
struct SyntheticExl3Model {
  ModelWeights weights;
  std::shared_ptr<std::vector<uint8_t>> trellis_pool;
  uint64_t trellis_bytes = 0;  // sum over linears (what the GPU holds)
};
SyntheticExl3Model synthetic_exl3_weights(const ModelConfig& c, const SyntheticExl3Options& o);

}  // namespace ft::cuda
