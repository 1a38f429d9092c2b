// The continuous-batching scheduler driven directly: fixture greedy tokens, stop conditions,
// chunked prefill, batch invariance, cancellation and queue limits.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "gpu-worker/engine/scheduler.h"
#include "shared/engine/cpu_engine.h"
#include "shared/model/tensor_convert.h"
#include "tests/support/test_paths.h"

using namespace ft;
using namespace ft::worker;

namespace {

const ModelWeights& tiny_chat() {
  static const ModelWeights w = load_model(test::fixture("glm5-tiny-chat/model"));
  return w;
}

struct Case {
  std::vector<int32_t> input;
  std::vector<int32_t> generated;
};

Case fixture_case(int i) {
  static const TensorStore ref = TensorStore::open(test::fixture("glm5-tiny-chat/reference.safetensors"));
  Case c;
  for (int64_t v : to_i64(ref.get("case" + std::to_string(i) + ".input_ids"))) c.input.push_back(static_cast<int32_t>(v));
  for (int64_t v : to_i64(ref.get("case" + std::to_string(i) + ".generated_ids")))
    c.generated.push_back(static_cast<int32_t>(v));
  return c;
}

struct Result {
  std::vector<int32_t> tokens;
  Outcome outcome;
};

Result collect(const std::shared_ptr<RequestStream>& s) {
  Result r;
  std::vector<TokenEvent> ev;
  while (true) {
    auto done = s->wait(ev, std::chrono::milliseconds(1000));
    if (done) {
      r.outcome = *done;
      break;
    }
  }
  for (const auto& e : ev) r.tokens.push_back(e.token);
  return r;
}

Request greedy(const std::vector<int32_t>& prompt, uint32_t max_new) {
  Request r;
  r.prompt = prompt;
  r.params.sampling.temperature = 0;
  r.params.max_new_tokens = max_new;
  r.params.ignore_eos = true;
  return r;
}

}  // namespace

TEST(Scheduler, GreedyReproducesTheFixtureWithSmallPrefillChunks) {
  CpuEngine eng(tiny_chat(), nullptr, 8);
  SchedulerOptions o;
  o.chunk_size = 7;  // prompts of 20-41 tokens arrive in several steps
  Scheduler s(eng, o);
  for (int i = 0; i < 3; ++i) {
    const Case c = fixture_case(i);
    Request r = greedy(c.input, static_cast<uint32_t>(c.generated.size()));
    auto stream = r.stream;
    s.submit(std::move(r));
    const Result got = collect(stream);
    EXPECT_EQ(got.tokens, c.generated) << "case " << i;
    EXPECT_EQ(got.outcome.reason, Finish::Length);
    EXPECT_EQ(got.outcome.completion_tokens, c.generated.size());
    EXPECT_EQ(got.outcome.prompt_tokens, c.input.size());
  }
}

TEST(Scheduler, EightConcurrentSequencesMatchSequentialOnes) {
  CpuEngine eng(tiny_chat(), nullptr, 8);
  SchedulerOptions o;
  o.max_batch_size = 8;
  Scheduler s(eng, o);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i) {
    auto p = fixture_case(i % 3).input;
    p.resize(p.size() - static_cast<size_t>(i));  // eight different prompts
    prompts.push_back(p);
  }
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : prompts) {
    Request r = greedy(p, 12);
    auto st = r.stream;
    s.submit(std::move(r));
    alone.push_back(collect(st).tokens);
  }
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& p : prompts) {
    Request r = greedy(p, 12);
    streams.push_back(r.stream);
    s.submit(std::move(r));
  }
  for (int i = 0; i < 8; ++i) EXPECT_EQ(collect(streams[i]).tokens, alone[i]) << i;
  EXPECT_EQ(s.stats().running, 0u);
}

