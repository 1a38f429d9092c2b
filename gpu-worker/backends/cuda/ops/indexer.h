#pragma once
// DSA indexer with k-pools on the GPU — the twin of shared/ops/indexer.h: the keys of pools the
// step completes (indexer_pool_key), the pool scores of every query row (indexer_pool_scores)
// and the per-row choice of pools (select_tokens, with the top-k of ops/topk.h).
//
// A row's selection is written as pool ids (the tail tokens nvis·κ … pos are implied by pos):
//   sel_pools [n][Bp] int32, ascending ids, −1 past the count; sel_count [n] int32.
// nvis = ⌊(pos+1)/κ⌋ pools are visible; nvis ≤ Bp gives all of them (no scores are read),
// otherwise the Bp best by score, ties to the lower pool id (the project-wide rule).
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu-worker/backends/cuda/ops/sparse_cache.h"

namespace ft::cuda {

// For every row whose position completes a pool ((pos+1) % κ == 0): the key of pool
// (pos+1)/κ − 1 from the cached kI/gI of its κ tokens and ape (device fp32 [κ][ID]): per channel
// a softmax over the slots of gI + ape (fp32), then the weighted sum of kI. Run it after
// sparse_cache_append of every row of the step (a chunk's rows complete pools from each other's
// tokens). Rows that complete no pool do nothing.
void indexer_pool_keys(const SparseCacheLayer& cache, const SparseCacheGeometry& g, const SparseTables& t,
                       const SparseRows& rows, const float* ape, cudaStream_t stream);

struct IndexerShape {
  int64_t heads = 0;        // IH
  int64_t dim = 0;          // ID (multiple of 8)
  int kpool = 1;            // κ
  int64_t pool_budget = 0;  // Bp
  int64_t max_pools = 0;    // upper bound of nvis over the rows of a call (≤ max_blocks_per_seq·64)
};

// scores[r][p] = Σ_h ω[r][h]·relu(qI[r][h]·PK_p / √ID) for p < nvis(r), fp32, heads summed in
// ascending order; rows with nvis ≤ Bp are skipped (their scores are never read). qI rows are
// ld_qI floats apart ([IH][ID] each), ω rows ld_omega. scores rows are ld_scores floats apart.
void indexer_pool_scores(const IndexerShape& s, const SparseCacheLayer& cache, const SparseTables& t,
                         const SparseRows& rows, const float* qI, int64_t ld_qI, const float* omega,
                         int64_t ld_omega, float* scores, int64_t ld_scores, cudaStream_t stream);

// Workspace of indexer_select for `rows` rows per pass (bytes): one row of scores per row.
// Any size of at least indexer_select_workspace_bytes(1, s) works (more passes).
size_t indexer_select_workspace_bytes(int64_t rows, const IndexerShape& s);

// indexer_pool_scores then topk_pool_ids, in passes of as many rows as the workspace holds.
void indexer_select(const IndexerShape& s, const SparseCacheLayer& cache, const SparseTables& t,
                    const SparseRows& rows, const float* qI, int64_t ld_qI, const float* omega, int64_t ld_omega,
                    int32_t* sel_pools, int32_t* sel_count, void* workspace, size_t workspace_bytes,
                    cudaStream_t stream);

}  // namespace ft::cuda
