#pragma once
// Multi-head latent attention without RoPE on the GPU, absorbed form — the twin of
// shared/ops/mla.h (mla_attend) and of the cache writes of ReferenceEngine::sparse_layer.
//
// The engine does every projection (q_abs[h] = W_kb,hᵀ·q_h and the value expansion are batched
// fp16 linears); these kernels write a step's new tokens into the sparse cache and attend in
// the latent space over each row's selection (indexer.h): the selected pools' κ tokens in
// ascending pool order, then the tail tokens nvis·κ … pos (when the config selects the tail).
//
// Batch invariance: a row's selection is cut into splits of kMlaSplitTokens tokens (the split
// count is a function of that row's own selection size only); each split's softmax partial is
// computed by one block in a fixed order and the partials are merged in ascending split order.
// Neither the number of rows, their order, nor the row passes a small workspace forces change
// a row's bits.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu-worker/backends/cuda/ops/sparse_cache.h"

namespace ft::cuda {

// Writes row r's normalised latent c (fp32 latent[r·ld_latent …], Rkv values) and, when the
// layer has its own indexer (cache.has_indexer()), its indexer key kI and gate logits gI (fp32,
// ID values at key[r·ld_index …] / gate[r·ld_index …]) into the cache at (slot[r], pos[r]) as
// fp16 (round to nearest), or as they are in an fp32 cache. The block table must already cover
// pos[r].
void sparse_cache_append(const SparseCacheLayer& cache, const SparseCacheGeometry& g, const SparseTables& t,
                         const SparseRows& rows, const float* latent, int64_t ld_latent, const float* key,
                         const float* gate, int64_t ld_index, cudaStream_t stream);

// Row r's selection as a token list, in the order mla_attend (and the reference's
// select_tokens) walks it: the κ tokens of each selected pool, pools ascending, then the tail
// nvis·κ … pos when `tail`. `pools` is the row's sel_pools entry, `count` its sel_count.
__host__ __device__ inline int64_t mla_selection_size(int32_t pos, int32_t count, int kpool, bool tail) {
  const int64_t nvis = (static_cast<int64_t>(pos) + 1) / kpool;
  return static_cast<int64_t>(count) * kpool + (tail ? pos + 1 - nvis * kpool : 0);
}
__host__ __device__ inline int64_t mla_selected_token(const int32_t* pools, int32_t count, int32_t pos, int kpool,
                                                      int64_t i) {
  const int64_t in_pools = static_cast<int64_t>(count) * kpool;
  if (i < in_pools) return static_cast<int64_t>(pools[i / kpool]) * kpool + i % kpool;
  return (static_cast<int64_t>(pos) + 1) / kpool * kpool + (i - in_pools);
}

// Tokens per softmax split (a split is one block's work; partials merge in ascending order).
constexpr int kMlaSplitTokens = 256;

struct MlaAttendShape {
  int64_t heads = 0;        // NH
  int64_t latent = 0;       // Rkv (multiple of 8 up to 512 on the SIMT path; multiple of 32 on the mma path)
  int kpool = 1;            // κ
  int64_t pool_budget = 0;  // Bp: columns of sel_pools
  bool tail = true;         // index_kpool_always_select_tail
  float scale = 1.0f;       // dqk^−1/2
  // Largest selection a row can have: Bp·κ pool tokens + (κ − 1) tail tokens.
  int64_t max_selected() const { return pool_budget * kpool + (tail ? kpool - 1 : 0); }
  int64_t max_splits() const { return (max_selected() + kMlaSplitTokens - 1) / kMlaSplitTokens; }
};

enum class MlaAttendPath : int {
  Simt,        // fp32 FMAs on the fp16 or fp32 cache (the exact one; the only one for an fp32 cache)
  TensorCore,  // mma.sync m16n8k16: q_abs as fp16 with a power-of-two scale per (row, head), p as fp16
};

// Workspace of mla_attend for `rows` rows per pass (bytes). Any size of at least
// mla_attend_workspace_bytes(1, s) works: mla_attend then runs ⌈n / rows_per_pass⌉ passes.
size_t mla_attend_workspace_bytes(int64_t rows, const MlaAttendShape& s);

// ctx[r][h] = Σ_i softmax_i(q_abs[r][h]·c_{s_i}·scale)·c_{s_i} over row r's selection (fp32
// softmax; exactly zero when the selection is empty, spec §10 item 13). q_abs, ctx: fp32
// [n][NH][Rkv] contiguous. sel_pools [n][Bp] (ascending ids) and sel_count [n] as written by
// indexer_select (or handed on from the previous layer on shared-indexer layers).
void mla_attend(const MlaAttendShape& s, const SparseCacheLayer& cache, const SparseCacheGeometry& g,
                const SparseTables& t, const SparseRows& rows, const int32_t* sel_pools, const int32_t* sel_count,
                const float* q_abs, float* ctx, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                MlaAttendPath path = MlaAttendPath::TensorCore);

}  // namespace ft::cuda
