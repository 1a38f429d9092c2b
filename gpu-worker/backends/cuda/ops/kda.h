#pragma once
// Kimi Delta Attention on the GPU (spec §4, §6.2–6.3): the twin of shared/ops/kda.h and of the
// sequence-mixing part of ReferenceEngine::kda_layer. The engine runs the projections (z = W_qkv·a,
// r = W_fb·W_fa·a without dt_bias, beta logits W_b·a, gate logits W_gb·W_ga·a) and the output
// projection; everything between is here, in the reference's order:
//
//   kda_conv_prefill / kda_conv_decode     short_conv_step over the 3Q channels of z      (kda.cu)
//   kda_prepare                            forget gate g, β = σ(logit), L2-normalised q/k  (kda.cu)
//   kda_decode_step                        kda_step for B rows, one token each           (kda.cu)
//   kda_chunked_prefill                    kda_step over n tokens of one sequence, chunked (kda_chunk*.cu)
//   kda_gated_norm                         rms_norm(o_h)·o_norm_w·σ(gate)                (kda_gated_norm.cu)
//
// Layouts (fp32 everywhere; "ld" = floats between consecutive rows):
//   z / qkv   [rows][3Q]: q (channels 0…Q−1), k (Q…2Q−1), v (2Q…3Q−1), head-major inside each part
//   r, g      [rows][Q];  beta logits, beta [rows][H];  o, gate, y [rows][Q]
//   recurrent state, per KDA layer: [slots][H][dl][dl], S[d][j] with row d = key channel, column
//             j = value channel (shared/ops kda_step's S[d·dv + j]); a prefill call gets its
//             sequence's [H][dl][dl] block
//   conv window, per KDA layer: [slots][K−1][C] raw pre-conv inputs, oldest first
//             (shared/engine/state.h KdaState); a prefill call gets its sequence's [K−1][C] block
//
// Decode functions take `slots` (device int32, one per row); a row whose slot is negative is
// skipped (nothing read or written for it), so a graph captured for B rows serves fewer. Rows of
// one call must have distinct slots.
//
// Batch invariance: every output element of a decode row is computed by a fixed sequence of fp32
// operations on that row's inputs and its slot's state, whatever the number of rows, their order or
// the grid. A prefill call's bits depend only on (t0, n, inputs, state): chunks are aligned to
// absolute positions (multiples of 64), so a prompt fed in one call or in calls whose boundaries
// are multiples of 64 gives the same outputs and final state bit for bit.
//
// No function allocates, synchronises or reads device memory from the host (graph-capturable).
// Shape errors throw ft::Error before anything is launched.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <optional>

