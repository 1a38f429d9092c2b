#pragma once
// Log-probabilities on the GPU, the twin of shared/sampling/logprobs.h: log-softmax of the raw
// logits (before penalties and temperature) for the chosen token and the top n (n ≤ 20, best
// first, ties to the lower id), for the rows whose SamplingRowParams::logprobs ≥ 0.
//
// Numerics: each chunk of 8192 logits gives its max m_c and Σ expf(x − m_c) (fp32 terms, double
// sums in a fixed order); the row's log-sum-exp combines the chunks in ascending order in double,
// and each reported value is (double)x − lse rounded to float, as on the CPU. The top-n ranking
// is exact (integer keys), so the ids equal the CPU's; the values agree to ~1e−6.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpu-worker/backends/cuda/sampling/sampler.h"

namespace ft::cuda {

constexpr int kMaxTopLogprobs = 20;

// Scratch of token_logprobs for up to max_rows rows of `vocab` logits.
size_t logprobs_workspace_bytes(int64_t max_rows, int64_t vocab);

// For each row r with n = params[r].logprobs ≥ 0 (clamped to [0, min(20, V)]):
//   chosen_logprob[r] = log-softmax(logits[r])[chosen[r]] (NaN when chosen[r] is outside [0, V));
//   top_ids[r·20 + j], top_logprobs[r·20 + j] for j < n: the j-th best token and its log-prob;
//   j ∈ [n, 20): id −1, log-prob −inf.
// Rows with logprobs < 0 are left untouched. `chosen` is a device array [rows] (the sampler's
// tokens); logits rows are ld_logits floats apart and are only read.
void token_logprobs(const float* logits, int64_t ld_logits, int64_t rows, int64_t vocab,
                    const SamplingRowParams* params, const int32_t* chosen, void* workspace, size_t workspace_bytes,
                    float* chosen_logprob, int32_t* top_ids, float* top_logprobs, cudaStream_t stream);

}  // namespace ft::cuda
