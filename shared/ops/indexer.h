#pragma once
// DSA indexer with k-pools (spec §5.3–5.5): past tokens are grouped into pools of κ consecutive
// tokens, each pool summarised by a softmax-gated key; a query scores the complete pools it can
// see and attends to the best Bp pools plus the incomplete tail pool.
#include <cstdint>
#include <vector>

namespace ft {

// Key of one complete pool from its κ tokens' indexer keys kI and gate logits gI (both [κ, ID],
// consecutive tokens): per channel, softmax over slots of gI + ape, then the weighted sum of kI.
void indexer_pool_key(const float* kI, const float* gI, const float* ape, int64_t kpool, int64_t dim, float* pk);

// Score of each pool for one query: Σ_h ω[h]·relu(qI_h·PK_p / sqrt(ID)).
// qI [IH, ID], omega [IH], pool_keys [P, ID] → scores [P].
void indexer_pool_scores(const float* qI, const float* omega, const float* pool_keys, int64_t n_pools, int64_t heads,
                         int64_t dim, float* scores);

// Token positions query τ attends to, ascending. `pool_scores` has one entry per pool the query
// can see (⌊(τ+1)/κ⌋ of them); it is not read when they all fit in the budget. With `tail` the
// tokens of the current incomplete pool (up to τ) are added.
std::vector<int32_t> select_tokens(const float* pool_scores, int64_t tau, int64_t kpool, int64_t pool_budget,
                                   bool tail);

}  // namespace ft
