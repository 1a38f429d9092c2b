// The dense expert kernels: the portable path equals ft::dot on the fp32 weights bit for bit, the
// AVX2 path stays within FMA rounding of it, and neither depends on how many tokens share a call.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu-expert-worker/dense_kernel.h"
#include "shared/core/half.h"
#include "shared/ops/linear.h"

using namespace ft;
using namespace ft::cew;

namespace {

struct Weights {
  DenseType type;
  int64_t rows, in;
  std::vector<uint8_t> raw;
  std::vector<float> f32;  // the same values in fp32
  Weights(DenseType t, int64_t r, int64_t i, uint32_t seed) : type(t), rows(r), in(i) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 0.5f);
    f32.resize(static_cast<size_t>(r * i));
    raw.resize(f32.size() * (t == DenseType::F32 ? 4 : 2));
    for (size_t k = 0; k < f32.size(); ++k) {
      const float v = nd(rng);
      if (t == DenseType::F32) {
        f32[k] = v;
        std::memcpy(raw.data() + 4 * k, &v, 4);
      } else {
        const uint16_t h = t == DenseType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
        f32[k] = t == DenseType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
        std::memcpy(raw.data() + 2 * k, &h, 2);
      }
    }
  }
};

std::vector<float> inputs(int n, int64_t xs, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> x(static_cast<size_t>(n * xs));
  for (float& v : x) v = nd(rng);
  return x;
}

const char* name(DenseType t) { return t == DenseType::F32 ? "f32" : t == DenseType::BF16 ? "bf16" : "f16"; }

}  // namespace

TEST(DenseKernel, ScalarEqualsDotBitForBit) {
  for (DenseType t : {DenseType::F32, DenseType::BF16, DenseType::F16})
    for (int64_t in : {1, 7, 8, 13, 64, 100}) {
      Weights w(t, 9, in, static_cast<uint32_t>(in));
      const int n = 5;
      const int64_t xs = in + 3, ys = 11;
      const auto x = inputs(n, xs, 3);
      std::vector<float> y(static_cast<size_t>(n * ys), -1.0f);
      dense_rows(DenseSimd::Scalar, t, w.raw.data(), in, 1, 7, x.data(), xs, n, y.data(), ys);
      for (int tk = 0; tk < n; ++tk)
        for (int r = 0; r < 7; ++r) {
          const float want = dot(w.f32.data() + (r + 1) * in, x.data() + tk * xs, in);
          ASSERT_EQ(y[tk * ys + r], want) << name(t) << " in=" << in << " token " << tk << " row " << r;
        }
    }
}

TEST(DenseKernel, Avx2MatchesScalarAndIsBatchInvariant) {
  if (!dense_simd_supported(DenseSimd::Avx2)) GTEST_SKIP() << "no AVX2/FMA/F16C on this CPU";
  for (DenseType t : {DenseType::F32, DenseType::BF16, DenseType::F16})
    for (int64_t in : {5, 8, 37, 64, 256}) {
      const int64_t rows = 11;
      Weights w(t, rows, in, static_cast<uint32_t>(in * 3));
      for (int n : {1, 2, 3, 4, 5, 8, 9}) {
        const int64_t xs = in + 1, ys = rows + 2;
        const auto x = inputs(n, xs, static_cast<uint32_t>(n));
        std::vector<float> fast(static_cast<size_t>(n * ys)), ref(fast.size());
        dense_rows(DenseSimd::Avx2, t, w.raw.data(), in, 0, rows, x.data(), xs, n, fast.data(), ys);
        dense_rows(DenseSimd::Scalar, t, w.raw.data(), in, 0, rows, x.data(), xs, n, ref.data(), ys);
        for (int tk = 0; tk < n; ++tk) {
          // Alone, the token must get the very same bits.
          std::vector<float> alone(static_cast<size_t>(ys));
          dense_rows(DenseSimd::Avx2, t, w.raw.data(), in, 0, rows, x.data() + tk * xs, xs, 1, alone.data(), ys);
          for (int64_t r = 0; r < rows; ++r) {
            double mag = 0;
            for (int64_t i = 0; i < in; ++i) mag += std::fabs(double(w.f32[r * in + i]) * x[tk * xs + i]);
            EXPECT_NEAR(fast[tk * ys + r], ref[tk * ys + r], 1e-6 * mag + 1e-30)
                << name(t) << " in=" << in << " n=" << n << " token " << tk << " row " << r;
            EXPECT_EQ(fast[tk * ys + r], alone[r]) << name(t) << " in=" << in << " n=" << n << " token " << tk;
          }
        }
      }
    }
}
