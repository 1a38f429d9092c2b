// MoE pieces: tie-breaking top-k, the router (bias only for choosing, group limit, weights), and
// the asymmetric SwiGLU clamp.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "shared/ops/activations.h"
#include "shared/ops/router.h"
#include "shared/ops/swiglu.h"
#include "shared/ops/topk.h"

using namespace ft;

TEST(TopK, DescendingWithTiesToTheLowerIndex) {
  const float s[5] = {1, 3, 3, 2, 3};
  EXPECT_EQ(topk_indices(s, 5, 2), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(topk_indices(s, 5, 4), (std::vector<int32_t>{1, 2, 4, 3}));
  EXPECT_EQ(topk_indices(s, 5, 9).size(), 5u);
}

TEST(Router, BiasChoosesButDoesNotWeigh) {
  // Identity router: logits = a. σ(1) + σ(−1) = 1, so normalisation leaves them as they are.
  const float W[16] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  const float bias[4] = {0, 0, -1, 1};
  const float a[4] = {0, 1, 2, -1};
  const RouterParams p{W, bias, 4, 4, 2, 1, 1, true, 2.5f};
  const Routing r = route(p, a);
  ASSERT_EQ(r.experts, (std::vector<int32_t>{1, 3}));  // expert 2 has the best score but a −1 bias
  EXPECT_NEAR(r.weights[0], 2.5 * sigmoid(1.0f), 1e-6);
  EXPECT_NEAR(r.weights[1], 2.5 * sigmoid(-1.0f), 1e-6);
  EXPECT_NEAR(r.margin, sigmoid(1.0f) - 0.5f, 1e-6);  // last chosen (expert 1) vs best rejected (expert 0)
  const RouterParams raw{W, bias, 4, 4, 2, 1, 1, false, 1.0f};
  EXPECT_NEAR(route(raw, a).weights[0], sigmoid(1.0f), 1e-7);
}

TEST(Router, GroupLimitKeepsTheGroupsWithTheBestTwoScores) {
  // 4 groups of 2. Group sums: 1.8, 0.2, 1.0, 0.95 → keep groups 0 and 2, although expert 6
  // (group 3) has the single best score.
  const float s[8] = {0.9f, 0.9f, 0.1f, 0.1f, 0.5f, 0.5f, 0.95f, 0.0f};
  const float zero[8] = {};
  EXPECT_EQ(select_experts(s, zero, 8, 3, 4, 2), (std::vector<int32_t>{0, 1, 4}));
  EXPECT_EQ(select_experts(s, zero, 8, 3, 1, 1), (std::vector<int32_t>{0, 1, 6}));
}

TEST(SwiGLU, GateClampedAboveOnlyUpOnBothSides) {
  const float gate[4] = {20, -1, 0, -30}, up[4] = {20, -20, 0.5f, 2};
  float h[4];
  swiglu_clamped(gate, up, 4, 10.0f, h);
  EXPECT_NEAR(h[0], silu(10.0f) * 10.0f, 1e-4);
  EXPECT_NEAR(h[1], silu(-1.0f) * -10.0f, 1e-6);
  EXPECT_EQ(h[2], 0.0f);
  EXPECT_NEAR(h[3], silu(-30.0f) * 2.0f, 1e-12);  // no lower clamp on the gate
}

TEST(SwiGLU, FullMlp) {
  // dim 1, inter 2: gate rows [1, 2], up rows [3, −1], down [1, 1]
  const float wg[2] = {1, 2}, wu[2] = {3, -1}, wd[2] = {1, 1}, a[1] = {1};
  float o[1], scratch[4];
  swiglu_mlp(wg, wu, wd, 1, 2, 10.0f, a, o, scratch);
  EXPECT_NEAR(o[0], silu(1) * 3 + silu(2) * -1, 1e-6);
}
