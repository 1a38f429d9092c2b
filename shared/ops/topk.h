#pragma once
// Top-k selection with the project-wide tie rule: equal scores break toward the lower index.
#include <cstdint>
#include <vector>

namespace ft {

// Indices of the k largest scores, ordered by descending score (ties: lower index first).
// k is clamped to n.
std::vector<int32_t> topk_indices(const float* scores, int64_t n, int64_t k);

}  // namespace ft