TEST(Scheduler, StopsOnEosAndOnStopTokens) {
  CpuEngine eng(tiny_chat(), nullptr, 8);
  const Case c = fixture_case(0);
  SchedulerOptions o;
  o.eos_token_ids = {c.generated[5]};
  Scheduler s(eng, o);
  Request r = greedy(c.input, 30);
  r.params.ignore_eos = false;
  auto st = r.stream;
  s.submit(std::move(r));
  Result got = collect(st);
  const auto first = std::find(c.generated.begin(), c.generated.end(), c.generated[5]) - c.generated.begin();
  EXPECT_EQ(got.tokens, std::vector<int32_t>(c.generated.begin(), c.generated.begin() + first + 1));
  EXPECT_EQ(got.outcome.reason, Finish::Stop);
  EXPECT_EQ(got.outcome.stop_token, c.generated[5]);
  Request r2 = greedy(c.input, 30);  // ignore_eos: stop token ids still stop
  r2.params.stop_token_ids = {c.generated[2]};
  auto st2 = r2.stream;
  s.submit(std::move(r2));
  got = collect(st2);
  EXPECT_EQ(got.tokens.back(), c.generated[2]);
  EXPECT_EQ(got.outcome.reason, Finish::Stop);
}

TEST(Scheduler, ContextLimitAndValidation) {
  CpuEngine eng(tiny_chat(), nullptr, 8);
  SchedulerOptions o;
  o.context_size = 30;
  Scheduler s(eng, o);
  const Case c = fixture_case(0);  // 20 prompt tokens
  Request r = greedy(c.input, 0);   // 0: up to the context limit
  auto st = r.stream;
  s.submit(std::move(r));
  const Result got = collect(st);
  EXPECT_EQ(got.tokens.size(), 10u);
  EXPECT_EQ(got.outcome.reason, Finish::Length);
  auto code = [&](Request q) {
    try {
      s.submit(std::move(q));
    } catch (const SubmitError& e) {
      return static_cast<int>(e.code);
    }
    return -1;
  };
  EXPECT_EQ(code(greedy(c.input, 11)), SubmitError::InvalidArgument);
  EXPECT_EQ(code(greedy({}, 1)), SubmitError::InvalidArgument);
  EXPECT_EQ(code(greedy({1, 99999}, 1)), SubmitError::InvalidArgument);
  Request big = greedy(c.input, 1);
  big.params.top_logprobs = 21;
  EXPECT_EQ(code(std::move(big)), SubmitError::InvalidArgument);
}

TEST(Scheduler, CancelledRequestsFreeTheirSlotAndQueueLimitsHold) {
  CpuEngine eng(tiny_chat(), nullptr, 8);
  SchedulerOptions o;
  o.max_batch_size = 1;
  o.max_queue = 1;
  Scheduler s(eng, o);
  const Case c = fixture_case(2);
  Request a = greedy(c.input, 4000 - 41);
  auto sa = a.stream;
  s.submit(std::move(a));
  Request b = greedy(c.input, 5);
  auto sb = b.stream;
  s.submit(std::move(b));  // waits: the batch holds one
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_THROW(s.submit(greedy(c.input, 5)), SubmitError);  // queue of one is full
  sa->cancel();
  const Result rb = collect(sb);  // b runs once a's slot is free
  EXPECT_EQ(rb.tokens.size(), 5u);
  EXPECT_EQ(s.stats().cancelled, 1u);
  EXPECT_EQ(s.stats().running, 0u);
}

TEST(Scheduler, SeededSamplingIsReproducibleAcrossBatches) {
  CpuEngine eng(tiny_chat(), nullptr, 8);
  Scheduler s(eng, {});
  const Case c = fixture_case(1);
  auto sampled = [&](uint64_t seed) {
    Request r = greedy(c.input, 16);
    r.params.sampling.temperature = 1.0f;
    r.params.sampling.seed = seed;
    auto st = r.stream;
    s.submit(std::move(r));
    return st;
  };
  const auto alone = collect(sampled(5)).tokens;
  auto x = sampled(5), y = sampled(6), z = sampled(5);
  EXPECT_EQ(collect(x).tokens, alone);
  EXPECT_EQ(collect(z).tokens, alone);
  EXPECT_NE(collect(y).tokens, alone);
}
