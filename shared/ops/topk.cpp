#include "shared/ops/topk.h"

#include <algorithm>
#include <numeric>

namespace ft {

std::vector<int32_t> topk_indices(const float* scores, int64_t n, int64_t k) {
  k = std::min(k, n);
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  auto better = [scores](int32_t a, int32_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
  idx.resize(static_cast<size_t>(k));
  return idx;
}

}  // namespace ft
