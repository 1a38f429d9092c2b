// The CUDA engine end to end on the tiny fixtures: batch invariance (a sequence alone vs among
// seven others, a prompt in one piece vs in 64-token pieces: bit-identical logits), graph replay
// vs eager steps, greedy tokens vs the fixture, and the refusals that keep a worker alive (a
// budget too small for the model, a sequence too long for the cache, slots exhausted).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "gpu-worker/backends/cuda/core/programmatic.h"
#include "gpu-worker/backends/cuda/engine/cuda_engine.h"
#include "gpu-worker/backends/cuda/ops/linear_launch.h"
#include "shared/model/safetensors.h"
#include "shared/model/tensor_convert.h"
#include "tests/cuda/support/gpu_test.h"

namespace ft::cuda {
namespace {

const ModelWeights& weights(const std::string& name) {
  static std::map<std::string, std::unique_ptr<ModelWeights>> cache;
  auto& w = cache[name];
  if (!w) {
    LoadOptions lo;
    lo.keep_quantized = true;
    w = std::make_unique<ModelWeights>(load_model(test::fixture(name + "/model"), lo));
  }
  return *w;
}

struct FixtureCase {
  std::vector<int32_t> input, generated;
};
FixtureCase fixture_case(const std::string& name, int i) {
  const TensorStore ref = TensorStore::open(test::fixture(name + "/reference.safetensors"));
  FixtureCase c;
  for (int64_t v : to_i64(ref.get("case" + std::to_string(i) + ".input_ids"))) c.input.push_back(static_cast<int32_t>(v));
  for (int64_t v : to_i64(ref.get("case" + std::to_string(i) + ".generated_ids")))
    c.generated.push_back(static_cast<int32_t>(v));
  return c;
}

CudaEngineOptions small_options(int seqs = 8, const char* precision = "auto") {
  CudaEngineOptions o;
  o.precision = precision;
  o.max_sequences = seqs;
  o.max_tokens_per_step = 512;
  o.context_size = 1024;
  o.vram_budget_bytes = 2ull << 30;
  return o;
}

// Feeds `prompt` in pieces of `piece` tokens (0: one piece) and returns the last piece's logits.
std::vector<float> prefill(Engine& e, uint64_t s, const std::vector<int32_t>& prompt, size_t piece) {
  std::vector<StepResult> r;
  const size_t step = piece ? piece : prompt.size();
  std::vector<float> last;
  for (size_t at = 0; at < prompt.size(); at += step) {
    const size_t n = std::min(step, prompt.size() - at);
    StepItem it;
    it.seq = s;
    it.tokens = std::span<const int32_t>(prompt).subspan(at, n);
    it.prompt = true;
    it.sample = at + n == prompt.size();
    it.logits = LogitsWanted::All;
    e.step(std::span<const StepItem>(&it, 1), r);
    last = r[0].logits;
  }
  return last;
}

class CudaEngineTest : public test::GpuTest {};
// Invariance and lifecycle tests run in both precisions (the fixtures' default is fp32).
class CudaEnginePrecision : public CudaEngineTest, public ::testing::WithParamInterface<const char*> {};

TEST_F(CudaEngineTest, AutoPrecisionIsFp32ForDenseCheckpointsAndFp16ForExl3Ones) {
  EXPECT_TRUE(CudaEngine(weights("glm5-tiny-chat"), nullptr, small_options(2)).fp32());
  EXPECT_FALSE(CudaEngine(weights("glm5-tiny-exl3"), nullptr, small_options(2)).fp32());
  EXPECT_TRUE(CudaEngine(weights("glm5-tiny-exl3"), nullptr, small_options(2, "fp32")).fp32());
  EXPECT_FALSE(CudaEngine(weights("glm5-tiny-chat"), nullptr, small_options(2, "fp16")).fp32());
  EXPECT_THROW(CudaEngine(weights("glm5-tiny-chat"), nullptr, small_options(2, "fp8")), Error);
}

TEST_F(CudaEngineTest, GreedyDecodeFollowsTheFixture) {
  for (const char* name : {"glm5-tiny-a", "glm5-tiny-chat", "glm5-tiny-exl3"}) {
    CudaEngine e(weights(name), nullptr, small_options(8, "fp32"));
    for (int ci = 0; ci < 3; ++ci) {
      const FixtureCase c = fixture_case(name, ci);
      SequenceSpec spec;
      spec.sampling.temperature = 0;
      spec.max_tokens = static_cast<int64_t>(c.input.size() + c.generated.size());
      const uint64_t s = e.open(spec);
      std::vector<StepResult> r;
      StepItem it;
      it.seq = s;
      it.tokens = c.input;
      it.sample = true;
      e.step(std::span<const StepItem>(&it, 1), r);
      std::vector<int32_t> got = {r[0].token};
      while (got.size() < c.generated.size()) {
        const int32_t t = got.back();
        const StepItem d = decode_item(s, t);
        e.step(std::span<const StepItem>(&d, 1), r);
        got.push_back(r[0].token);
      }
      // fp32 precision (these checkpoints' default) makes the reference's decisions, so the
      // greedy tokens are the fixture's.
      EXPECT_EQ(got, c.generated) << name << " case " << ci;
      e.close(s);
    }
    EXPECT_GT(e.graph_steps(), 0u) << "decode steps never ran from a graph";
    // The one-row graph holds at least a kernel per layer and its launches depend on each other.
    const GraphShape g = e.decode_graph_shape(1);
    EXPECT_GE(g.kernels, e.config().num_hidden_layers) << name;
    EXPECT_GE(g.nodes, g.kernels) << name;
    EXPECT_GE(g.edges, g.kernels - 1) << name;
  }
}

TEST_P(CudaEnginePrecision, PromptInPiecesOfSixtyFourEqualsOnePieceBitForBit) {
  CudaEngine e(weights("glm5-tiny-chat"), nullptr, small_options(8, GetParam()));
  FixtureCase c = fixture_case("glm5-tiny-chat", 2);
  std::vector<int32_t> prompt;
  while (prompt.size() < 300) prompt.insert(prompt.end(), c.input.begin(), c.input.end());
  prompt.resize(300);
  SequenceSpec spec;
  spec.sampling.temperature = 0;
  spec.max_tokens = 400;
  const uint64_t a = e.open(spec), b = e.open(spec), d = e.open(spec);
  const auto one = prefill(e, a, prompt, 0);
  const auto pieces = prefill(e, b, prompt, 64);
  const auto bigger = prefill(e, d, prompt, 128);
  const size_t V = static_cast<size_t>(e.config().vocab_size);
  // The last row of the last piece is the prompt's last position in all three.
  ASSERT_GE(one.size(), V);
  std::vector<float> l1(one.end() - V, one.end()), l2(pieces.end() - V, pieces.end()), l3(bigger.end() - V, bigger.end());
  EXPECT_EQ(test::bit_mismatches(l1.data(), l2.data(), V), 0u);
  EXPECT_EQ(test::bit_mismatches(l1.data(), l3.data(), V), 0u);
}

// A step longer than MLA's row pass (kMlaRowsPerPass) runs its sparse layers in passes; every
// row of it keeps the bits it gets in 64-token pieces.
TEST_P(CudaEnginePrecision, AStepLongerThanOneMlaPassEqualsPiecesBitForBit) {
  CudaEngineOptions o = small_options(2, GetParam());
  o.max_tokens_per_step = 1600;
  o.context_size = 2048;
  CudaEngine e(weights("glm5-tiny-chat"), nullptr, o);
  FixtureCase c = fixture_case("glm5-tiny-chat", 2);
  std::vector<int32_t> prompt;
  while (prompt.size() < 1500) prompt.insert(prompt.end(), c.input.begin(), c.input.end());
  prompt.resize(1500);
  SequenceSpec spec;
  spec.sampling.temperature = 0;
  spec.max_tokens = 1600;
  const uint64_t a = e.open(spec), b = e.open(spec);
  const auto one = prefill(e, a, prompt, 0);
  const auto pieces = prefill(e, b, prompt, 64);
  const size_t V = static_cast<size_t>(e.config().vocab_size);
  ASSERT_EQ(one.size(), prompt.size() * V);
  // Every row of the one-step prefill against the same position's row in its piece.
  size_t bad = 0;
  const size_t last_piece = prompt.size() - (prompt.size() - 1) / 64 * 64;
  for (size_t r = 0; r < last_piece; ++r)
    bad += test::bit_mismatches(one.data() + (prompt.size() - last_piece + r) * V, pieces.data() + r * V, V);
  EXPECT_EQ(bad, 0u);
}

TEST_P(CudaEnginePrecision, ASequenceAloneEqualsItAmongSevenOthersBitForBit) {
  CudaEngineOptions o = small_options(8, GetParam());
  o.graphs = false;  // logits come back only from eager steps
  CudaEngine e(weights("glm5-tiny-chat"), nullptr, o);
  const FixtureCase c0 = fixture_case("glm5-tiny-chat", 0);
  auto run = [&](int others) {
    SequenceSpec spec;
    spec.sampling.temperature = 0;
    spec.max_tokens = 200;
    std::vector<uint64_t> seqs;
    for (int i = 0; i <= others; ++i) seqs.push_back(e.open(spec));
    // Everyone prefills (different prompts), then 12 decode steps together.
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i <= others; ++i) {
      std::vector<int32_t> p = fixture_case("glm5-tiny-chat", i % 3).input;
      if (i > 0) p.resize(p.size() - static_cast<size_t>(i % 5));
      prompts.push_back(p);
    }
    std::vector<StepItem> items(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      items[i].seq = seqs[i];
      items[i].tokens = prompts[i];
      items[i].sample = true;
    }
    std::vector<StepResult> r;
    e.step(items, r);
    std::vector<int32_t> next(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) next[i] = r[i].token;
    std::vector<float> trace;
    for (int step = 0; step < 12; ++step) {
      for (size_t i = 0; i < seqs.size(); ++i) {
        items[i].tokens = std::span<const int32_t>(&next[i], 1);
        items[i].prompt = false;
        items[i].logits = i == 0 ? LogitsWanted::Last : LogitsWanted::None;
      }
      e.step(items, r);
      trace.insert(trace.end(), r[0].logits.begin(), r[0].logits.end());
      for (size_t i = 0; i < seqs.size(); ++i) next[i] = r[i].token;
    }
    for (uint64_t s : seqs) e.close(s);
    return trace;
  };
  const auto alone = run(0), crowded = run(7);
  ASSERT_EQ(alone.size(), crowded.size());
  EXPECT_EQ(test::bit_mismatches(alone.data(), crowded.data(), alone.size()), 0u);
}

// Every VRAM allocation poisoned (0xFF: NaN) gives the bits of an engine on fresh memory, for
// two sequences one after the other (the second gets the first's slot and cache blocks): no
// kernel reads memory before writing it.
TEST_P(CudaEnginePrecision, PoisonedMemoryGivesTheFreshEngineBits) {
  for (const char* model : {"glm5-tiny-chat", "glm5-variants/glm5-var-allsparse-kpool16", "glm5-tiny-exl3"}) {
    std::vector<float> want;
    for (bool poison : {false, true}) {
      CudaEngineOptions o = small_options(2, GetParam());
      o.graphs = false;  // logits come back only from eager steps
      o.poison_vram = poison;
      CudaEngine e(weights(model), nullptr, o);
      std::vector<float> got;
      for (int i : {0, 1}) {
        SequenceSpec spec;
        spec.sampling.temperature = 0;
        spec.max_tokens = 200;
        const uint64_t s = e.open(spec);
        std::vector<float> last = prefill(e, s, fixture_case(model, i).input, 0);
        got.insert(got.end(), last.begin(), last.end());
        std::vector<StepResult> r;
        int32_t next = 0;
        for (int k = 0; k < 12; ++k) {
          next = static_cast<int32_t>(std::max_element(last.end() - e.config().vocab_size, last.end()) -
                                      (last.end() - e.config().vocab_size));
          const StepItem it = decode_item(s, next, LogitsWanted::Last);
          e.step(std::span<const StepItem>(&it, 1), r);
          last = r[0].logits;
          got.insert(got.end(), last.begin(), last.end());
        }
        e.close(s);
      }
      size_t finite = 0;
      for (float v : got) finite += std::isfinite(v);
      EXPECT_EQ(finite, got.size()) << model << (poison ? ", poisoned" : ", fresh") << ": non-finite logits";
      if (!poison) want = got;
      else {
        ASSERT_EQ(want.size(), got.size()) << model;
        EXPECT_EQ(test::bit_mismatches(want.data(), got.data(), want.size()), 0u)
            << model << ": " << test::where_they_part(want, got, static_cast<size_t>(e.config().vocab_size));
      }
    }
  }
}

// Logits of two sequences (fixture cases 0 and 1 of `model`) over their prompts and twelve
// batched decode steps, concatenated, from an engine with options `o` (eager: logits come back
// only from eager steps). What the bit-for-bit comparisons of engine variants below compare.
std::vector<float> two_sequence_logits(const char* model, const CudaEngineOptions& o) {
  CudaEngine e(weights(model), nullptr, o);
  const int64_t V = e.config().vocab_size;
  SequenceSpec spec;
  spec.sampling.temperature = 0;
  spec.max_tokens = 200;
  const uint64_t s0 = e.open(spec), s1 = e.open(spec);
  const FixtureCase c0 = fixture_case(model, 0), c1 = fixture_case(model, 1);
  std::vector<StepItem> items(2);
  items[0].seq = s0, items[0].tokens = c0.input;
  items[1].seq = s1, items[1].tokens = c1.input;
  for (StepItem& it : items) it.sample = true, it.logits = LogitsWanted::Last;
  std::vector<StepResult> r;
  e.step(items, r);
  std::vector<float> got;
  std::vector<int32_t> next(2);
  for (int k = 0; k < 12; ++k) {
    for (size_t i = 0; i < 2; ++i) {
      if (static_cast<int64_t>(r[i].logits.size()) != V) {
        ADD_FAILURE() << model << ": " << r[i].logits.size() << " logits, vocab " << V;
        return {};
      }
      got.insert(got.end(), r[i].logits.begin(), r[i].logits.end());
      next[i] = r[i].token;
      items[i].tokens = std::span<const int32_t>(&next[i], 1);
      items[i].prompt = false;
    }
    e.step(items, r);
  }
  e.close(s0);
  e.close(s1);
  return got;
}

// `got` equals `want` bit for bit (rows of the model's vocabulary).
void expect_same_logits(const char* model, const std::vector<float>& want, const std::vector<float>& got) {
  ASSERT_EQ(want.size(), got.size()) << model;
  EXPECT_EQ(test::bit_mismatches(want.data(), got.data(), want.size()), 0u)
      << model << ": " << test::where_they_part(want, got, static_cast<size_t>(weights(model).cfg.vocab_size));
}

// The side stream (engine/side_stream.h: the shared expert beside the routed ones, KDA's gate
// projections beside its convolution) only reorders launches: two sequences' prompts and twelve
// batched decode steps give the one-stream engine's logits bit for bit.
TEST_P(CudaEnginePrecision, SideBranchesGiveTheOneStreamBits) {
  for (const char* model : {"glm5-tiny-chat", "glm5-variants/glm5-var-group-softplus", "glm5-tiny-exl3"}) {
    CudaEngineOptions o = small_options(2, GetParam());
    o.graphs = false;
    o.branches = false;
    const std::vector<float> want = two_sequence_logits(model, o);
    o.branches = true;
    expect_same_logits(model, want, two_sequence_logits(model, o));
  }
}

// The per-step kernels started early (core/programmatic.h: each waits for the kernel ahead
// before touching memory): the same logits, bit for bit, as plain launches — prefill and 12
// decode steps of two sequences, three fixtures (dense, grouped routing, EXL3). On devices
// without programmatic launch both runs are plain.
TEST_P(CudaEnginePrecision, ChainedLaunchesGiveThePlainBits) {
  for (const char* model : {"glm5-tiny-chat", "glm5-variants/glm5-var-group-softplus", "glm5-tiny-exl3"}) {
    CudaEngineOptions o = small_options(2, GetParam());
    o.graphs = false;
    set_chain_programmatic(0);
    const std::vector<float> want = two_sequence_logits(model, o);
    set_chain_programmatic(2);
    const std::vector<float> got = two_sequence_logits(model, o);
    set_chain_programmatic(1);
    expect_same_logits(model, want, got);
  }
}

// The skinny linears letting the next kernel launch before they end (lin::linear_trigger,
// with the per-step kernels chained as configured): the plain launches' logits, bit for bit.
TEST_P(CudaEnginePrecision, TriggeredLinearsGiveThePlainBits) {
  for (const char* model : {"glm5-tiny-chat", "glm5-variants/glm5-var-group-softplus", "glm5-tiny-exl3"}) {
    CudaEngineOptions o = small_options(2, GetParam());
    o.graphs = false;
    lin::set_linear_trigger(0);
    const std::vector<float> want = two_sequence_logits(model, o);
    lin::set_linear_trigger(2);
    const std::vector<float> got = two_sequence_logits(model, o);
    lin::set_linear_trigger(1);
    expect_same_logits(model, want, got);
  }
}

TEST_P(CudaEnginePrecision, GraphReplayGivesTheEagerTokens) {
  const FixtureCase c = fixture_case("glm5-tiny-a", 1);
  auto run = [&](bool graphs) {
    CudaEngineOptions o = small_options(8, GetParam());
    o.graphs = graphs;
    CudaEngine e(weights("glm5-tiny-a"), nullptr, o);
    SequenceSpec spec;
    spec.sampling.temperature = 0;
    spec.max_tokens = 200;
    std::vector<uint64_t> seqs = {e.open(spec), e.open(spec), e.open(spec)};
    std::vector<StepItem> items(3);
    for (size_t i = 0; i < 3; ++i) {
      items[i].seq = seqs[i];
      items[i].tokens = std::span<const int32_t>(c.input).first(c.input.size() - i);
      items[i].sample = true;
    }
    std::vector<StepResult> r;
    e.step(items, r);
    std::vector<int32_t> out, next(3);
    for (int step = 0; step < 16; ++step) {
      for (size_t i = 0; i < 3; ++i) {
        next[i] = r[i].token;
        out.push_back(next[i]);
        items[i].tokens = std::span<const int32_t>(&next[i], 1);
        items[i].prompt = false;
      }
      e.step(items, r);
    }
    EXPECT_EQ(graphs, e.graph_steps() > 0);
    return out;
  };
  EXPECT_EQ(run(true), run(false));
}

TEST_F(CudaEngineTest, RefusesWhatItCannotHoldAndKeepsServing) {
  // A budget far too small for the weights: a clear error at load, not a crash.
  {
    CudaEngineOptions o = small_options();
    o.vram_budget_bytes = 1 << 20;
    try {
      CudaEngine e(weights("glm5-tiny-chat"), nullptr, o);
      FAIL() << "a 1 MiB budget held the model";
    } catch (const VramExhausted& ex) {
      EXPECT_NE(std::string(ex.what()).find("do not fit"), std::string::npos) << ex.what();
    }
  }
  CudaEngineOptions o = small_options(2);
  CudaEngine e(weights("glm5-tiny-chat"), nullptr, o);
  SequenceSpec big;
  big.max_tokens = e.max_tokens_per_sequence() + 1;
  EXPECT_THROW(e.open(big), EngineFull);
  SequenceSpec ok;
  ok.sampling.temperature = 0;
  ok.max_tokens = 64;
  const uint64_t a = e.open(ok), b = e.open(ok);
  EXPECT_THROW(e.open(ok), EngineFull);  // both slots taken
  // A sequence that grows past what it reserved is refused, and the engine keeps serving.
  std::vector<int32_t> long_prompt(e.max_tokens_per_sequence() > 200 ? 200 : 100, 7);
  StepItem it;
  it.seq = a;
  it.tokens = long_prompt;
  it.sample = true;
  std::vector<StepResult> r;
  EXPECT_THROW(e.step(std::span<const StepItem>(&it, 1), r), EngineFull);
  e.close(a);  // a cancelled stream: its slot and blocks come back
  const FixtureCase c = fixture_case("glm5-tiny-chat", 0);
  it.seq = b;
  it.tokens = c.input;
  e.step(std::span<const StepItem>(&it, 1), r);
  EXPECT_EQ(r[0].token, c.generated[0]);
  const uint64_t again = e.open(ok);
  EXPECT_NE(again, 0u);
  // A bad token id is refused before anything changes.
  const int32_t bad = static_cast<int32_t>(e.config().vocab_size);
  it.seq = again;
  it.tokens = std::span<const int32_t>(&bad, 1);
  EXPECT_THROW(e.step(std::span<const StepItem>(&it, 1), r), Error);
}

TEST_P(CudaEnginePrecision, CancellingASequenceBetweenGraphStepsLeavesTheOthersAlone) {
  // Three sequences decode from graphs; one is closed mid-way (a cancelled stream), a new one
  // joins in its slot; the two survivors' tokens equal their solo runs.
  const FixtureCase c = fixture_case("glm5-tiny-chat", 1);
  auto solo = [&](size_t cut) {
    CudaEngine e(weights("glm5-tiny-chat"), nullptr, small_options(8, GetParam()));
    SequenceSpec spec;
    spec.sampling.temperature = 0;
    spec.max_tokens = 200;
    const uint64_t s = e.open(spec);
    std::vector<StepResult> r;
    StepItem it;
    it.seq = s;
    it.tokens = std::span<const int32_t>(c.input).first(c.input.size() - cut);
    it.sample = true;
    e.step(std::span<const StepItem>(&it, 1), r);
    std::vector<int32_t> out = {r[0].token};
    for (int k = 0; k < 16; ++k) {
      const int32_t t = out.back();
      const StepItem d = decode_item(s, t);
      e.step(std::span<const StepItem>(&d, 1), r);
      out.push_back(r[0].token);
    }
    return out;
  };
  CudaEngine e(weights("glm5-tiny-chat"), nullptr, small_options(8, GetParam()));
  SequenceSpec spec;
  spec.sampling.temperature = 0;
  spec.max_tokens = 200;
  std::vector<uint64_t> seqs = {e.open(spec), e.open(spec), e.open(spec)};
  std::vector<std::vector<int32_t>> out(3);
  std::vector<StepResult> r;
  {
    std::vector<StepItem> items(3);
    for (size_t i = 0; i < 3; ++i) {
      items[i].seq = seqs[i];
      items[i].tokens = std::span<const int32_t>(c.input).first(c.input.size() - i);
      items[i].sample = true;
    }
    e.step(items, r);
    for (size_t i = 0; i < 3; ++i) out[i].push_back(r[i].token);
  }
  std::vector<size_t> live = {0, 1, 2};
  for (int k = 0; k < 16; ++k) {
    if (k == 6) {  // cancel sequence 1, open a stranger in its slot
      e.close(seqs[1]);
      live = {0, 2};
      const uint64_t x = e.open(spec);
      const FixtureCase stranger = fixture_case("glm5-tiny-chat", 0);  // outlives the step that reads its tokens
      StepItem p;
      p.seq = x;
      p.tokens = stranger.input;
      p.sample = true;
      std::vector<StepResult> rx;
      e.step(std::span<const StepItem>(&p, 1), rx);
    }
    std::vector<StepItem> items;
    std::vector<int32_t> next(3);
    for (size_t i : live) {
      next[i] = out[i].back();
      items.push_back(decode_item(seqs[i], next[i]));
    }
    e.step(items, r);
    for (size_t j = 0; j < live.size(); ++j) out[live[j]].push_back(r[j].token);
  }
  EXPECT_EQ(out[0], solo(0));
  EXPECT_EQ(out[2], solo(2));
  EXPECT_GT(e.graph_steps(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaEnginePrecision, ::testing::Values("fp32", "fp16"),
                         [](const auto& i) { return std::string(i.param); });

}  // namespace
}  // namespace ft::cuda
