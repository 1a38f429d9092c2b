// Constraints through the Generation gRPC API on the tiny-chat fixture (random-ish weights: only
// the constraint can make the output valid): a regex and a JSON Schema hold for sampled outputs,
// logit_bias -100 removes the greedy token and +100 forces one, min_tokens keeps EOS away, and
// bad constraints are INVALID_ARGUMENT naming the field. Expected outputs are checked by
// nlohmann's parser and std::regex, not by our matcher.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "tests/gpu-worker/worker_service_fixture.h"

using namespace ft;
using namespace ft::worker;
namespace pb = flashtier::v1;

namespace {

class ConstrainedService : public ft::worker::testing::WorkerServiceTest {
 protected:
  struct Out {
    std::vector<int32_t> ids;
    pb::GenerateResponse last;
    grpc::Status status;
  };
  static Out run(const pb::GenerateRequest& req) {
    auto s = stub();
    grpc::ClientContext ctx;
    auto reader = s->Generate(&ctx, req);
    Out o;
    pb::GenerateResponse r;
    while (reader->Read(&r)) {
      for (const auto& t : r.tokens()) o.ids.push_back(t.token_id());
      o.last = r;
    }
    o.status = reader->Finish();
    return o;
  }
  // The text of the output without its final end token (none when the constraint ended it).
  static std::string text(const Out& o) {
    std::vector<int32_t> ids = o.ids;
    if (o.last.finish_reason() == pb::FINISH_REASON_STOP && o.last.stop_token_id() >= 0 && !ids.empty()) ids.pop_back();
    return core_->tokenizer()->decode(ids);
  }
  static pb::GenerateRequest request(uint32_t max_new, uint64_t seed) {
    pb::GenerateRequest r;
    for (int32_t id : core_->tokenizer()->encode("Answer: ")) r.add_prompt_token_ids(id);
    r.mutable_sampling()->set_temperature(1.0f);
    r.mutable_sampling()->set_seed(seed);
    r.set_max_new_tokens(max_new);
    return r;
  }
};

}  // namespace

TEST_F(ConstrainedService, RegexHoldsForSampledOutputs) {
  const std::regex want("[a-z]{2,6}-[0-9]{1,3}");
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    pb::GenerateRequest r = request(64, seed);
    r.mutable_constraint()->set_regex("[a-z]{2,6}-[0-9]{1,3}");
    const Out o = run(r);
    ASSERT_TRUE(o.status.ok()) << o.status.error_message();
    EXPECT_EQ(o.last.finish_reason(), pb::FINISH_REASON_STOP);
    EXPECT_TRUE(std::regex_match(text(o), want)) << "seed " << seed << ": '" << text(o) << "'";
  }
}

TEST_F(ConstrainedService, JsonSchemaHoldsForSampledOutputs) {
  const std::string schema = R"({"type":"object","properties":{"id":{"type":"integer","minimum":1,"maximum":50},
      "ok":{"type":"boolean"},"tag":{"enum":["x","y"]}},"required":["id","ok"],"additionalProperties":false})";
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    pb::GenerateRequest r = request(80, seed);
    r.mutable_constraint()->set_json_schema(schema);
    const Out o = run(r);
    ASSERT_TRUE(o.status.ok()) << o.status.error_message();
    ASSERT_EQ(o.last.finish_reason(), pb::FINISH_REASON_STOP) << text(o);
    const nlohmann::json j = nlohmann::json::parse(text(o), nullptr, false);
    ASSERT_TRUE(j.is_object()) << text(o);
    ASSERT_TRUE(j["id"].is_number_integer()) << text(o);
    EXPECT_GE(j["id"].get<int>(), 1);
    EXPECT_LE(j["id"].get<int>(), 50);
    EXPECT_TRUE(j["ok"].is_boolean());
    for (auto it = j.begin(); it != j.end(); ++it) EXPECT_TRUE(it.key() == "id" || it.key() == "ok" || it.key() == "tag") << text(o);
    if (j.contains("tag")) EXPECT_TRUE(j["tag"] == "x" || j["tag"] == "y");
  }
}

