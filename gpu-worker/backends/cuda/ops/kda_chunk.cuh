#pragma once
// The chunked prefill of the KDA recurrence (spec §4.7), split in two kernels:
//
//   kda_chunk_intra.cu  one block per (chunk, head), all chunks at once: everything that does not
//                       depend on the incoming state.
//   kda_chunk_scan.cu   one block per (head, 32 value columns), chunks in order: the state.
//
// Per head and chunk (local rows r, s ∈ [0, 64), rows past the chunk's length are zero; Γ_r = Σ_{u≤r} g_u):
//   A[r][s] = β_r Σ_d k_r[d] k_s[d] e^{Γ_r[d]−Γ_s[d]}  (s < r),  M[r][s] = Σ_d q_r[d] k_s[d] e^{Γ_r[d]−Γ_s[d]}  (s ≤ r)
//   U = (I+A)⁻¹ (β ⊙ V),  W = (I+A)⁻¹ (β ⊙ K ⊙ e^Γ)            (so that V' = U − W·S is the δ of every token)
//   Q' = (Q ⊙ e^Γ) − M·W,  P = M·U                              (so that O = Q'·S + P)
//   K̃_s = k_s ⊙ e^{Γ_L−Γ_s},  D = e^{Γ_L}                      (so that S ← D ⊙ S + K̃ᵀ·V')
// The intra kernel writes Q' over q, K̃ over k, U over v (in qkv), W over g, P into o and D into
// the workspace; the scan kernel reads them and overwrites P with O.
//
// Every decay factor is e^x of a sum x ≤ 0 of consecutive g's, formed by adding exactly those g's
// (never Γ_r − Γ_s of two long prefixes, whose rounding error grows with |Γ|, never e^{Γ_r}·e^{−Γ_s},
// which overflows): its error is relative to |x| and it underflows only where the true value does.
#include <cuda_runtime.h>

#include <cstdint>

namespace ft::cuda::kda_detail {

constexpr int kChunk = 64;  // = kKdaChunk
constexpr int kSub = 16;    // sub-blocks of a chunk in the intra kernel
constexpr int kNumSub = kChunk / kSub;

struct ChunkArgs {
  float* qkv = nullptr;  // [n][ld_qkv]: q | k | v
  int64_t ld_qkv = 0;
  float* g = nullptr;
  int64_t ld_g = 0;
  const float* beta = nullptr;
  int64_t ld_beta = 0;
  float* o = nullptr;
  int64_t ld_o = 0;
  float* state = nullptr;  // [H][dl][dl]
  float* decay = nullptr;  // workspace: D per chunk, [chunks][H][dl]
  int64_t heads = 0, n = 0, first = 0, chunks = 0;
};

// Local rows of chunk c: [row0, row0 + len).
__device__ __forceinline__ void chunk_rows(const ChunkArgs& a, int64_t c, int64_t& row0, int& len) {
  row0 = c == 0 ? 0 : a.first + (c - 1) * kChunk;
  const int64_t cap = c == 0 ? a.first : kChunk;
  len = static_cast<int>(a.n - row0 < cap ? a.n - row0 : cap);
}

void launch_chunk_intra(const ChunkArgs& a, int64_t head_dim, cudaStream_t stream);
void launch_chunk_scan(const ChunkArgs& a, int64_t head_dim, cudaStream_t stream);

}  // namespace ft::cuda::kda_detail
