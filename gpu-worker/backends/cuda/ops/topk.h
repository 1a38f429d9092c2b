#pragma once
// Device top-k with the project-wide tie rule (equal scores: the lower index wins) — the twin of
// shared/ops/topk.h, shaped for the indexer: per row a prefix of candidates whose length follows
// from the row's position, and the winners written as ascending ids.
#include <cuda_runtime.h>

#include <cstdint>

namespace ft::cuda {

// Row r has nvis = ⌊(pos[r]+1)/kpool⌋ candidates scores[r·ld + 0 … nvis). If nvis ≤ k:
// ids 0 … nvis−1 (scores not read); otherwise the k largest scores (−0 equals +0; NaN ranks
// below everything; ties → lower id), written in ascending id order. ids [rows][k] (−1 past
// the count), count [rows]. Exact for any nvis (radix select on the 32-bit order key, one block
// per row, no atomics whose order matters).
void topk_pool_ids(const float* scores, int64_t ld, const int32_t* pos, int64_t rows, int kpool, int64_t k,
                   int32_t* ids, int32_t* count, cudaStream_t stream);

}  // namespace ft::cuda
