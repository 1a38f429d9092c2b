// Reference EXL3 decode against the spec's worked examples and exllamav3's own CUDA output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "shared/core/half.h"
#include "shared/exl3/codebook.h"
#include "shared/exl3/reference.h"
#include "shared/exl3/trellis.h"
#include "shared/model/tensor_convert.h"
#include "tests/exl3/golden.h"

namespace ft::exl3 {
namespace {

using test::GoldenCase;

// Spec §10.1: state → fp16 bits for 3INST, MCG, MUL1.
TEST(Exl3Codebook, WorkedExamples) {
  struct Row {
    uint32_t state;
    uint16_t inst3, mcg, mul1;
  };
  const Row rows[] = {
      {0x0000, 0x3A25, 0x3F60, 0xC2E8}, {0x0001, 0xBB5B, 0x304E, 0x3921}, {0x1234, 0xC066, 0x3E0F, 0xB89E},
      {0x8000, 0xB7F8, 0xB915, 0xBAF2}, {0xABCD, 0xB98E, 0x35E7, 0xBD42}, {0xFFFF, 0xB110, 0x3ACD, 0xB936},
      {0xCBB8, 0x4137, 0xBE50, 0xB494}, {0x5DC1, 0xC0C1, 0x3FF7, 0x2FAE},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(codebook_value_f16(r.state, Codebook::Inst3), r.inst3) << std::hex << r.state;
    EXPECT_EQ(codebook_value_f16(r.state, Codebook::Mcg), r.mcg) << std::hex << r.state;
    EXPECT_EQ(codebook_value_f16(r.state, Codebook::Mul1), r.mul1) << std::hex << r.state;
  }
}

// Spec §9.2 self-test and §5.4 statistics over all 65536 states.
TEST(Exl3Codebook, Statistics) {
  struct Stat {
    Codebook cb;
    double rms, min, max;
  };
  for (const Stat& s : {Stat{Codebook::Inst3, 1.243711, -3.95703125, 3.97265625},
                        Stat{Codebook::Mcg, 1.244112, -3.94921875, 3.94921875},
                        Stat{Codebook::Mul1, 1.000312, -3.453125, 3.34765625}}) {
    double sq = 0, mn = 1e9, mx = -1e9;
    for (uint32_t st = 0; st < 65536; ++st) {
      const double v = codebook_value(st, s.cb);
      sq += v * v;
      mn = std::min(mn, v);
      mx = std::max(mx, v);
    }
    EXPECT_NEAR(std::sqrt(sq / 65536), s.rms, 1e-6) << codebook_name(s.cb);
    EXPECT_EQ(mn, s.min) << codebook_name(s.cb);
    EXPECT_EQ(mx, s.max) << codebook_name(s.cb);
  }
}

// Spec §10.2: K = 3 with codes t mod 8; §10.3: K = 2 with codes (t >> 2) & 3.
TEST(Exl3Trellis, WorkedBitstreams) {
  {
    const uint16_t period[6] = {0x7705, 0x0539, 0x0539, 0x3977, 0x3977, 0x7705};
    uint16_t words[48];
    for (int i = 0; i < 48; ++i) words[i] = period[i % 6];
    uint16_t st[256];
    tile_states(reinterpret_cast<const uint8_t*>(words), 3, st);
    const uint16_t expect[8] = {0xCBB8, 0x5DC1, 0xEE0A, 0x7053, 0x829C, 0x14E5, 0xA72E, 0x3977};
    for (int t = 0; t < 256; ++t) ASSERT_EQ(st[t], expect[t % 8]) << "t=" << t;
  }
  {
    uint16_t words[32];
    for (int i = 0; i < 32; ++i) words[i] = i % 2 ? 0x0055 : 0xAAFF;
    uint16_t st[256];
    tile_states(reinterpret_cast<const uint8_t*>(words), 2, st);
    const uint16_t expect[12] = {0xABFC, 0xAFF0, 0xBFC0, 0xFF00, 0xFC01, 0xF005,
                                 0xC015, 0x0055, 0x0156, 0x055A, 0x156A, 0x55AA};
    for (int t = 0; t < 12; ++t) EXPECT_EQ(st[t], expect[t]) << "t=" << t;
    EXPECT_EQ(st[128], 0xABFC);
    EXPECT_EQ(st[255], 0xAAFF);
  }
}

TEST(Exl3Trellis, TilePositions) {
  // Spec §10.2 and the §4.7 table.
  EXPECT_EQ(tile_position(0), 0 * 16 + 0);
  EXPECT_EQ(tile_position(1), 1 * 16 + 0);
  EXPECT_EQ(tile_position(2), 8 * 16 + 0);
  EXPECT_EQ(tile_position(3), 9 * 16 + 0);
  EXPECT_EQ(tile_position(4), 0 * 16 + 8);
  EXPECT_EQ(tile_position(7), 9 * 16 + 8);
  EXPECT_EQ(tile_position(8), 2 * 16 + 0);
  EXPECT_EQ(tile_position(100), 0 * 16 + 11);
  EXPECT_EQ(tile_position(237), 3 * 16 + 15);
  EXPECT_EQ(tile_position(255), 15 * 16 + 15);
}

class Exl3Golden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(Exl3Golden, DecodeIsBitExact) {
  const GoldenCase c = GetParam();
  const Exl3Linear q = test::golden_linear(c);
  const TensorInfo& wq = test::golden_store().get(c.prefix() + ".wq");
  ASSERT_EQ(wq.shape, (std::vector<int64_t>{q.in_p, q.out_p}));
  std::vector<uint16_t> got(static_cast<size_t>(q.in_p * q.out_p));
  decode_trellis_f16(q.trellis, q.in_p, q.out_p, q.K, q.codebook, got.data());
  int64_t mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    uint16_t want;
    std::memcpy(&want, wq.data + 2 * i, 2);
    if (got[i] != want && ++mismatches <= 5)
      ADD_FAILURE() << c.prefix() << " weight " << i << ": got 0x" << std::hex << got[i] << " want 0x" << want;
  }
  EXPECT_EQ(mismatches, 0) << c.prefix();
}

double golden_weff_tolerance(const GoldenCase& c) {
  std::ifstream f(test::fixture("exl3-decode/exl3-decode-golden.json"));
  const auto j = nlohmann::json::parse(f);
  for (const auto& chk : j.at("checks"))
    if (chk.at("K").get<int>() == c.K && chk.at("codebook").get<std::string>() == codebook_name(c.cb))
      return chk.at("weff_vs_f64_formula_max_abs").get<double>();
  ADD_FAILURE() << "no check entry for " << c.prefix();
  return 0;
}

// exllamav3's fp16 reconstruct_had_slice lands within the recorded distance of the exact formula;
// ours is the exact formula rounded to fp32, so it must land at most that far (plus fp32 noise).
TEST_P(Exl3Golden, EffectiveWeightMatchesExllamav3) {
  const GoldenCase c = GetParam();
  const Exl3Linear q = test::golden_linear(c);
  const std::vector<float> weff = effective_weight(q);
  const std::vector<float> want = to_f32(test::golden_store().get(c.prefix() + ".weff_f16"));
  ASSERT_EQ(weff.size(), want.size());
  double max_abs = 0;
  for (size_t i = 0; i < weff.size(); ++i) max_abs = std::max(max_abs, std::fabs(double(weff[i]) - want[i]));
  EXPECT_LE(max_abs, golden_weff_tolerance(c) + 1e-5) << c.prefix();
}

// The fused fp32 forward equals x·W_eff up to fp32 accumulation noise.
TEST_P(Exl3Golden, ForwardMatchesDenseEquivalent) {
  const GoldenCase c = GetParam();
  Exl3Linear q = test::golden_linear(c);
  q.bias.assign(q.out_p, 0.0f);
  for (int64_t i = 0; i < q.out_p; ++i) q.bias[i] = 0.01f * static_cast<float>(i % 7);
  const std::vector<float> weff = effective_weight(q);
  std::vector<float> wq(static_cast<size_t>(q.in_p * q.out_p));
  decode_trellis_f32(q.trellis, q.in_p, q.out_p, q.K, q.codebook, wq.data());
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  const int rows = 3;
  std::vector<float> x(rows * q.in_p), y(rows * q.out_p);
  for (float& v : x) v = nd(rng);
  forward_reference(q, wq.data(), x.data(), rows, y.data());
  double err = 0, ref = 0;
  for (int n = 0; n < rows; ++n)
    for (int64_t k = 0; k < q.out_p; ++k) {
      double s = q.bias[k];
      for (int64_t i = 0; i < q.in_p; ++i) s += double(x[n * q.in_p + i]) * weff[i * q.out_p + k];
      err += (s - y[n * q.out_p + k]) * (s - y[n * q.out_p + k]);
      ref += s * s;
    }
  EXPECT_LT(std::sqrt(err / ref), 1e-6) << c.prefix();
}

INSTANTIATE_TEST_SUITE_P(AllCases, Exl3Golden, ::testing::ValuesIn(test::golden_cases()),
                         [](const auto& info) {
                           std::string s = info.param.prefix();
                           s[s.find('.')] = '_';
                           return s;
                         });

}  // namespace
}  // namespace ft::exl3
