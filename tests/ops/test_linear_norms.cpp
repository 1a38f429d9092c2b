// Projections and normalisations on hand-checkable inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "shared/ops/linear.h"
#include "shared/ops/norms.h"

using namespace ft;

TEST(Linear, DotHandlesRemaindersExactly) {
  std::vector<float> a(19), b(19);
  for (int i = 0; i < 19; ++i) {
    a[i] = static_cast<float>(i + 1);
    b[i] = 1.0f;
  }
  EXPECT_EQ(dot(a.data(), b.data(), 19), 190.0f);  // 1 + … + 19, exact in fp32
  const float x[3] = {1, 2, 3}, y[3] = {4, 5, 6};
  EXPECT_EQ(dot(x, y, 3), 32.0f);
  EXPECT_EQ(dot(x, y, 0), 0.0f);
}

TEST(Linear, MatvecWithBiasAndTransposed) {
  const float W[6] = {1, 2, 3, 4, 5, 6};  // [2, 3]
  const float b[2] = {0.5f, -1.0f};
  const float x[3] = {1, 0, -1};
  float y[2];
  matvec(W, b, 2, 3, x, y);
  EXPECT_EQ(y[0], -1.5f);  // 1 − 3 + 0.5
  EXPECT_EQ(y[1], -3.0f);  // 4 − 6 − 1
  const float X[6] = {1, 0, -1, 0, 1, 0};  // two rows
  float Y[4];
  matmul(W, nullptr, 2, 3, X, 2, Y);
  EXPECT_EQ(Y[0], -2.0f);
  EXPECT_EQ(Y[3], 5.0f);
  const float u[2] = {1, 2};
  float t[3];
  matvec_transposed(W, 2, 3, u, t);  // Wᵀ·u
  EXPECT_EQ(t[0], 9.0f);
  EXPECT_EQ(t[1], 12.0f);
  EXPECT_EQ(t[2], 15.0f);
}

TEST(Norms, RmsNormWeighted) {
  const float x[2] = {3, 4}, w[2] = {1, 2};
  float y[2];
  rms_norm(x, w, 2, 0.0f, y);  // rms = sqrt(12.5)
  EXPECT_NEAR(y[0], 3.0 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(y[1], 8.0 / std::sqrt(12.5), 1e-6);
  rms_norm(x, nullptr, 2, 12.5f, y);  // eps inside the root
  EXPECT_NEAR(y[0], 3.0 / 5.0, 1e-6);
}

TEST(Norms, LayerNormBiasedVariance) {
  const float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 2}, b[4] = {0, 1, 0, 1};
  float y[4];
  layer_norm(x, w, b, 4, 0.0f, y);  // mean 2.5, variance 1.25
  const double s = std::sqrt(1.25);
  EXPECT_NEAR(y[0], -1.5 / s, 1e-6);
  EXPECT_NEAR(y[1], -0.5 / s + 1, 1e-6);
  EXPECT_NEAR(y[2], 2 * 0.5 / s, 1e-6);
  EXPECT_NEAR(y[3], 2 * 1.5 / s + 1, 1e-6);
}

TEST(Norms, L2NormalizeEpsInsideRoot) {
  float v[2] = {3, 4};
  l2_normalize(v, 2, 0.0f);
  EXPECT_NEAR(v[0], 0.6f, 1e-7);
  EXPECT_NEAR(v[1], 0.8f, 1e-7);
  float z[2] = {0, 0};
  l2_normalize(z, 2, 1e-6f);  // no division by zero
  EXPECT_EQ(z[0], 0.0f);
}
