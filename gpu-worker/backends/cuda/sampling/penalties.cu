// Per-slot penalty state (open, prompt marking) and the standalone penalty kernel. The sampler
// applies the same penalise() on the fly while it reads the logits.
#include <algorithm>
#include <random>
#include <string>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/sampling/sampler.h"
#include "gpu-worker/backends/cuda/sampling/sampling_device.cuh"

namespace ft::cuda {
namespace {

using namespace sampling_detail;

__global__ void mark_prompt_kernel(uint32_t* bits, int64_t words, int64_t slots, int64_t vocab,
                                   const int32_t* tokens, const int32_t* token_slots, int32_t one_slot, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int32_t t = tokens[i];
  const int32_t s = token_slots ? token_slots[i] : one_slot;
  if (t < 0 || t >= vocab || s < 0 || s >= slots) return;
  atomicOr(&bits[s * words + (t >> 5)], 1u << (t & 31));
}

__global__ void apply_penalties_kernel(const float* logits, int64_t ld_logits, int64_t vocab,
                                       const SamplingRowParams* params, SamplingPenaltyState st, int64_t words,
                                       float* out, int64_t ld_out) {
  const int64_t r = blockIdx.y;
  const SamplingRowParams p = params[r];
  const bool pen = has_penalties(p, st.slots);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vocab;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float y = logits[r * ld_logits + i];
    if (pen) {
      const int32_t c = st.counts[p.slot * vocab + i];
      const bool in_prompt = (st.prompt_bits[p.slot * words + (i >> 5)] >> (i & 31)) & 1u;
      y = penalise(y, c, in_prompt, p);
    }
    out[r * ld_out + i] = y;
  }
}

void check_state(const SamplingPenaltyState& s, const char* what) {
  if (s.slots < 0 || s.vocab <= 0 || (s.slots > 0 && (!s.counts || !s.prompt_bits)))
    throw Error(std::string(what) + ": penalty state without memory (slots " + std::to_string(s.slots) + ", vocab " +
                std::to_string(s.vocab) + ")");
}

}  // namespace

int64_t sampling_prompt_words(int64_t vocab) { return (vocab + 31) / 32; }

size_t sampling_penalty_state_bytes(int64_t slots, int64_t vocab) {
  return static_cast<size_t>(slots) * (static_cast<size_t>(vocab) * sizeof(int32_t) +
                                       static_cast<size_t>(sampling_prompt_words(vocab)) * sizeof(uint32_t));
}

SamplingRowParams sampling_row_params(const SamplingConfig& c, int32_t slot, uint64_t seed, uint64_t step,
                                      int32_t logprobs) {
  SamplingRowParams p;
  p.temperature = c.temperature;
  p.top_p = c.top_p;
  p.min_p = c.min_p;
  p.presence_penalty = c.presence_penalty;
  p.frequency_penalty = c.frequency_penalty;
  p.repetition_penalty = c.repetition_penalty;
  p.top_k = c.top_k;
  p.slot = slot;
  p.seed = c.seed ? *c.seed : seed;
  p.step = step;
  p.logprobs = logprobs;
  return p;
}

uint64_t sampling_random_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

void sampling_reset_slot(const SamplingPenaltyState& s, int32_t slot, cudaStream_t stream) {
  check_state(s, "sampling_reset_slot");
  if (slot < 0 || slot >= s.slots)
    throw Error("sampling_reset_slot: slot " + std::to_string(slot) + " outside [0, " + std::to_string(s.slots) + ")");
  const int64_t words = sampling_prompt_words(s.vocab);
  FT_CUDA_CHECK(cudaMemsetAsync(s.counts + slot * s.vocab, 0, s.vocab * sizeof(int32_t), stream));
  FT_CUDA_CHECK(cudaMemsetAsync(s.prompt_bits + slot * words, 0, words * sizeof(uint32_t), stream));
}

void sampling_mark_prompt(const SamplingPenaltyState& s, const int32_t* tokens, const int32_t* token_slots, int64_t n,
                          cudaStream_t stream) {
  check_state(s, "sampling_mark_prompt");
  if (n <= 0) return;
  const int threads = 256;
  mark_prompt_kernel<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream>>>(
      s.prompt_bits, sampling_prompt_words(s.vocab), s.slots, s.vocab, tokens, token_slots, -1, n);
  FT_CUDA_CHECK_LAUNCH();
}

void sampling_mark_prompt(const SamplingPenaltyState& s, int32_t slot, const int32_t* tokens, int64_t n,
                          cudaStream_t stream) {
  check_state(s, "sampling_mark_prompt");
  if (n <= 0) return;
  const int threads = 256;
  mark_prompt_kernel<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream>>>(
      s.prompt_bits, sampling_prompt_words(s.vocab), s.slots, s.vocab, tokens, nullptr, slot, n);
  FT_CUDA_CHECK_LAUNCH();
}

void apply_penalties(const float* logits, int64_t ld_logits, int64_t rows, int64_t vocab,
                     const SamplingRowParams* params, const SamplingPenaltyState& s, float* out, int64_t ld_out,
                     cudaStream_t stream) {
  if (rows <= 0) return;
  if (s.slots > 0 && s.vocab != vocab)
    throw Error("apply_penalties: penalty state for vocab " + std::to_string(s.vocab) + ", logits have " +
                std::to_string(vocab));
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((vocab + threads - 1) / threads, 256);
  apply_penalties_kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(rows)), threads, 0, stream>>>(
      logits, ld_logits, vocab, params, s, sampling_prompt_words(vocab), out, ld_out);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
