// Sampling: penalties by hand, filters by the distributions they must leave, seeded streams.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "shared/sampling/logprobs.h"
#include "shared/sampling/sampler.h"

using namespace ft;

namespace {

std::map<int32_t, int> histogram(SamplingConfig c, const std::vector<float>& logits, int n) {
  c.seed = 42;
  Sampler s(c);
  TokenHistory h;
  std::map<int32_t, int> counts;
  for (int i = 0; i < n; ++i) {
    auto l = logits;
    ++counts[s.sample(l, h)];
  }
  return counts;
}

// logits whose softmax at temperature 1 is [0.5, 0.3, 0.2]
const std::vector<float> kP532 = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};

}  // namespace

TEST(Sampler, GreedyTakesTheLowestIdOnTies) {
  const std::vector<float> l = {1, 3, 3, 2};
  EXPECT_EQ(argmax(l), 1);
  SamplingConfig c;
  c.temperature = 0;
  Sampler s(c);
  auto x = l;
  EXPECT_EQ(s.sample(x, {}), 1);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  std::vector<float> l = {2.0f, 1.5f, -1.0f};
  TokenHistory h;
  h.add_prompt(std::vector<int32_t>{0});
  h.add_generated(2);
  SamplingConfig c;
  c.repetition_penalty = 2.0f;
  apply_penalties(l, h, c);
  EXPECT_EQ(l, (std::vector<float>{1.0f, 1.5f, -2.0f}));
  SamplingConfig g = c;
  g.temperature = 0;
  Sampler s(g);
  std::vector<float> m = {2.0f, 1.5f, -1.0f};
  EXPECT_EQ(s.sample(m, h), 1);  // the penalty moved the argmax
}

TEST(Sampler, PresenceAndFrequencyPenaltiesCountGeneratedTokens) {
  std::vector<float> l = {5, 5, 5};
  TokenHistory h;
  h.add_prompt(std::vector<int32_t>{2, 2});  // prompt tokens are not penalised by these two
  h.add_generated(0);
  h.add_generated(0);
  h.add_generated(1);
  SamplingConfig c;
  c.presence_penalty = 0.5f;
  c.frequency_penalty = 1.0f;
  apply_penalties(l, h, c);
  EXPECT_EQ(l, (std::vector<float>{5 - 2 - 0.5f, 5 - 1 - 0.5f, 5}));
}

TEST(Sampler, DrawsFollowTheDistribution) {
  SamplingConfig c;
  const auto counts = histogram(c, kP532, 20000);
  EXPECT_NEAR(counts.at(0) / 20000.0, 0.5, 0.02);
  EXPECT_NEAR(counts.at(1) / 20000.0, 0.3, 0.02);
  EXPECT_NEAR(counts.at(2) / 20000.0, 0.2, 0.02);
}

TEST(Sampler, TemperatureSharpens) {
  SamplingConfig c;
  c.temperature = 0.5f;  // p ∝ [0.25, 0.09, 0.04] → 0.658, 0.237, 0.105
  const auto counts = histogram(c, kP532, 20000);
  EXPECT_NEAR(counts.at(0) / 20000.0, 0.25 / 0.38, 0.02);
}

TEST(Sampler, TopKTopPMinPKeepOnlyWhatTheyMust) {
  SamplingConfig k;
  k.top_k = 2;
  auto counts = histogram(k, kP532, 5000);
  EXPECT_EQ(counts.count(2), 0u);
  EXPECT_NEAR(counts.at(0) / 5000.0, 0.5 / 0.8, 0.03);
  SamplingConfig p;
  p.top_p = 0.6f;  // 0.5 < 0.6 ≤ 0.8: tokens 0 and 1
  counts = histogram(p, kP532, 5000);
  EXPECT_EQ(counts.count(2), 0u);
  EXPECT_GT(counts.at(1), 0);
  p.top_p = 0.5f;  // the first token alone reaches 0.5
  counts = histogram(p, kP532, 2000);
  EXPECT_EQ(counts.size(), 1u);
  SamplingConfig m;
  m.min_p = 0.5f;  // floor 0.25: tokens 0 and 1
  counts = histogram(m, kP532, 5000);
  EXPECT_EQ(counts.count(2), 0u);
  EXPECT_GT(counts.at(1), 0);
}

TEST(Sampler, SeedReproducesAndDifferentSeedsDiffer) {
  std::vector<float> flat(50, 0.0f);
  auto run = [&](uint64_t seed) {
    SamplingConfig c;
    c.seed = seed;
    Sampler s(c);
    std::vector<int32_t> out;
    for (int i = 0; i < 40; ++i) {
      auto l = flat;
      out.push_back(s.sample(l, {}));
    }
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(Logprobs, LogSoftmaxOfRawLogits) {
  const std::vector<float> l = {0.0f, std::log(3.0f), -100.0f};
  const TokenLogprobs r = token_logprobs(l, 1, 2);
  EXPECT_NEAR(r.chosen, std::log(0.75), 1e-6);
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].first, 1);
  EXPECT_EQ(r.top[1].first, 0);
  EXPECT_NEAR(r.top[1].second, std::log(0.25), 1e-6);
  EXPECT_TRUE(token_logprobs(l, 0, 0).top.empty());
}
