// KDA pieces: causal short convolution, the forget gate in both variants, the recurrence.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "shared/ops/activations.h"
#include "shared/ops/kda.h"

using namespace ft;

TEST(ShortConv, LastTapMultipliesTheCurrentInput) {
  // one channel, K = 3: window holds inputs t−2 = 1 and t−1 = 2; current 4.
  std::vector<float> window = {1, 2};
  const float w[3] = {1, 2, 3}, z[1] = {4};
  float out[1];
  short_conv_step(window.data(), z, w, 1, 3, out);
  EXPECT_NEAR(out[0], silu(1 * 1 + 2 * 2 + 3 * 4), 1e-6);
  EXPECT_EQ(window, (std::vector<float>{2, 4}));
}

TEST(ShortConv, StartsFromZerosAndKeepsChannelsApart) {
  std::vector<float> window(2 * 2, 0.0f);  // K = 3, two channels
  const float w[6] = {1, 1, 1, 10, 10, 10};
  const float z1[2] = {1, 2}, z2[2] = {3, 4};
  float out[2];
  short_conv_step(window.data(), z1, w, 2, 3, out);
  EXPECT_NEAR(out[1], silu(20.0f), 1e-5);
  short_conv_step(window.data(), z2, w, 2, 3, out);
  EXPECT_NEAR(out[0], silu(4.0f), 1e-6);
  EXPECT_NEAR(out[1], silu(60.0f), 1e-4);
}

TEST(ForgetGate, LowerBoundAndSoftplusVariants) {
  const float r[4] = {0, 1, 30, -2};
  const float a_log[2] = {0, std::log(2.0f)};  // α = 1 and 2
  float g[4];
  kda_forget_gate(r, a_log, 2, 2, -5.0f, g);
  EXPECT_NEAR(g[0], -2.5f, 1e-6);
  EXPECT_NEAR(g[1], -5.0f * sigmoid(1.0f), 1e-6);
  EXPECT_NEAR(g[3], -5.0f * sigmoid(-4.0f), 1e-6);
  kda_forget_gate(r, a_log, 2, 2, std::nullopt, g);
  EXPECT_NEAR(g[0], -std::log(2.0f), 1e-6);
  EXPECT_NEAR(g[2], -2.0f * 30.0f, 1e-5);  // softplus is the identity above 20
  EXPECT_NEAR(g[3], -2.0f * std::log1p(std::exp(-2.0f)), 1e-6);
}

TEST(KdaStep, ScalarRecurrenceByHand) {
  float S[1] = {0};
  const float q[1] = {3}, k[1] = {1}, v[1] = {2};
  float o[1];
  const float g0[1] = {0};
  kda_step(S, q, k, v, g0, 0.5f, 1, 1, o);  // δ = 0.5·(2 − 0) = 1 → S = 1
  EXPECT_EQ(S[0], 1.0f);
  EXPECT_EQ(o[0], 3.0f);  // read after the write
  const float g1[1] = {std::log(0.5f)};
  kda_step(S, q, k, v, g1, 0.5f, 1, 1, o);  // decay to 0.5, δ = 0.5·(2 − 0.5) = 0.75 → 1.25
  EXPECT_NEAR(S[0], 1.25f, 1e-6);
  EXPECT_NEAR(o[0], 3.75f, 1e-6);
}

TEST(KdaStep, MatchesTheChunkedFormOfTheSpec) {
  // The closed chunk formula (spec §4.7) over 5 tokens equals the token loop.
  const int dk = 3, dv = 2, T = 5;
  std::mt19937 rng(11);
  std::normal_distribution<double> n(0, 1);
  std::vector<std::vector<double>> q(T, std::vector<double>(dk)), k = q, g = q, v(T, std::vector<double>(dv));
  std::vector<double> beta(T);
  for (int t = 0; t < T; ++t) {
    for (int d = 0; d < dk; ++d) {
      q[t][d] = n(rng);
      k[t][d] = n(rng) * 0.5;
      g[t][d] = -std::fabs(n(rng));
    }
    for (int j = 0; j < dv; ++j) v[t][j] = n(rng);
    beta[t] = 1 / (1 + std::exp(-n(rng)));
  }
  // token loop in fp32
  std::vector<float> S(dk * dv, 0.0f), outs;
  for (int t = 0; t < T; ++t) {
    std::vector<float> qf(q[t].begin(), q[t].end()), kf(k[t].begin(), k[t].end()), vf(v[t].begin(), v[t].end()),
        gf(g[t].begin(), g[t].end());
    float o[2];
    kda_step(S.data(), qf.data(), kf.data(), vf.data(), gf.data(), static_cast<float>(beta[t]), dk, dv, o);
    outs.insert(outs.end(), o, o + dv);
  }
  // chunk formula in double, zero incoming state
  std::vector<std::vector<double>> G(T, std::vector<double>(dk));
  for (int t = 0; t < T; ++t)
    for (int d = 0; d < dk; ++d) G[t][d] = g[t][d] + (t ? G[t - 1][d] : 0.0);
  auto kk = [&](const std::vector<double>& a, int r, int s) {
    double x = 0;
    for (int d = 0; d < dk; ++d) x += a[d] * k[s][d] * std::exp(G[r][d] - G[s][d]);
    return x;
  };
  std::vector<std::vector<double>> Vp(T, std::vector<double>(dv));  // V' = (I + A)^-1 · (β v)
  for (int r = 0; r < T; ++r)
    for (int j = 0; j < dv; ++j) {
      double x = beta[r] * v[r][j];
      for (int s = 0; s < r; ++s) x -= beta[r] * kk(k[r], r, s) * Vp[s][j];
      Vp[r][j] = x;
    }
  for (int r = 0; r < T; ++r)
    for (int j = 0; j < dv; ++j) {
      double o = 0;
      for (int s = 0; s <= r; ++s) o += kk(q[r], r, s) * Vp[s][j];
      EXPECT_NEAR(outs[r * dv + j], o, 1e-5) << "token " << r;
    }
}
