#pragma once
// What every GPU test uses: a fixture that skips without a CUDA device, device buffers that
// poison their contents (an unwritten output never passes), uploads/downloads, seeded random
// inputs and the comparisons the kernels are judged by (rel L2 against the fp32 reference,
// bit equality for batch invariance).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "tests/support/test_paths.h"

namespace ft::test {

// True when a CUDA device is usable (checked once).
bool have_gpu();

// Base fixture: SetUp skips the test without a GPU and resets the device's error state.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  }
  void sync() { FT_CUDA_CHECK(cudaDeviceSynchronize()); }
};

// Device buffer for tests (not budgeted). New buffers are filled with 0xFF bytes (NaN for floats).
template <class T>
class DevBuf {
 public:
  DevBuf() = default;
  explicit DevBuf(size_t n) : n_(n) {
    FT_CUDA_CHECK(cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T)));
    poison();
  }
  explicit DevBuf(const std::vector<T>& h) : DevBuf(h.size()) { upload(h); }
  ~DevBuf() {
    if (p_) cudaFree(p_);
  }
  DevBuf(DevBuf&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  DevBuf& operator=(DevBuf&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  void poison() { FT_CUDA_CHECK(cudaMemset(p_, 0xFF, std::max<size_t>(n_, 1) * sizeof(T))); }
  void upload(const std::vector<T>& h) {
    FT_CUDA_CHECK(cudaMemcpy(p_, h.data(), std::min(h.size(), n_) * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    FT_CUDA_CHECK(cudaDeviceSynchronize());
    FT_CUDA_CHECK(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// Seeded normal(0, sd) values (fresh inputs per test; the seed keeps failures reproducible).
inline std::vector<float> randn(size_t n, uint64_t seed, float sd = 1.0f, float mean = 0.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(mean, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}
inline std::vector<float> randu(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// ‖a − b‖ / ‖b‖ in double; +inf when a holds NaN/inf (so an unwritten or broken output fails).
inline double rel_l2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  return rel_l2(a.data(), b.data(), std::min(a.size(), b.size()));
}
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return m;
}

// Number of elements whose bits differ (batch invariance is bit equality, NaN patterns included).
template <class T>
size_t bit_mismatches(const T* a, const T* b, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += std::memcmp(a + i, b + i, sizeof(T)) != 0;
  return bad;
}

// Where two row-major logit traces of `row`-wide rows first part, for a failure message: the
// first differing row (a trace's step), how many rows differ, and the largest difference.
inline std::string where_they_part(const std::vector<float>& a, const std::vector<float>& b, size_t row) {
  if (a.size() != b.size()) return "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  size_t first = a.size(), rows = 0;
  double worst = 0;
  for (size_t r = 0; r * row < a.size(); ++r) {
    const size_t n = std::min(row, a.size() - r * row);
    if (bit_mismatches(a.data() + r * row, b.data() + r * row, n) == 0) continue;
    first = std::min(first, r);
    ++rows;
    for (size_t i = r * row; i < r * row + n; ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  }
  if (rows == 0) return "bit-identical";
  return "first differing row " + std::to_string(first) + " of " + std::to_string(a.size() / row) + ", " +
         std::to_string(rows) + " rows differ, max |diff| " + std::to_string(worst);
}

}  // namespace ft::test
