// GPU constraint masks vs shared/sampling's apply_bias + apply_mask on the host: bit-equal rows
// (−∞ where the host puts it, the same biased values elsewhere) at tiny and real vocabularies,
// unmasked rows only biased, a vocabulary that is not a multiple of 32.
#include <cstring>
#include <random>
#include <span>

#include "gpu-worker/backends/cuda/sampling/constraint_mask.h"
#include "shared/sampling/token_constraint.h"
#include "tests/cuda/sampling/sampling_test_util.h"

namespace ft::test::sampling {
namespace {

class GpuConstraintMask : public GpuTest {};

TEST_F(GpuConstraintMask, MatchesTheHost) {
  for (int64_t V : {int64_t{7}, int64_t{100}, int64_t{8193}, kRealVocab}) {
    const int64_t R = 5, wpr = (V + 31) / 32;
    std::mt19937_64 g(11 + V);
    std::uniform_real_distribution<float> u(-8.0f, 8.0f);
    std::vector<float> logits(size_t(R * V));
    for (float& x : logits) x = u(g);
    std::vector<uint32_t> words(size_t(R * wpr));
    for (size_t i = 0; i < words.size(); ++i) words[i] = i % 7 == 0 ? ~0u : i % 5 == 0 ? 0u : uint32_t(g());
    const std::vector<uint8_t> has_mask = {1, 0, 1, 1, 0};
    std::vector<cuda::LogitBiasEntry> bias = {{0, 3, -100.0f}, {1, 2, 5.5f}, {2, int32_t(V - 1), 100.0f}, {4, 0, -2.0f}};
    // Host: the same per row through TokenConstraint's helpers.
    std::vector<float> want = logits;
    for (int64_t r = 0; r < R; ++r) {
      std::span<float> row(want.data() + r * V, size_t(V));
      ConstraintOptions o;
      o.vocab_size = size_t(V);
      for (const auto& b : bias)
        if (b.row == r) o.logit_bias.emplace_back(b.token, b.bias);
      TokenConstraint c(o, nullptr);
      apply_bias(row, c);
      if (has_mask[size_t(r)]) apply_mask(row, std::span<const uint32_t>(words.data() + r * wpr, size_t(wpr)));
    }
    DevBuf<float> d_logits(logits);
    DevBuf<uint32_t> d_words(words);
    DevBuf<uint8_t> d_has(has_mask);
    DevBuf<cuda::LogitBiasEntry> d_bias(bias);
    cuda::apply_token_constraints(d_logits.get(), V, R, V, d_words.get(), wpr, d_has.get(), d_bias.get(),
                                  int64_t(bias.size()), nullptr);
    const std::vector<float> got = d_logits.download();
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << "V " << V << " row " << i / size_t(V) << " token " << i % size_t(V);
  }
}

}  // namespace
}  // namespace ft::test::sampling
