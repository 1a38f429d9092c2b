// The Generation gRPC service end to end over a real channel: fixture greedy tokens and logprobs,
// status codes for bad requests, cancellation by closing the stream, model info and health.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "gpu-worker/service/generation_service.h"
#include "tests/gpu-worker/worker_service_fixture.h"
#include "shared/model/tensor_convert.h"
#include "tests/support/test_paths.h"

using namespace ft;
using namespace ft::worker;
namespace pb = flashtier::v1;

namespace {

using ServiceTest = ft::worker::testing::WorkerServiceTest;

const TensorStore& ref() {
  static const TensorStore r = TensorStore::open(test::fixture("glm5-tiny-chat/reference.safetensors"));
  return r;
}

std::vector<int64_t> ids(const std::string& name) { return to_i64(ref().get(name)); }

struct Streamed {
  std::vector<pb::GeneratedToken> tokens;
  pb::GenerateResponse last;
  grpc::Status status;
  int messages = 0;
};

Streamed run(pb::Generation::Stub& stub, const pb::GenerateRequest& req) {
  grpc::ClientContext ctx;
  auto reader = stub.Generate(&ctx, req);
  Streamed s;
  pb::GenerateResponse r;
  while (reader->Read(&r)) {
    ++s.messages;
    for (const auto& t : r.tokens()) s.tokens.push_back(t);
    s.last = r;
  }
  s.status = reader->Finish();
  return s;
}

pb::GenerateRequest greedy_case(int c, uint32_t max_new) {
  pb::GenerateRequest req;
  for (int64_t v : ids("case" + std::to_string(c) + ".input_ids")) req.add_prompt_token_ids(static_cast<int32_t>(v));
  req.mutable_sampling()->set_temperature(0);
  req.set_max_new_tokens(max_new);
  req.set_ignore_eos(true);
  return req;
}

}  // namespace

TEST_F(ServiceTest, GreedyTokensAndLogprobsMatchTheFixture) {
  auto s = stub();
  for (int c = 0; c < 3; ++c) {
    const auto want = ids("case" + std::to_string(c) + ".generated_ids");
    pb::GenerateRequest req = greedy_case(c, static_cast<uint32_t>(want.size()));
    req.set_logprobs(true);
    req.set_top_logprobs(3);
    const Streamed got = run(*s, req);
    ASSERT_TRUE(got.status.ok()) << got.status.error_message();
    ASSERT_EQ(got.tokens.size(), want.size());
    // Reference log-probabilities: log-softmax of transformers' logits at each position.
    const auto pre = to_f32(ref().get("case" + std::to_string(c) + ".prefill_logits"));
    const auto dec = to_f32(ref().get("case" + std::to_string(c) + ".decode_logits"));
    const int64_t V = 3029, L = static_cast<int64_t>(pre.size()) / V;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got.tokens[i].token_id(), want[i]) << "case " << c << " token " << i;
      const float* row = i == 0 ? pre.data() + (L - 1) * V : dec.data() + (i - 1) * V;
      double mx = row[0], sum = 0;
      for (int64_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
      EXPECT_NEAR(got.tokens[i].logprob(), row[want[i]] - mx - std::log(sum), 2e-4);
      ASSERT_EQ(got.tokens[i].top_logprobs_size(), 3);
      EXPECT_EQ(got.tokens[i].top_logprobs(0).token_id(), want[i]);  // greedy picks the best
    }
    EXPECT_TRUE(got.last.finished());
    EXPECT_EQ(got.last.finish_reason(), pb::FINISH_REASON_LENGTH);
    EXPECT_EQ(got.last.usage().completion_tokens(), want.size());
  }
}

