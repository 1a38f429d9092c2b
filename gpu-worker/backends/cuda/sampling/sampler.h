#pragma once
// Next-token sampling on the GPU, the twin of shared/sampling/sampler.h: penalties, greedy argmax,
// temperature, top-k, min-p, top-p and a seeded draw, for B rows of [B, V] logits in one call, so
// a decode step copies only token ids to the host.
//
// Semantics: shared/sampling/sampler.cpp's sample_from(logits, history, config, u01) on each row,
// with u01 = sampling_uniform(seed, step) (philox.h):
//   * penalties exactly as apply_penalties (fp32, same operations, no contraction), from the
//     row's slot of a SamplingPenaltyState (generated-token counts + prompt-presence bitmap);
//   * temperature ≤ 0: argmax of the penalised logits, ties to the lowest id (no draw);
//   * otherwise candidates in the order (logit descending, id ascending): top-k keeps the first
//     k; softmax weights e_i = expf((y_i − y_max) · (1/T)) in fp32 (y: penalised logits, 1/T
//     the fp32 reciprocal as on the CPU); min-p keeps the candidates with
//     (y_i − y_max) · (1/T) ≥ logf(min_p) (≡ p_i ≥ min_p · p_max; at least one); top-p keeps the
//     shortest prefix whose cumulative weight reaches top_p · (top-k weight); the draw picks the
//     first kept candidate whose cumulative weight exceeds u01 · (kept weight).
//   Weights are summed as integers: w_i = ⌊e_i · 2^F⌋ (F = 44 for the real vocab; tokens with
//   e_i < 2^−F, i.e. probability below ~6e−14 of the best one's, carry no weight). Integer sums
//   are exact in any order, so the result is the same whatever the grid, the other rows or their
//   order (batch invariance) and no sort is needed: every cut is found by a radix descent over
//   (count, weight) histograms. The CPU computes the same cuts in double; the two can differ
//   only where a cut lies within rounding (~1e−6 relative) of a boundary.
//
// Host functions take device pointers, allocate nothing, never synchronise and never read device
// memory, so a decode step can be captured into a CUDA graph: per-row parameters come from a
// device array the engine refreshes before each replay.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "shared/sampling/sampler.h"

namespace ft::cuda {

// One row's sampling parameters (device array [rows]; plain data, copied by the engine).
struct SamplingRowParams {
  float temperature = 1.0f;         // ≤ 0: greedy
  float top_p = 1.0f;               // ≥ 1 or ≤ 0: off
  float min_p = 0.0f;               // ≤ 0: off
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;  // ≤ 0 or 1: off
  int32_t top_k = 0;                // ≤ 0 or ≥ V: off
  int32_t slot = -1;                // penalty-state slot of the row's sequence; < 0: no penalties, no count update
  uint64_t seed = 0;                // the sequence's stream
  uint64_t step = 0;                // the sequence's own draw number: 0 for its first sampled token, +1 per token
  int32_t logprobs = -1;            // < 0: none; 0: the chosen token's; n ∈ [1, 20]: also the top n (logprobs.h)
  int32_t reserved = 0;
};
static_assert(sizeof(SamplingRowParams) == 56, "SamplingRowParams is copied to the device as is");

// The row parameters of a request; `seed` is used when the config has none (the engine draws it
// with sampling_random_seed when the sequence opens and keeps it).
SamplingRowParams sampling_row_params(const SamplingConfig& c, int32_t slot, uint64_t seed, uint64_t step,
                                      int32_t logprobs);
// A fresh random 64-bit seed (std::random_device) for a sequence opened without one.
uint64_t sampling_random_seed();

// Per-slot penalty state, allocated by the engine (sampling_penalty_state_bytes):
//   counts      int32  [slots][vocab]                    generated-token counts
//   prompt_bits uint32 [slots][sampling_prompt_words(V)] bit t%32 of word t/32: t was fed as prompt
struct SamplingPenaltyState {
  int32_t* counts = nullptr;
  uint32_t* prompt_bits = nullptr;
  int64_t slots = 0, vocab = 0;
};
int64_t sampling_prompt_words(int64_t vocab);  // ⌈V/32⌉
size_t sampling_penalty_state_bytes(int64_t slots, int64_t vocab);  // counts + bitmap

// A sequence opens in `slot`: no prompt, nothing generated (two memsets).
void sampling_reset_slot(const SamplingPenaltyState& s, int32_t slot, cudaStream_t stream);
// Tokens fed as prompt: sets tokens[i]'s bit in slot token_slots[i] (device arrays [n]; entries
// with a slot or token out of range are skipped). Idempotent, so re-feeding is harmless.
void sampling_mark_prompt(const SamplingPenaltyState& s, const int32_t* tokens, const int32_t* token_slots, int64_t n,
                          cudaStream_t stream);
// The same for n tokens of one sequence.
void sampling_mark_prompt(const SamplingPenaltyState& s, int32_t slot, const int32_t* tokens, int64_t n,
                          cudaStream_t stream);

// out[r][·] = logits[r][·] with row r's penalties applied (the sampler's own penalty code; for
// tests and diagnostics — sample_tokens applies them on the fly and never writes logits).
void apply_penalties(const float* logits, int64_t ld_logits, int64_t rows, int64_t vocab,
                     const SamplingRowParams* params, const SamplingPenaltyState& s, float* out, int64_t ld_out,
                     cudaStream_t stream);

// What a row's draw did (optional output, for tests and diagnostics).
struct SampleTrace {
  double u01 = 0;             // the uniform drawn (0 for greedy rows)
  uint64_t topk_weight = 0;   // Σ w over the top-k candidates (all tokens when top-k is off)
  uint64_t kept_weight = 0;   // Σ w over the kept candidates
  uint64_t draw = 0;          // ⌊u01 · kept_weight⌋: the token is the first whose cumulative weight exceeds it
  int32_t kept = 0;           // candidates kept after top-k, min-p and top-p (0 for greedy rows)
  int32_t min_p_count = 0;    // tokens passing min-p (V when min-p is off)
  int32_t token = -1;
  int32_t row_passes = 0;     // passes over the row's V keys the selection made (performance)
  uint32_t errors = 0;        // internal consistency bits: 0, or 16 for a row without weight (no finite
                              // best logit: the best id is returned); anything else is a bug
  int32_t reserved = 0;
};
static_assert(sizeof(SampleTrace) == 56);

// Scratch of sample_tokens for up to max_rows rows of `vocab` logits.
size_t sampling_workspace_bytes(int64_t max_rows, int64_t vocab);

// tokens[r] = the token sampled for row r of `logits` ([rows] rows, ld_logits floats apart, not
// modified) under params[r]; then counts[slot][token] += 1 for rows with a slot (after every row
// has read its counts, so rows must have distinct slots). trace may be null.
void sample_tokens(const float* logits, int64_t ld_logits, int64_t rows, int64_t vocab,
                   const SamplingRowParams* params, const SamplingPenaltyState& s, void* workspace,
                   size_t workspace_bytes, int32_t* tokens, SampleTrace* trace, cudaStream_t stream);

}  // namespace ft::cuda
