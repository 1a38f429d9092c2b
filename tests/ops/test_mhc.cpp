// Hyper-connection site: Sinkhorn projection, the pre/post/comb mapping, collapse and expand.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "shared/ops/activations.h"
#include "shared/ops/mhc.h"

using namespace ft;

TEST(Sinkhorn, OneIterationIsSoftmaxThenColumnStep) {
  float Z[4] = {0.0f, std::log(3.0f), 0.0f, 0.0f};  // rows softmax to [1/4, 3/4] and [1/2, 1/2]
  sinkhorn(Z, 2, 0.0f, 1);
  EXPECT_NEAR(Z[0], 1.0 / 3.0, 1e-6);  // column 0 sums to 3/4
  EXPECT_NEAR(Z[2], 2.0 / 3.0, 1e-6);
  EXPECT_NEAR(Z[1], 0.6, 1e-6);  // column 1 sums to 5/4
  EXPECT_NEAR(Z[3], 0.4, 1e-6);
}

TEST(Sinkhorn, ConvergesToDoublyStochasticEndingOnColumns) {
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0, 1);
  std::vector<float> Z(16);
  for (float& z : Z) z = n(rng);
  sinkhorn(Z.data(), 4, 0.0f, 300);
  for (int j = 0; j < 4; ++j) {
    float c = 0, r = 0;
    for (int i = 0; i < 4; ++i) {
      c += Z[i * 4 + j];
      r += Z[j * 4 + i];
    }
    EXPECT_NEAR(c, 1.0f, 1e-6);
    EXPECT_NEAR(r, 1.0f, 1e-4);
  }
  // eps is added to every entry and every denominator
  float one[1] = {5.0f};
  sinkhorn(one, 1, 0.5f, 1);
  EXPECT_NEAR(one[0], 1.5 / 2.0, 1e-6);  // (1 + eps) / (1 + eps + eps)
}

TEST(MhcMix, MappingWithZeroProjectionComesFromTheBase) {
  const int64_t hc = 2, D = 3, nmix = (2 + hc) * hc;
  std::vector<float> fn(nmix * hc * D, 0.0f), base(nmix), X = {1, 2, 3, 4, 5, 6};
  for (int i = 0; i < nmix; ++i) base[i] = 0.1f * static_cast<float>(i);
  const float scale[3] = {1, 1, 1};
  const MhcParams p{fn.data(), base.data(), scale, hc, D, 1e-5f, 0.0f, 20};
  const MhcMix m = mhc_mix(p, X.data());
  EXPECT_NEAR(m.pre[1], sigmoid(0.1f), 1e-6);
  EXPECT_NEAR(m.post[0], 2 * sigmoid(0.2f), 1e-6);
  EXPECT_NEAR(m.post[1], 2 * sigmoid(0.3f), 1e-6);
  std::vector<float> Z(base.begin() + 4, base.end());
  sinkhorn(Z.data(), 2, 0.0f, 20);
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(m.comb[k], Z[k], 1e-6);
}

TEST(MhcMix, ProjectionSeesTheUnweightedNormOfAllStreams) {
  // One stream [3, 4]: normalised by sqrt(mean(9, 16)) = sqrt(12.5); fn's pre row picks channel 0.
  const std::vector<float> fn = {1, 0, 0, 1, 0, 0}, base = {0, 0, 0}, X = {3, 4};
  const float scale[3] = {2, 1, 1};
  const MhcParams p{fn.data(), base.data(), scale, 1, 2, 0.0f, 1e-6f, 20};
  const MhcMix m = mhc_mix(p, X.data());
  EXPECT_NEAR(m.pre[0], sigmoid(2.0f * 3.0f / std::sqrt(12.5f)) + 1e-6f, 1e-6);
  EXPECT_NEAR(m.post[0], 2 * sigmoid(4.0f / std::sqrt(12.5f)), 1e-6);
}

TEST(MhcMix, CollapseAndExpand) {
  MhcMix m;
  m.pre = {0.5f, 2.0f};
  m.post = {1.0f, -1.0f};
  m.comb = {0.25f, 0.75f, 0.5f, 0.5f};  // M[0][1] = 0.75, M[1][0] = 0.5
  std::vector<float> X = {1, 2, 10, 20};  // streams [1, 2] and [10, 20]
  float y[2];
  mhc_collapse(m, X.data(), 2, 2, y);
  EXPECT_EQ(y[0], 20.5f);
  EXPECT_EQ(y[1], 41.0f);
  const float o[2] = {100, 200};
  mhc_expand(m, o, 2, 2, X.data());
  EXPECT_EQ(X[0], 100 + 0.25f * 1 + 0.5f * 10);   // stream 0 = post0·o + M[0][0]·X0 + M[1][0]·X1
  EXPECT_EQ(X[3], -200 + 0.75f * 2 + 0.5f * 20);  // stream 1, channel 1
}