TEST_F(ServiceTest, StopsOnTheModelsEos) {
  // generation_config.json's EOS ids are 3000, 3007, 3009: greedy output ends at the first one.
  auto s = stub();
  pb::GenerateRequest req = greedy_case(1, 200);
  req.set_ignore_eos(false);
  const Streamed got = run(*s, req);
  ASSERT_TRUE(got.status.ok());
  const std::vector<int32_t> eos = {3000, 3007, 3009};
  if (got.last.finish_reason() == pb::FINISH_REASON_STOP) {
    EXPECT_NE(std::find(eos.begin(), eos.end(), got.tokens.back().token_id()), eos.end());
    EXPECT_EQ(got.last.stop_token_id(), got.tokens.back().token_id());
  } else {
    EXPECT_EQ(got.tokens.size(), 200u);
  }
  for (size_t i = 0; i + 1 < got.tokens.size(); ++i)
    EXPECT_EQ(std::find(eos.begin(), eos.end(), got.tokens[i].token_id()), eos.end());
}

TEST_F(ServiceTest, BadRequestsGetStatusCodes) {
  auto s = stub();
  pb::GenerateRequest empty;
  EXPECT_EQ(run(*s, empty).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  pb::GenerateRequest bad = greedy_case(0, 4);
  bad.add_prompt_token_ids(5000);
  const Streamed r = run(*s, bad);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(r.status.error_message().find("5000"), std::string::npos);
  pb::GenerateRequest t = greedy_case(0, 4);
  t.mutable_sampling()->set_top_p(1.5f);
  EXPECT_EQ(run(*s, t).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  pb::GenerateRequest longer = greedy_case(0, 40000);
  EXPECT_EQ(run(*s, longer).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServiceTest, CancellingTheCallFreesTheSlot) {
  auto s = stub();
  grpc::ClientContext ctx;
  auto reader = s->Generate(&ctx, greedy_case(2, 30000));
  pb::GenerateResponse r;
  ASSERT_TRUE(reader->Read(&r));
  pb::StatsResponse st;
  {
    grpc::ClientContext c2;
    ASSERT_TRUE(s->Stats(&c2, {}, &st).ok());
    EXPECT_EQ(st.running(), 1u);
  }
  const uint64_t cancelled_before = st.cancelled();
  ctx.TryCancel();
  const auto t0 = std::chrono::steady_clock::now();
  while (true) {
    grpc::ClientContext c3;
    ASSERT_TRUE(s->Stats(&c3, {}, &st).ok());
    if (st.running() == 0) break;
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const auto freed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(freed_ms, 100.0);
  EXPECT_EQ(st.cancelled(), cancelled_before + 1);
  reader->Finish();
}

TEST_F(ServiceTest, InfoHealthTokenizer) {
  auto s = stub();
  grpc::ClientContext c1, c2, c3, c4;
  pb::ModelInfoResponse info;
  ASSERT_TRUE(s->ModelInfo(&c1, {}, &info).ok());
  EXPECT_EQ(info.vocab_size(), 3029u);
  EXPECT_EQ(info.model_type(), "glm5_next");
  EXPECT_EQ(std::vector<int32_t>(info.eos_token_ids().begin(), info.eos_token_ids().end()),
            (std::vector<int32_t>{3000, 3007, 3009}));
  EXPECT_TRUE(info.has_tokenizer());
  pb::HealthResponse h;
  ASSERT_TRUE(s->Health(&c2, {}, &h).ok());
  EXPECT_EQ(h.status(), pb::HealthResponse::SERVING);
  pb::TokenizeRequest tr;
  tr.set_text("<|user|>hello");
  pb::TokenizeResponse tk;
  ASSERT_TRUE(s->Tokenize(&c3, tr, &tk).ok());
  ASSERT_GE(tk.token_ids_size(), 2);
  EXPECT_EQ(tk.token_ids(0), 3007);
  pb::DetokenizeRequest dr;
  dr.mutable_token_ids()->CopyFrom(tk.token_ids());
  pb::DetokenizeResponse dt;
  ASSERT_TRUE(s->Detokenize(&c4, dr, &dt).ok());
  EXPECT_EQ(dt.text(), "<|user|>hello");
}
