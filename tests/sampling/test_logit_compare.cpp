// The logit-row comparisons the fixture checker and the tier panel report (shared/sampling/logit_compare.h),
// against values worked by hand.
#include "shared/sampling/logit_compare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace ft {
namespace {

TEST(LogitCompare, KlOfTwoKnownDistributionsAndTheirTop1) {
  // softmax(0, ln 3) = (1/4, 3/4); softmax(0, 0) = (1/2, 1/2).
  const std::vector<float> a = {0.0f, std::log(3.0f)}, b = {0.0f, 0.0f};
  const LogitAgreement r = compare_logits(a.data(), b.data(), 2);
  EXPECT_NEAR(r.kl, 0.25 * std::log(0.5) + 0.75 * std::log(1.5), 1e-7);
  EXPECT_FALSE(r.same_top1);  // b's first maximum is index 0
  // A shift of every logit changes neither distribution.
  const std::vector<float> a5 = {5.0f, 5.0f + std::log(3.0f)};
  const LogitAgreement s = compare_logits(a.data(), a5.data(), 2);
  EXPECT_NEAR(s.kl, 0.0, 1e-7);
  EXPECT_TRUE(s.same_top1);
  EXPECT_EQ(compare_logits(a.data(), b.data(), 0).kl, 0.0);
}

TEST(LogitCompare, TopTwoGapInUnitsOfTheRowsRms) {
  const std::vector<float> row = {3.0f, 1.0f, -1.0f, 0.0f};
  EXPECT_NEAR(top2_gap_over_rms(row.data(), 4), 2.0 / std::sqrt(11.0 / 4.0), 1e-12);
  const std::vector<float> tie = {2.0f, 0.0f, 2.0f};
  EXPECT_EQ(top2_gap_over_rms(tie.data(), 3), 0.0);
  // The largest value may come last; the gap is to the second largest, not to the first element.
  const std::vector<float> last = {1.0f, 0.5f, 4.0f};
  EXPECT_NEAR(top2_gap_over_rms(last.data(), 3), 3.0 / std::sqrt(17.25 / 3.0), 1e-12);
}

}  // namespace
}  // namespace ft
