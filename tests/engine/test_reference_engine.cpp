// Properties of the reference engine beyond the fixtures: prompts split into pieces, batching,
// decode cost and cache growth, bad token ids.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>

#include "shared/core/error.h"
#include "shared/engine/local_experts.h"
#include "shared/engine/reference_engine.h"
#include "shared/model/tensor_convert.h"
#include "tests/support/test_paths.h"

using namespace ft;

namespace {

const ModelWeights& tiny_a() {
  static const ModelWeights w = load_model(test::fixture("glm5-tiny-a/model"));
  return w;
}

std::vector<int32_t> prompt(int n, int seed) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (i * 37 + seed * 101 + 11) % 512;
  return p;
}

std::vector<float> last_row(const std::vector<float>& logits, int64_t V) {
  return {logits.end() - V, logits.end()};
}

// Counts the tokens each MoE layer sends to the expert tier.
class CountingExperts : public ExpertBackend {
 public:
  explicit CountingExperts(const ModelWeights& w) : local_(w) {}
  void compute(int64_t layer, const float* a, int64_t n, const std::vector<Routing>& r, float* out,
               exl3::Operands operands) override {
    tokens += n;
    ++calls;
    local_.compute(layer, a, n, r, out, operands);
  }
  int64_t tokens = 0, calls = 0;

 private:
  LocalExperts local_;
};

}  // namespace

TEST(ReferenceEngine, PromptInPiecesEqualsOnePrefillBitForBit) {
  ReferenceEngine eng(tiny_a());
  const auto p = prompt(60, 1);  // crosses the dense horizon (19) so selection is sparse
  SequenceState whole = eng.new_state(), pieces = eng.new_state(), single = eng.new_state();
  const auto a = eng.prefill(whole, p, false);
  std::vector<float> b;
  for (size_t i = 0; i < p.size(); i += 7)
    b = eng.prefill(pieces, std::span<const int32_t>(p).subspan(i, std::min<size_t>(7, p.size() - i)), false);
  std::vector<float> c;
  for (int32_t t : p) c = eng.decode(single, t);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  EXPECT_EQ(whole.n_tokens, 60);
  EXPECT_EQ(whole.sparse[3].pool_keys, single.sparse[3].pool_keys);
  EXPECT_EQ(whole.kda[0].S, pieces.kda[0].S);
}

TEST(ReferenceEngine, ResultsDoNotDependOnTheBatch) {
  ReferenceEngine eng(tiny_a());
  const int64_t V = eng.config().vocab_size;
  const auto p1 = prompt(30, 2), p2 = prompt(5, 3), p3 = prompt(45, 4);
  // Alone.
  SequenceState a1 = eng.new_state(), a2 = eng.new_state(), a3 = eng.new_state();
  const auto l1 = eng.prefill(a1, p1, true);
  const auto l2 = eng.prefill(a2, p2, false);
  eng.prefill(a3, p3, false);
  const auto d3 = eng.decode(a3, 7);
  // Together: two prefills and a decode in one forward.
  SequenceState b1 = eng.new_state(), b2 = eng.new_state(), b3 = eng.new_state();
  eng.prefill(b3, p3, false);
  const int32_t seven = 7;
  std::vector<ForwardItem> batch = {{&b1, p1, true, {}}, {&b2, p2, false, {}}, {&b3, {&seven, 1}, false, {}}};
  eng.forward(batch);
  EXPECT_EQ(batch[0].logits, l1);
  EXPECT_EQ(batch[1].logits, l2);
  EXPECT_EQ(batch[2].logits, d3);
  EXPECT_EQ(static_cast<int64_t>(batch[0].logits.size()), 30 * V);
}

TEST(ReferenceEngine, DecodeStepComputesOnlyTheNewToken) {
  CountingExperts experts(tiny_a());
  ReferenceEngine eng(tiny_a(), &experts);
  SequenceState s = eng.new_state();
  eng.prefill(s, prompt(150, 5), false);
  const int64_t moe_layers = 5;  // layers 3..7 of tiny-a
  EXPECT_EQ(experts.tokens, 150 * moe_layers);
  experts.tokens = experts.calls = 0;
  eng.decode(s, 9);
  EXPECT_EQ(experts.calls, moe_layers);
  EXPECT_EQ(experts.tokens, moe_layers);
}

TEST(ReferenceEngine, CacheGrowsByTheLatentAndIndexerStateOnly) {
  ReferenceEngine eng(tiny_a());
  const ModelConfig& c = eng.config();
  SequenceState s = eng.new_state();
  const size_t fixed = s.bytes();
  // KDA: conv window (K−1)·3Q and state Hl·dl·dl per linear layer (6 of them in tiny-a).
  EXPECT_EQ(fixed, 6 * ((3 * 3 * 64) + 4 * 16 * 16) * sizeof(float));
  eng.prefill(s, prompt(40, 6), false);
  // Per token and sparse layer: Rkv latent + 2·ID indexer values; per complete pool: ID.
  const size_t per_token = 2 * (c.kv_lora_rank + 2 * c.index_head_dim) * sizeof(float);
  const size_t pools = 2 * (40 / c.index_kpool) * c.index_head_dim * sizeof(float);
  EXPECT_EQ(s.bytes(), fixed + 40 * per_token + pools);
}

TEST(ReferenceEngine, BadTokenIdIsAnErrorAndLeavesTheStateAlone) {
  ReferenceEngine eng(tiny_a());
  SequenceState s = eng.new_state();
  eng.prefill(s, prompt(3, 7), false);
  const std::vector<int32_t> bad = {1, 512};
  EXPECT_THROW(eng.prefill(s, bad, false), Error);
  const std::vector<int32_t> neg = {-1};
  EXPECT_THROW(eng.prefill(s, neg, false), Error);
  EXPECT_EQ(s.n_tokens, 3);
  EXPECT_EQ(s.sparse[3].latent.size(), 3u * 32u);
}

TEST(ReferenceEngine, DecodeAfterPrefillMatchesTheFixtureWithoutTheFixtureLoop) {
  // Greedy generation from the engine's own argmax reproduces the stored continuation.
  ReferenceEngine eng(tiny_a());
  const int64_t V = eng.config().vocab_size;
  const TensorStore ref = TensorStore::open(test::fixture("glm5-tiny-a/reference.safetensors"));
  std::vector<int32_t> ids;
  for (int64_t v : to_i64(ref.get("case2.input_ids"))) ids.push_back(static_cast<int32_t>(v));
  const auto want = to_i64(ref.get("case2.generated_ids"));
  SequenceState s = eng.new_state();
  auto logits = last_row(eng.prefill(s, ids, false), V);
  for (int64_t w : want) {
    const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
    ASSERT_EQ(best, w);
    logits = eng.decode(s, static_cast<int32_t>(best));
  }
}