namespace ft::cuda {

// Head sizes kda_chunked_prefill runs (the per-token kernels also run 8; a prefill of such a
// model steps token by token through kda_decode_step).
inline bool kda_chunked_head_dim(int64_t d) { return d == 16 || d == 32 || d == 64 || d == 128; }

struct KdaShape {
  int64_t heads = 0;                                  // Hl
  int64_t head_dim = 0;                               // dl, the key and value size of a head: 8 (per-token
                                                      // kernels only), 16, 32, 64 or 128
  int64_t width() const { return heads * head_dim; }  // Q
};

// ---- 1. Causal depthwise short convolution (spec §4.2), C channels, K ∈ [1, 8] taps.
// out[t][c] = silu(w[c][K−1]·z_t[c] + Σ_{j<K−1} w[c][j]·z_{t−K+1+j}[c]), inputs before the call
// taken from the window; afterwards the window holds the last K−1 raw inputs.

// One sequence, n tokens (n ≥ 0). window: [K−1][C] in/out; w: [C][K]; out must not overlap z.
void kda_conv_prefill(float* window, const float* z, int64_t ld_z, int64_t n, const float* w, int64_t channels,
                      int64_t kernel, float* out, int64_t ld_out, cudaStream_t stream);

// B rows, one token each: row b uses window_pool + slots[b]·(K−1)·C. out may equal z (same ld).
void kda_conv_decode(float* window_pool, const int32_t* slots, const float* z, int64_t ld_z, int64_t rows,
                     const float* w, int64_t channels, int64_t kernel, float* out, int64_t ld_out, cudaStream_t stream);

// ---- 2. Gates and q/k preparation (spec §4.3–4.5), rows independent, fp32:
//   g[t][h·dl+d] = λ·σ(α_h·x) with a lower bound λ, else −α_h·softplus(x); x = r + dt_bias, α_h = exp(A_log[h])
//   beta[t][h]   = σ(beta_logits[t][h])
//   q_h ← (q_h / √(Σq_h² + 1e-6)) / √dl;  k_h ← k_h / √(Σk_h² + 1e-6)   (in place in qkv; v untouched)
// g may equal r (same ld); beta may equal beta_logits (same ld).
void kda_prepare(float* qkv, int64_t ld_qkv, const float* r, int64_t ld_r, const float* beta_logits,
                 int64_t ld_beta_logits, int64_t rows, const float* dt_bias, const float* a_log,
                 std::optional<float> lower_bound, const KdaShape& shape, float* g, int64_t ld_g, float* beta,
                 int64_t ld_beta, cudaStream_t stream);

// ---- 3a. Decode: one recurrence step (spec §4.6) for B rows from prepared qkv, g, beta.
// state_pool [slots][H][dl][dl] is updated in place; o[b][h·dl+j] = (S_new_hᵀ q_h)[j].
// Requirements: ld_qkv, ld_g, ld_o multiples of 4; qkv, g, o, state_pool 16-byte aligned.
void kda_decode_step(float* state_pool, const int32_t* slots, const float* qkv, int64_t ld_qkv, const float* g,
                     int64_t ld_g, const float* beta, int64_t ld_beta, int64_t rows, const KdaShape& shape, float* o,
                     int64_t ld_o, cudaStream_t stream);

// ---- 3b. Prefill: n tokens (absolute positions t0 … t0+n−1) of one sequence through the
// recurrence from `state` ([H][dl][dl], updated in place to the state after the last token), in
// chunks of 64 aligned to absolute positions (the WY/UT form of spec §4.7, fp32 throughout).
// Equals the token loop of kda_step up to fp32 rounding.
//
// Inputs come prepared (kda_prepare). qkv and g are CLOBBERED (they hold the chunk quantities
// Q', K̃, U and W afterwards); beta is read only. o [n][Q] receives the outputs.
// workspace: kda_chunked_prefill_workspace_bytes(t0, n, shape) bytes, 16-byte aligned.
// Requirements: ld_qkv, ld_g, ld_o multiples of 4; qkv, g, o, state 16-byte aligned; qkv, g, o,
// beta, state and workspace pairwise disjoint. n = 0 does nothing.
size_t kda_chunked_prefill_workspace_bytes(int64_t t0, int64_t n, const KdaShape& shape);
// Whether the chunked prefill's decay factors use the approximate exponential (ex2.approx:
// fewer instructions, ~2 ulp + |x|·2^−24) instead of IEEE expf: FLASHTIER_KDA_FAST_EXP=on (auto:
// off until measured); set_kda_fast_exp for tests and A/B (0 off, 1 auto, 2 on).
bool kda_fast_exp();
void set_kda_fast_exp(int policy);
void kda_chunked_prefill(float* state, int64_t t0, int64_t n, float* qkv, int64_t ld_qkv, float* g, int64_t ld_g,
                         const float* beta, int64_t ld_beta, const KdaShape& shape, float* o, int64_t ld_o,
                         void* workspace, cudaStream_t stream);

// The chunking of a prefill call: chunk 0 is local rows [0, first), chunk c ≥ 1 is
// [first + 64(c−1), min(n, first + 64c)), first = min(n, 64 − t0 mod 64).
constexpr int64_t kKdaChunk = 64;
struct KdaChunking {
  int64_t first = 0, count = 0;
};
KdaChunking kda_chunking(int64_t t0, int64_t n);

// ---- 4. Gated output norm (spec §4.8), per row and head, fp32:
//   y[t][h·dl+d] = o[t][h·dl+d] / √(mean_d(o_h²) + eps) · norm_w[d] · σ(gate[t][h·dl+d])
// norm_w: [dl]. y may equal o (same ld).
void kda_gated_norm(const float* o, int64_t ld_o, const float* gate, int64_t ld_gate, const float* norm_w, int64_t rows,
                    const KdaShape& shape, float eps, float* y, int64_t ld_y, cudaStream_t stream);

}  // namespace ft::cuda
