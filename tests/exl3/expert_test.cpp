// Packed expert blocks and the threaded SwiGLU expert forward, on the EXL3 experts of the
// glm5-tiny-exl3 fixture (K = 2, 3, 4, MUL1), against the reference forward of each linear.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "shared/core/error.h"
#include "shared/exl3/expert_block.h"
#include "shared/exl3/expert_forward.h"
#include "shared/exl3/trellis.h"
#include "shared/model/config.h"
#include "tests/exl3/golden.h"

namespace ft::exl3 {
namespace {

struct Block {
  std::unique_ptr<uint8_t, decltype(&std::free)> mem{nullptr, &std::free};
  Block(const TensorStore& st, int64_t layer, int64_t expert, int64_t D, int64_t I) {
    const ExpertBlockHeader h = plan_expert_block(expert_geometry(st, layer, expert, D, I));
    mem.reset(static_cast<uint8_t*>(std::aligned_alloc(kExpertBlockAlign, h.block_bytes)));
    pack_expert_from_store(st, layer, expert, D, I, mem.get());
  }
  const uint8_t* get() const { return mem.get(); }
};

struct Tiny {
  ModelConfig cfg = load_config(test::fixture("glm5-tiny-exl3/model"));
  TensorStore st = TensorStore::open(test::fixture("glm5-tiny-exl3/model"));
  int64_t D = cfg.hidden_size, I = cfg.moe_intermediate_size;
  Exl3Linear lin(int64_t layer, int64_t e, ExpertProj p) const {
    return load_exl3_linear(st, expert_proj_name(st, layer, e, p));
  }
};

const Tiny& tiny() {
  static const Tiny t;
  return t;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) e += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), r += double(b[i]) * b[i];
  return std::sqrt(e / r);
}

TEST(Exl3ExpertBlock, PackedTilesRoundTrip) {
  const Tiny& T = tiny();
  Block b(T.st, 1, 5, T.D, T.I);
  const ExpertView v = view_expert_block(b.get());
  EXPECT_EQ(v.header->block_bytes % kExpertBlockAlign, 0u);
  for (int p = 0; p < 3; ++p) {
    const Exl3Linear q = T.lin(1, 5, static_cast<ExpertProj>(p));
    EXPECT_EQ(v.proj[p].K, q.K);
    EXPECT_EQ(v.proj[p].codebook, Codebook::Mul1);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.proj[p].data) % 64, 0u);
    uint32_t U[64];
    for (int64_t a = 0; a < q.in_p / 16; ++a)
      for (int64_t bb = 0; bb < q.out_p / 16; ++bb) {
        tile_words(q.trellis + (a * (q.out_p / 16) + bb) * tile_bytes(q.K), q.K, U);
        for (int j = 0; j < 8 * q.K; ++j) ASSERT_EQ(packed_tile_word(v.proj[p], a, bb, j), U[j]);
      }
  }
}

TEST(Exl3ExpertBlock, RejectsWrongWidths) {
  const Tiny& T = tiny();
  const Exl3Linear g = T.lin(1, 0, kGate), u = T.lin(1, 0, kUp), d = T.lin(1, 0, kDown);
  std::vector<uint8_t> buf(1 << 20);
  try {
    pack_expert_block(g, u, d, T.D, T.I * 2, buf.data());
    FAIL() << "expected ft::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.1.mlp.experts.0.gate_proj.trellis"), std::string::npos) << e.what();
  }
  std::vector<uint8_t> junk(4096, 0);
  EXPECT_THROW(view_expert_block(junk.data()), Error);
}

class ExpertPath : public ::testing::TestWithParam<SimdPath> {
 protected:
  void SetUp() override {
    if (!simd_supported(GetParam())) GTEST_SKIP() << simd_name(GetParam()) << " not supported by this CPU";
  }
};

// One expert of each K (layers 1, 2, 3 hold K = 3, 2, 4), 1 … 9 rows, with a swiglu limit low
// enough that both clamps act.
TEST_P(ExpertPath, SingleExpertMatchesReference) {
  const Tiny& T = tiny();
  ThreadPool pool(3, false);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (int64_t layer : {1, 2, 3}) {
    Block b(T.st, layer, 7, T.D, T.I);
    const Exl3Linear g = T.lin(layer, 7, kGate), u = T.lin(layer, 7, kUp), d = T.lin(layer, 7, kDown);
    for (int n : {1, 2, 5, 9}) {
      std::vector<float> x(n * T.D), got(n * T.D), want(n * T.D);
      for (float& v : x) v = 3.0f * nd(rng);
      const float limit = 0.5f;
      expert_forward(b.get(), x.data(), n, got.data(), pool, limit, GetParam());
      expert_forward_reference(g, u, d, T.D, T.I, limit, x.data(), n, want.data());
      EXPECT_LT(rel_l2(got, want), 5e-6) << "layer " << layer << " n=" << n;
    }
  }
}

