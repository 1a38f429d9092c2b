#pragma once
// The two ends of the residual streams on the GPU — the prologue and epilogue of
// ReferenceEngine::forward (shared/engine/reference_engine.cpp, spec §3.1 steps 1–2 and 4–5):
// every stream of a token starts as its embedding row, and the last layer's streams collapse to
// their plain mean followed by the final RMSNorm. Streams are [N, HC, D] fp32 as in ops/mhc.h.
#include <cuda_runtime.h>

#include <cstdint>

namespace ft::cuda {

enum class EmbedDtype : int { F32, F16, BF16 };  // the checkpoint's dtype, kept in VRAM

struct EmbedTable {
  const void* data = nullptr;  // [vocab, dim] row-major
  EmbedDtype dtype = EmbedDtype::BF16;
  int64_t vocab = 0, dim = 0;
};

// X[t][i] = E[tokens[t]] (widened exactly to fp32) for t < n_tokens, i < hc. tokens is a device
// array; an id outside [0, vocab) yields a NaN row instead of a stray read (the engine validates
// ids on the host first, as the reference does).
void embed_tokens(const EmbedTable& table, const int32_t* tokens, int64_t n_tokens, int64_t hc, float* X,
                  cudaStream_t stream);

// h[r] = RMSNorm((1/HC)·Σ_i X[src][i])·w with src = rows[r] (a device array of token rows, so the
// engine can gather the rows it needs logits for) or src = r when rows is null, for r < n_rows;
// h rows ld_h floats apart. Sums in stream order, ÷ HC, then rms_norm as in ops/norms.h, so a
// row equals the reference's up to r's last-bit rounding. A src outside [0, n_tokens) gives NaN.
void final_norm(const float* X, int64_t n_tokens, int64_t hc, int64_t dim, const int32_t* rows, int64_t n_rows,
                const float* w, float eps, float* h, int64_t ld_h, cudaStream_t stream);

}  // namespace ft::cuda
