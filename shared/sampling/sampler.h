#pragma once
// Next-token sampling: penalties, temperature, top-k, top-p, min-p, and a per-sequence random
// stream so that a seed reproduces a generation whatever else runs in the batch.
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

namespace ft {

struct SamplingConfig {
  float temperature = 1.0f;  // 0: greedy
  float top_p = 1.0f;        // ≥ 1 or ≤ 0: off
  int32_t top_k = 0;         // ≤ 0: off
  float min_p = 0.0f;        // ≤ 0: off
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;  // ≤ 0 or 1: off
  std::optional<uint64_t> seed;
};

// Counts of the tokens a penalty looks at.
struct TokenHistory {
  std::unordered_map<int32_t, int32_t> prompt;     // repetition penalty only
  std::unordered_map<int32_t, int32_t> generated;  // all penalties
  void add_prompt(std::span<const int32_t> ids) {
    for (int32_t t : ids) ++prompt[t];
  }
  void add_generated(int32_t id) { ++generated[id]; }
};

// In place: HF repetition penalty over prompt and generated tokens (positive logits divided,
// negative multiplied), then OpenAI presence/frequency penalties over generated tokens.
void apply_penalties(std::span<float> logits, const TokenHistory& h, const SamplingConfig& c);

// Index of the largest value; ties go to the lowest index.
int32_t argmax(std::span<const float> logits);

// Sampler::sample with the uniform draw u01 ∈ [0, 1) given instead of taken from a stream:
// penalties (logits modified in place), then argmax when temperature ≤ 0 (u01 unused), else the
// candidates sorted by logit (ties: lower id first), top-k, softmax at the temperature, min-p,
// top-p, and the first kept candidate whose cumulative probability exceeds u01 · (the kept
// total). Pure, so another sampler (the GPU's) can be checked against it draw for draw.
int32_t sample_from(std::span<float> logits, const TokenHistory& h, const SamplingConfig& c, double u01);

class Sampler {
 public:
  explicit Sampler(const SamplingConfig& c);
  // Picks the next token from raw logits (modified in place: penalties, temperature, filters).
  int32_t sample(std::span<float> logits, const TokenHistory& h);
  const SamplingConfig& config() const { return c_; }

 private:
  SamplingConfig c_;
  std::mt19937_64 rng_;
};

}  // namespace ft
