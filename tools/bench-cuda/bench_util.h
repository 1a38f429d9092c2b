#pragma once
// Small helpers the GPU benchmarks share: list flags ("1,2,4,8", "a,b") and the median of timings.
#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace ft::cuda::bench {

// "1,2,4,8" → {1, 2, 4, 8}; std::stoll throws for a bad element.
inline std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) v.push_back(std::stoll(x));
  return v;
}

// The largest element, or `empty` for an empty list ("--prefill ''" measures no prefill).
inline int64_t max_or(const std::vector<int64_t>& v, int64_t empty) {
  return v.empty() ? empty : *std::max_element(v.begin(), v.end());
}

// "a,b,,c" → {"a", "b", "c"} (empty elements dropped; "" → {}).
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    const size_t j = std::min(s.find(',', i), s.size());
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

// The upper median (0 for no samples).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace ft::cuda::bench
