#include "shared/sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ft {

TokenLogprobs token_logprobs(std::span<const float> x, int32_t chosen, int32_t n_top) {
  const int32_t V = static_cast<int32_t>(x.size());
  double mx = x[0];
  for (float v : x) mx = std::max(mx, static_cast<double>(v));
  double sum = 0.0;
  for (float v : x) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(sum);
  TokenLogprobs r;
  r.chosen = static_cast<float>(static_cast<double>(x[chosen]) - lse);
  n_top = std::clamp(n_top, 0, V);
  if (n_top > 0) {
    std::vector<int32_t> idx(V);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + n_top, idx.end(),
                      [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
    for (int32_t i = 0; i < n_top; ++i)
      r.top.emplace_back(idx[i], static_cast<float>(static_cast<double>(x[idx[i]]) - lse));
  }
  return r;
}

}  // namespace ft
