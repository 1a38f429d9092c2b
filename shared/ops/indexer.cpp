#include "shared/ops/indexer.h"

#include <algorithm>
#include <cmath>

#include "shared/ops/linear.h"
#include "shared/ops/topk.h"

namespace ft {

void indexer_pool_key(const float* kI, const float* gI, const float* ape, int64_t kpool, int64_t dim, float* pk) {
  for (int64_t c = 0; c < dim; ++c) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < kpool; ++j) mx = std::max(mx, gI[j * dim + c] + ape[j * dim + c]);
    float den = 0.0f, num = 0.0f;
    for (int64_t j = 0; j < kpool; ++j) {
      const float e = std::exp(gI[j * dim + c] + ape[j * dim + c] - mx);
      den += e;
      num += e * kI[j * dim + c];
    }
    pk[c] = num / den;
  }
}

void indexer_pool_scores(const float* qI, const float* omega, const float* pool_keys, int64_t n_pools, int64_t heads,
                         int64_t dim, float* scores) {
  const float inv = 1.0f / std::sqrt(static_cast<float>(dim));
  for (int64_t p = 0; p < n_pools; ++p) {
    float s = 0.0f;
    for (int64_t h = 0; h < heads; ++h) s += omega[h] * std::max(dot(qI + h * dim, pool_keys + p * dim, dim) * inv, 0.0f);
    scores[p] = s;
  }
}

std::vector<int32_t> select_tokens(const float* pool_scores, int64_t tau, int64_t kpool, int64_t pool_budget,
                                   bool tail) {
  const int64_t nvis = (tau + 1) / kpool;
  std::vector<int32_t> pools;
  if (nvis <= pool_budget) {
    for (int64_t p = 0; p < nvis; ++p) pools.push_back(static_cast<int32_t>(p));
  } else {
    pools = topk_indices(pool_scores, nvis, pool_budget);
    std::sort(pools.begin(), pools.end());
  }
  std::vector<int32_t> sel;
  sel.reserve(static_cast<size_t>(pools.size() * kpool + kpool));
  for (int32_t p : pools)
    for (int64_t j = 0; j < kpool; ++j) sel.push_back(static_cast<int32_t>(p * kpool + j));
  if (tail)
    for (int64_t s = nvis * kpool; s <= tau; ++s) sel.push_back(static_cast<int32_t>(s));
  return sel;
}

}  // namespace ft