// A layer-style batch: several experts, overlapping token sets, routing weights; the result is
// the weighted sum in task order, with the reference's operand rounding.
std::vector<float> batch_of_experts(SimdPath path, Operands operands) {
  const Tiny& T = tiny();
  ThreadPool pool(3, false);
  ExpertRunner runner(pool, 10.0f, path);
  std::mt19937 rng(4);
  std::normal_distribution<float> nd;
  const int64_t tokens = 5;
  std::vector<float> x(tokens * T.D);
  for (float& v : x) v = nd(rng);
  const int experts[] = {1, 4, 9, 15};
  const std::vector<std::vector<int32_t>> rows = {{0, 1, 2, 3}, {1}, {0, 3}, {2, 3}};  // token 4: none
  std::vector<std::vector<float>> w;
  std::vector<Block> blocks;
  std::vector<ExpertTask> tasks;
  for (int k = 0; k < 4; ++k) {
    blocks.emplace_back(T.st, 2, experts[k], T.D, T.I);
    w.emplace_back();
    for (size_t i = 0; i < rows[k].size(); ++i) w.back().push_back(0.1f + 0.2f * k + 0.05f * i);
  }
  for (int k = 0; k < 4; ++k)
    tasks.push_back({blocks[k].get(), rows[k].data(), w[k].data(), static_cast<int>(rows[k].size())});
  std::vector<float> got(tokens * T.D, 123.0f), want(tokens * T.D, 0.0f), y(T.D);
  runner.forward(tasks.data(), 4, x.data(), tokens, got.data(), operands);
  runner.forward(tasks.data(), 4, x.data(), tokens, got.data(), operands);  // reuse of the plan
  for (int k = 0; k < 4; ++k) {
    const Exl3Linear g = T.lin(2, experts[k], kGate), u = T.lin(2, experts[k], kUp), d = T.lin(2, experts[k], kDown);
    for (size_t i = 0; i < rows[k].size(); ++i) {
      expert_forward_reference(g, u, d, T.D, T.I, 10.0f, x.data() + rows[k][i] * T.D, 1, y.data(), operands);
      for (int64_t c = 0; c < T.D; ++c) want[rows[k][i] * T.D + c] += w[k][i] * y[c];
    }
  }
  for (int64_t c = 0; c < T.D; ++c) EXPECT_EQ(got[4 * T.D + c], 0.0f);
  EXPECT_LT(rel_l2(got, want), 5e-6) << (operands == Operands::F16Rows ? "fp16 operands" : "fp32 operands");
  return got;
}

TEST_P(ExpertPath, BatchOfExpertsMatchesReference) { batch_of_experts(GetParam(), Operands::F32); }

// The GPU's operand rounding (what a CPU tier sharing a layer with the GPU runs): the reference
// with the same rounding to accumulation order, and visibly not the fp32 result.
TEST_P(ExpertPath, BatchOfExpertsWithF16OperandsMatchesItsReference) {
  const std::vector<float> f16 = batch_of_experts(GetParam(), Operands::F16Rows);
  const std::vector<float> f32 = batch_of_experts(GetParam(), Operands::F32);
  EXPECT_GT(rel_l2(f16, f32), 1e-5) << "fp16 operand rounding had no effect";
  EXPECT_LT(rel_l2(f16, f32), 1e-2);
}

// A row's result does not depend on what else is in the batch (row blocks of 8/4/2/1 sum in the
// same order), nor on the SIMD path (all paths feed each column the same FMA sequence).
TEST_P(ExpertPath, BatchInvariantBits) {
  const Tiny& T = tiny();
  ThreadPool pool(3, false);
  Block b(T.st, 3, 11, T.D, T.I);
  std::mt19937 rng(8);
  std::normal_distribution<float> nd;
  const int n = 11;
  std::vector<float> x(n * T.D), all(n * T.D), one(T.D);
  for (float& v : x) v = nd(rng);
  expert_forward(b.get(), x.data(), n, all.data(), pool, 10.0f, GetParam());
  for (int r = 0; r < n; ++r) {
    expert_forward(b.get(), x.data() + r * T.D, 1, one.data(), pool, 10.0f, GetParam());
    ASSERT_EQ(0, std::memcmp(one.data(), all.data() + r * T.D, T.D * sizeof(float))) << "row " << r;
  }
  if ((GetParam() == SimdPath::Avx512 || GetParam() == SimdPath::Avx512Fp16) && simd_supported(SimdPath::Avx2)) {
    std::vector<float> avx2(n * T.D);
    expert_forward(b.get(), x.data(), n, avx2.data(), pool, 10.0f, SimdPath::Avx2);
    EXPECT_EQ(0, std::memcmp(avx2.data(), all.data(), all.size() * sizeof(float)));
  }
}

// The pool's size sets how finely a call's blocks are split into items (4, 2 or 1 tile pairs
// each): the bits do not depend on it.
TEST_P(ExpertPath, PoolSizeDoesNotChangeTheBits) {
  const Tiny& T = tiny();
  Block b(T.st, 2, 4, T.D, T.I);
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  for (int n : {1, 5}) {
    std::vector<float> x(n * T.D), want(n * T.D), got(n * T.D);
    for (float& v : x) v = nd(rng);
    ThreadPool one(1, false);
    expert_forward(b.get(), x.data(), n, want.data(), one, 10.0f, GetParam());
    for (int threads : {2, 3, 8}) {
      ThreadPool pool(threads, false);
      expert_forward(b.get(), x.data(), n, got.data(), pool, 10.0f, GetParam());
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float))) << threads << " threads, n " << n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, ExpertPath, ::testing::Values(SimdPath::Scalar, SimdPath::Avx2, SimdPath::Avx512, SimdPath::Avx512Fp16),
                         [](const auto& info) { return std::string(simd_name(info.param)); });

}  // namespace
}  // namespace ft::exl3