TEST_F(ConstrainedService, LogitBiasBansAndForces) {
  pb::GenerateRequest r = request(4, 1);
  r.mutable_sampling()->set_temperature(0);
  r.set_ignore_eos(true);
  const Out plain = run(r);
  ASSERT_TRUE(plain.status.ok());
  ASSERT_EQ(plain.ids.size(), 4u);
  (*r.mutable_logit_bias())[plain.ids[0]] = -100;
  const Out banned = run(r);
  ASSERT_TRUE(banned.status.ok());
  for (int32_t t : banned.ids) EXPECT_NE(t, plain.ids[0]);
  r.clear_logit_bias();
  (*r.mutable_logit_bias())[1234] = 100;
  const Out forced = run(r);
  ASSERT_TRUE(forced.status.ok());
  EXPECT_EQ(forced.ids, std::vector<int32_t>(4, 1234));
}

TEST_F(ConstrainedService, MinTokensKeepsEosAway) {
  const int32_t eos = core_->eos_token_ids().at(0);
  pb::GenerateRequest r = request(20, 3);
  (*r.mutable_logit_bias())[eos] = 100;  // EOS would come first
  const Out early = run(r);
  ASSERT_TRUE(early.status.ok());
  EXPECT_EQ(early.ids, std::vector<int32_t>{eos});
  r.set_min_tokens(6);
  const Out held = run(r);
  ASSERT_TRUE(held.status.ok());
  ASSERT_EQ(held.ids.size(), 7u) << "six tokens, then the favoured EOS";
  for (size_t i = 0; i < 6; ++i) EXPECT_NE(held.ids[i], eos);
  EXPECT_EQ(held.ids.back(), eos);
  EXPECT_EQ(held.last.finish_reason(), pb::FINISH_REASON_STOP);
}

TEST_F(ConstrainedService, BadConstraintsAreInvalidArgument) {
  auto status_of = [](const pb::GenerateRequest& r) { return run(r).status; };
  pb::GenerateRequest r = request(8, 1);
  r.mutable_constraint()->set_json_schema(R"({"type":"integer","multipleOf":2})");
  grpc::Status s = status_of(r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "constraint.json_schema: unsupported keyword 'multipleOf' at #");
  r.mutable_constraint()->set_regex("(ab");
  EXPECT_EQ(status_of(r).error_message(), "constraint.regex: at offset 0: unbalanced '('");
  r.mutable_constraint()->set_ebnf("root ::= \"a\" root");
  EXPECT_EQ(status_of(r).error_message(), "constraint.ebnf: the constraint matches no finite output, so generation could never end");
  r.mutable_constraint()->set_ebnf("root ::= <nosuchtag>");
  EXPECT_EQ(status_of(r).error_message(), "constraint.ebnf: the tokenizer has no added token '<nosuchtag>'");
  r.clear_constraint();
  (*r.mutable_logit_bias())[5] = 150;
  EXPECT_EQ(status_of(r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  r.clear_logit_bias();
  r.set_min_tokens(9);
  EXPECT_EQ(status_of(r).error_message(), "min_tokens (9) is more than max_new_tokens (8)");
}

TEST_F(ConstrainedService, ACompleteConstraintEndsTheSequenceEvenWithIgnoreEos) {
  pb::GenerateRequest r = request(40, 5);
  r.set_ignore_eos(true);  // no end id could be sampled
  r.mutable_constraint()->set_regex("[a-z]{4}!");
  const Out o = run(r);
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_EQ(o.last.finish_reason(), pb::FINISH_REASON_STOP);
  EXPECT_EQ(o.last.stop_token_id(), -1);
  EXPECT_TRUE(std::regex_match(text(o), std::regex("[a-z]{4}!"))) << text(o);
  EXPECT_LE(o.ids.size(), 5u);
}
