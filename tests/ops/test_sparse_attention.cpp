// DSA indexer (pool keys, scores, selection) and absorbed MLA attention on hand-checkable inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "shared/ops/indexer.h"
#include "shared/ops/mla.h"

using namespace ft;

TEST(Indexer, PoolKeyIsAGatedSoftmaxPerChannel) {
  const float kI[2] = {4, 8}, gI[2] = {0, std::log(3.0f)}, ape[2] = {0, 0};  // κ 2, one channel
  float pk[1];
  indexer_pool_key(kI, gI, ape, 2, 1, pk);
  EXPECT_NEAR(pk[0], 0.25 * 4 + 0.75 * 8, 1e-6);
  const float ape2[2] = {std::log(3.0f), 0};  // the per-slot offset cancels the gate
  indexer_pool_key(kI, gI, ape2, 2, 1, pk);
  EXPECT_NEAR(pk[0], 6.0, 1e-6);
}

TEST(Indexer, ScoresWeighRectifiedHeads) {
  const float qI[4] = {1, 0, -1, 0}, omega[2] = {1, 2}, keys[4] = {3, 5, -2, 1};  // IH 2, ID 2, 2 pools
  float s[2];
  indexer_pool_scores(qI, omega, keys, 2, 2, 2, s);
  EXPECT_NEAR(s[0], 3 / std::sqrt(2.0), 1e-6);          // head 1 scores −3 → relu 0
  EXPECT_NEAR(s[1], 2 * 2 / std::sqrt(2.0), 1e-6);      // head 0 scores −2 → 0; head 1: 2·2
}

TEST(Indexer, SelectionIsDenseWithinTheBudget) {
  const auto sel = select_tokens(nullptr, 6, 4, 2, true);  // 1 complete pool ≤ budget 2
  EXPECT_EQ(sel, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6}));
}

TEST(Indexer, SelectionTakesTheBestPoolsPlusTheTail) {
  const float scores[3] = {1, 5, 3};
  EXPECT_EQ(select_tokens(scores, 13, 4, 2, true), (std::vector<int32_t>{4, 5, 6, 7, 8, 9, 10, 11, 12, 13}));
  // τ = 11 completes pool 2, which then competes like any other: the query may lose itself.
  const float s2[3] = {9, 5, 3};
  EXPECT_EQ(select_tokens(s2, 11, 4, 2, true), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  const float ties[3] = {2, 2, 2};
  EXPECT_EQ(select_tokens(ties, 11, 4, 2, true), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(select_tokens(scores, 13, 4, 2, false).size(), 8u);
  EXPECT_TRUE(select_tokens(nullptr, 2, 4, 2, false).empty());
}

TEST(Mla, AbsorbAttendExpand) {
  // one head, dn = dv = 1, latent 2: kv_b rows [key; value] = [[1, 2], [3, 4]].
  const float kv_b[4] = {1, 2, 3, 4};
  const MlaDims d{1, 1, 1, 2};
  const float q[1] = {2};
  float q_abs[2];
  mla_absorb_query(kv_b, q, d, q_abs);
  EXPECT_EQ(q_abs[0], 2.0f);
  EXPECT_EQ(q_abs[1], 4.0f);
  // softmax over two cached latents: scores ln 3 and 0 → weights 3/4, 1/4
  const float latent[4] = {1, 0, 0, 1};
  const float qa[2] = {std::log(3.0f), 0};
  const int32_t sel[2] = {0, 1};
  float ctx[2];
  mla_attend(qa, latent, sel, 2, d, 1.0f, ctx);
  EXPECT_NEAR(ctx[0], 0.75, 1e-6);
  EXPECT_NEAR(ctx[1], 0.25, 1e-6);
  const int32_t only1[1] = {1};
  mla_attend(qa, latent, only1, 1, d, 1.0f, ctx);
  EXPECT_EQ(ctx[1], 1.0f);
  mla_attend(qa, latent, only1, 0, d, 1.0f, ctx);  // nothing selected: attend to nothing
  EXPECT_EQ(ctx[0], 0.0f);
  EXPECT_EQ(ctx[1], 0.0f);
  const float c1[2] = {1, 1};
  float out[1];
  mla_expand_values(kv_b, c1, d, out);
  EXPECT_EQ(out[0], 7.0f);
}

TEST(Mla, AbsorbedEqualsExpandedKeysAndValues) {
  // 2 heads, dn 2, dv 3, latent 4, 3 tokens: score_h(s) = q_h·(W_k,h c_s) and o_h = Σ p W_v,h c_s.
  const MlaDims d{2, 2, 3, 4};
  std::vector<float> kv_b(2 * 5 * 4), lat(3 * 4), q(2 * 2);
  for (size_t i = 0; i < kv_b.size(); ++i) kv_b[i] = std::sin(static_cast<float>(i));
  for (size_t i = 0; i < lat.size(); ++i) lat[i] = std::cos(static_cast<float>(i) * 0.7f);
  for (size_t i = 0; i < q.size(); ++i) q[i] = 0.3f * static_cast<float>(i) - 0.4f;
  std::vector<float> qa(8), ctx(8), out(6);
  mla_absorb_query(kv_b.data(), q.data(), d, qa.data());
  const int32_t sel[3] = {0, 1, 2};
  mla_attend(qa.data(), lat.data(), sel, 3, d, 0.5f, ctx.data());
  mla_expand_values(kv_b.data(), ctx.data(), d, out.data());
  for (int h = 0; h < 2; ++h) {
    double sc[3], mx = -1e30, den = 0;
    for (int s = 0; s < 3; ++s) {
      sc[s] = 0;
      for (int i = 0; i < 2; ++i) {
        double key = 0;
        for (int r = 0; r < 4; ++r) key += kv_b[(h * 5 + i) * 4 + r] * lat[s * 4 + r];
        sc[s] += q[h * 2 + i] * key;
      }
      sc[s] *= 0.5;
      mx = std::max(mx, sc[s]);
    }
    for (double& x : sc) den += (x = std::exp(x - mx));
    for (int j = 0; j < 3; ++j) {
      double o = 0;
      for (int s = 0; s < 3; ++s) {
        double val = 0;
        for (int r = 0; r < 4; ++r) val += kv_b[(h * 5 + 2 + j) * 4 + r] * lat[s * 4 + r];
        o += sc[s] / den * val;
      }
      EXPECT_NEAR(out[h * 3 + j], o, 1e-5);
    }
  }
}
