// The GPU's fp16 operand rounding as the CPU side runs it (shared/exl3/operands.h): the row
// exponent rule and the rounded values, worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "shared/exl3/operands.h"

namespace ft::exl3 {
namespace {

TEST(F16Operands, RowExponentPutsTheLargestValueIn2To14Through2To15) {
  EXPECT_EQ(f16_row_exponent(3.0f), 13);       // 3 = 0.75·2^2: 3·2^13 = 24576
  EXPECT_EQ(f16_row_exponent(16384.0f), 0);    // 2^14 already in range
  EXPECT_EQ(f16_row_exponent(32768.0f), -1);   // 2^15 is one too far
  EXPECT_EQ(f16_row_exponent(1e-37f), 126);    // 2^137 wanted, capped at 2^126
  EXPECT_EQ(f16_row_exponent(0.0f), 0);
  EXPECT_EQ(f16_row_exponent(std::numeric_limits<float>::infinity()), 0);
  EXPECT_EQ(f16_row_exponent(std::nanf("")), 0);
}

TEST(F16Operands, RowIsScaledRoundedToNearestEvenAndItsFactorReturned) {
  // max 3 → e = 13: 1 → 8192, −3 → −24576, 0.1 → 819.2 → 819 (fp16 steps of 0.5 in [512, 1024)),
  // 2.0001 → 16384.82 → 16384 (steps of 16 in [2^14, 2^15)), 0.75/8192 → 0.75 (exact).
  std::vector<float> row = {1.0f, -3.0f, 0.1f, 2.0001f, 0.75f / 8192, std::nanf("")};
  const float f = round_row_to_f16(row.data(), static_cast<int64_t>(row.size()));
  EXPECT_EQ(f, 1.0f / 8192);
  EXPECT_EQ(row[0], 8192.0f);
  EXPECT_EQ(row[1], -24576.0f);
  EXPECT_EQ(row[2], 819.0f);
  EXPECT_EQ(row[3], 16384.0f);
  EXPECT_EQ(row[4], 0.75f);
  EXPECT_TRUE(std::isnan(row[5]));  // ignored by the maximum, kept as NaN
  // Ties to even: with the maximum 1 the row is scaled by 2^14, so 0.5 + 2^−12 becomes 8196,
  // halfway between the fp16 neighbours 8192 and 8200 (steps of 8 in [2^13, 2^14)): 8192.
  std::vector<float> tie = {1.0f, 0.5f + 1.0f / 4096};
  EXPECT_EQ(round_row_to_f16(tie.data(), 2), 1.0f / 16384);
  EXPECT_EQ(tie[0], 16384.0f);
  EXPECT_EQ(tie[1], 8192.0f);
}

TEST(F16Operands, ZeroRowStaysZero) {
  std::vector<float> row(7, 0.0f);
  EXPECT_EQ(round_row_to_f16(row.data(), 7), 1.0f);
  for (float v : row) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace ft::exl3
