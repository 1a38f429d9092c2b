#pragma once
// Diagnosing comparisons for the per-token kernel tests (norms, mHC, router, SwiGLU, embed): a
// failure names the case, the row, the worst element with its expected and actual values, so one
// GPU run says what broke. Everything EXPECTs (one run reports every failing case).
#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/cuda/support/gpu_test.h"

namespace ft::test::misc {

inline uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

inline std::string fmt(const char* f, double a, double b) {
  char buf[160];
  std::snprintf(buf, sizeof buf, f, a, b);
  return buf;
}

// Row-wise rel L2 of got vs want ([rows, n], rows ld floats apart in both). Fails when any row
// exceeds tol, reporting up to 4 rows with their worst element. Returns the worst row's value.
inline double expect_rows_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                                int64_t rows, int64_t n, int64_t ld, double tol) {
  double worst = 0;
  int reported = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = got.data() + r * ld;
    const float* w = want.data() + r * ld;
    const double rel = rel_l2(g, w, static_cast<size_t>(n));
    worst = std::max(worst, rel);
    if (!(rel <= tol) && reported < 4) {
      ++reported;
      int64_t at = 0;
      double big = -1;
      for (int64_t i = 0; i < n; ++i) {
        const double d = std::isfinite(g[i]) ? std::fabs(static_cast<double>(g[i]) - w[i]) : INFINITY;
        if (d > big) big = d, at = i;
      }
      ADD_FAILURE() << what << ": row " << r << " of " << rows << " (width " << n << ") rel_l2 " << rel << " > " << tol
                    << "; worst element " << at << ": expected " << w[at] << " got " << g[at]
                    << fmt(" (|diff| %.3g, first element expected %.9g)", big, w[0]);
    }
  }
  return worst;
}

// Bit equality of two arrays; reports the count and the first mismatch.
template <class T>
void expect_same_bits(const std::string& what, const T* a, const T* b, size_t n) {
  const size_t bad = bit_mismatches(a, b, n);
  if (bad == 0) return;
  size_t i = 0;
  while (i < n && std::memcmp(a + i, b + i, sizeof(T)) == 0) ++i;
  ADD_FAILURE() << what << ": " << bad << " of " << n << " elements differ in bits; first at " << i << ": "
                << static_cast<double>(a[i]) << " vs " << static_cast<double>(b[i]);
}
template <class T>
void expect_same_bits(const std::string& what, const std::vector<T>& a, const std::vector<T>& b) {
  EXPECT_EQ(a.size(), b.size()) << what;
  expect_same_bits(what, a.data(), b.data(), std::min(a.size(), b.size()));
}

// Number of elements whose bits equal the reference (how closely a kernel mirrors the reference's
// operations; informational).
inline size_t exact_count(const std::vector<float>& a, const std::vector<float>& b) {
  size_t same = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) same += bits(a[i]) == bits(b[i]);
  return same;
}

// A device copy of host data starting `offset` elements into its buffer (offset 1 misaligns every
// float4, so the kernels' scalar paths run); the rest of the buffer stays poisoned.
template <class T>
struct Shifted {
  DevBuf<T> buf;
  int64_t offset = 0;
  size_t n = 0;
  Shifted(size_t count, int64_t off) : buf(count + static_cast<size_t>(off)), offset(off), n(count) {}
  Shifted(const std::vector<T>& h, int64_t off) : Shifted(h.size(), off) {
    FT_CUDA_CHECK(cudaMemcpy(get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  T* get() const { return buf.get() + offset; }
  std::vector<T> download() const {
    const std::vector<T> all = buf.download();
    return std::vector<T>(all.begin() + offset, all.begin() + offset + static_cast<int64_t>(n));
  }
};

// Rows of [rows, n] whose scale varies over decades, as activations do between layers.
inline std::vector<float> scaled_rows(int64_t rows, int64_t n, uint64_t seed) {
  std::vector<float> x = randn(static_cast<size_t>(rows * n), seed);
  const std::vector<float> lg = randu(static_cast<size_t>(rows), seed ^ 0x5eed, -2.0f, 2.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) x[r * n + i] *= std::pow(10.0f, lg[r]);
  return x;
}

}  // namespace ft::test::misc
