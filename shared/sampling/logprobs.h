#pragma once
// Log-probabilities reported to clients: log-softmax of the raw model logits (before penalties
// and temperature), as OpenAI-compatible servers report them.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace ft {

struct TokenLogprobs {
  float chosen = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // best first, ties to the lower id
};

TokenLogprobs token_logprobs(std::span<const float> raw_logits, int32_t chosen, int32_t n_top);

}  // namespace ft
