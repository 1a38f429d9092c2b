// GPU penalty state and penalties vs shared/sampling's apply_penalties, bit for bit: repetition
// over prompt-only, generated-only and both kinds of tokens, presence and frequency, rows without
// a slot, extreme logits; prompt marking and slot reset.
#include <cstring>

#include "gpu-worker/backends/cuda/sampling/sampler.h"
#include "tests/cuda/sampling/sampling_test_util.h"

namespace ft::test::sampling {
namespace {

using cuda::SamplingRowParams;

class GpuPenalties : public GpuTest {};

// GPU apply_penalties on rows × V with the given params; returns the penalised logits.
std::vector<float> gpu_penalties(const std::vector<float>& logits, int64_t rows, int64_t V,
                                 const std::vector<SamplingRowParams>& params, const cuda::SamplingPenaltyState& st) {
  DevBuf<float> in(logits), out(static_cast<size_t>(rows * V));
  DevBuf<SamplingRowParams> p(params);
  cuda::apply_penalties(in.get(), V, rows, V, p.get(), st, out.get(), V, nullptr);
  return out.download();
}

TEST_F(GpuPenalties, HandExamplesOfTheCpuTests) {
  // tests/sampling: repetition 2 over prompt {0} and generated {2}; presence/frequency.
  HostPenalties hp(2, 3);
  hp.prompt[0] = {0};
  hp.counts[0] = {0, 0, 1};
  hp.prompt[1] = {2, 2};
  hp.counts[1] = {2, 1, 0};
  DevPenalties dp(hp);
  SamplingConfig rep;
  rep.repetition_penalty = 2.0f;
  SamplingConfig pf;
  pf.presence_penalty = 0.5f;
  pf.frequency_penalty = 1.0f;
  const std::vector<SamplingRowParams> params = {cuda::sampling_row_params(rep, 0, 0, 0, -1),
                                                 cuda::sampling_row_params(pf, 1, 0, 0, -1)};
  const std::vector<float> out = gpu_penalties({2.0f, 1.5f, -1.0f, 5, 5, 5}, 2, 3, params, dp.state);
  EXPECT_EQ(out, (std::vector<float>{1.0f, 1.5f, -2.0f, 5 - 2 - 0.5f, 5 - 1 - 0.5f, 5}));
}

TEST_F(GpuPenalties, MatchApplyPenaltiesBitForBit) {
  for (int64_t V : {int64_t{512}, int64_t{1000}, kRealVocab}) {
    const int64_t R = V == kRealVocab ? 8 : 48;
    std::mt19937_64 g(100 + V);
    std::uniform_real_distribution<float> U(0.0f, 1.0f);
    HostPenalties hp(R, V);
    std::vector<float> logits;
    std::vector<SamplingRowParams> params;
    std::vector<SamplingConfig> configs;
    for (int64_t r = 0; r < R; ++r) {
      std::vector<float> x = random_logits(V, static_cast<LogitShape>(r % 7), g);
      // Extremes on the penalised tokens: ±0, ±FLT_MAX (÷ or × overflows), −inf, subnormals.
      hp.randomise(r, g);
      const float extremes[] = {0.0f, -0.0f, FLT_MAX, -FLT_MAX, -INFINITY, FLT_TRUE_MIN, -FLT_TRUE_MIN, 1e30f};
      for (int i = 0; i < 8; ++i) {
        const int32_t t = static_cast<int32_t>(g() % V);
        x[t] = extremes[i];
        if (i % 2) hp.counts[r][t] += 1;
        else hp.prompt[r].push_back(t);
      }
      hp.counts[r][g() % V] = 100000;  // a large count (exact in fp32)
      logits.insert(logits.end(), x.begin(), x.end());
      SamplingConfig c;
      const float reps[] = {1.0f, 0.0f, -1.0f, 0.5f + 1.5f * U(g), 0.3f, 2.0f, 1.0f + 1e-6f};
      c.repetition_penalty = reps[r % 7];
      c.presence_penalty = r % 3 == 0 ? 0.0f : 2.0f * U(g) - 1.0f;
      c.frequency_penalty = r % 4 == 0 ? 0.0f : 1.5f * U(g) - 0.5f;
      configs.push_back(c);
      params.push_back(cuda::sampling_row_params(c, r % 6 == 5 ? -1 : static_cast<int32_t>(r), 0, 0, -1));
    }
    DevPenalties dp(hp);
    const std::vector<float> got = gpu_penalties(logits, R, V, params, dp.state);
    int bad = 0;
    for (int64_t r = 0; r < R; ++r) {
      std::vector<float> want(logits.begin() + r * V, logits.begin() + (r + 1) * V);
      apply_penalties(want, hp.history(params[r].slot), configs[r]);
      for (int64_t t = 0; t < V; ++t)
        if (std::memcmp(&got[r * V + t], &want[t], sizeof(float)) != 0 && ++bad <= 20)
          ADD_FAILURE() << "V=" << V << " row " << r << " token " << t << " slot " << params[r].slot << " "
                        << describe(configs[r]) << ": raw " << logits[r * V + t] << " count "
                        << (params[r].slot >= 0 ? hp.counts[r][t] : 0) << ", gpu " << got[r * V + t] << ", cpu "
                        << want[t];
    }
    EXPECT_EQ(bad, 0) << "V=" << V;
  }
}

TEST_F(GpuPenalties, MarkPromptSetsBitsAndResetClearsOneSlot) {
  const int64_t V = 100, slots = 5, W = cuda::sampling_prompt_words(V);  // V not a multiple of 32
  ASSERT_EQ(W, 4);
  DevBuf<int32_t> counts(slots * V);
  DevBuf<uint32_t> bits(slots * W);
  const cuda::SamplingPenaltyState st{counts.get(), bits.get(), slots, V};
  for (int32_t s = 0; s < slots; ++s) cuda::sampling_reset_slot(st, s, nullptr);
  // Batched form: per-token slots, out-of-range entries skipped, duplicates harmless.
  const std::vector<int32_t> tok = {0, 31, 32, 99, 99, 100, -1, 7, 63, 64, 5};
  const std::vector<int32_t> tslot = {0, 0, 1, 1, 1, 1, 2, -1, 4, 5, 3};
  DevBuf<int32_t> d_tok(tok), d_slot(tslot);
  cuda::sampling_mark_prompt(st, d_tok.get(), d_slot.get(), static_cast<int64_t>(tok.size()), nullptr);
  // One-sequence form.
  const std::vector<int32_t> tok2 = {1, 2, 98};
  DevBuf<int32_t> d_tok2(tok2);
  cuda::sampling_mark_prompt(st, 2, d_tok2.get(), 3, nullptr);
  std::vector<uint32_t> want(slots * W, 0);
  auto set = [&](int s, int t) { want[s * W + t / 32] |= 1u << (t % 32); };
  set(0, 0), set(0, 31), set(1, 32), set(1, 99), set(4, 63), set(3, 5), set(2, 1), set(2, 2), set(2, 98);
  EXPECT_EQ(bits.download(), want);
  std::vector<int32_t> c(slots * V, 0);
  c[2 * V + 7] = 3;
  c[3 * V + 1] = 1;
  counts.upload(c);
  cuda::sampling_reset_slot(st, 2, nullptr);
  for (int i = 0; i < W; ++i) want[2 * W + i] = 0;
  c[2 * V + 7] = 0;
  EXPECT_EQ(bits.download(), want);
  EXPECT_EQ(counts.download(), c);
  EXPECT_THROW(cuda::sampling_reset_slot(st, 5, nullptr), Error);
}

}  // namespace
}  // namespace ft::test::sampling
