#pragma once
// Constraint masks on the GPU, the twin of shared/sampling/token_constraint.h's apply_bias +
// apply_mask: for B rows of [B, ld] logits, the bias entries are applied (−100 bans: −∞, else
// added), then, in rows whose mask flag is set, every token whose bit is clear in the row's
// allowed-token words (bit i of word i/32) becomes −∞. The engine fills the words on the host
// (TokenConstraint::mask, while the forward pass runs), uploads them with the flags and the bias
// entries, and calls this right before sample_tokens. Like the sampler: device pointers only, no
// allocation, no synchronisation (graph-capturable).
#include <cuda_runtime.h>

#include <cstdint>

namespace ft::cuda {

struct LogitBiasEntry {
  int32_t row = 0;
  int32_t token = 0;
  float bias = 0.0f;
};

// words: [rows, words_per_row]; has_mask: [rows] (0: row unconstrained); bias: [n_bias], at most
// one entry per (row, token).
void apply_token_constraints(float* logits, int64_t ld, int64_t rows, int64_t V, const uint32_t* words,
                             int64_t words_per_row, const uint8_t* has_mask, const LogitBiasEntry* bias, int64_t n_bias,
                             cudaStream_t stream);

}  // namespace ft::cuda
