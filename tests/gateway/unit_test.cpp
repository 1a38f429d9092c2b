// Gateway pieces without a network: stop-string matcher, per-choice output (stop tokens, special
// tokens, stop strings), metrics exposition, flags, request schema.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gateway/choice_output.h"
#include "gateway/metrics.h"
#include "gateway/openai_schema.h"
#include "gateway/options.h"
#include "gateway/stop_matcher.h"
#include "shared/text/tokenizer.h"

namespace ft::gateway {
namespace {

using json = nlohmann::json;

std::string feed(StopMatcher& m, const std::vector<std::string>& pieces, std::vector<std::string>* emitted = nullptr) {
  std::string out;
  for (const auto& p : pieces) {
    auto r = m.push(p);
    if (emitted) emitted->push_back(r.text);
    out += r.text;
    if (r.stopped) return out;
  }
  return out + m.flush();
}

TEST(GatewayStopMatcher, HoldsBackPartialMatchesAcrossPieces) {
  StopMatcher m({"</end>"});
  std::vector<std::string> emitted;
  EXPECT_EQ(feed(m, {"abc</", "en", "d>tail"}, &emitted), "abc");
  EXPECT_EQ(emitted[0], "abc");  // "</" held back
  EXPECT_EQ(emitted[1], "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("more").text, "");  // nothing after a stop
}

TEST(GatewayStopMatcher, ReleasesAFalseStart) {
  StopMatcher m({"STOP"});
  std::vector<std::string> emitted;
  EXPECT_EQ(feed(m, {"a ST", "ART b"}, &emitted), "a START b");
  EXPECT_EQ(emitted[0], "a ");
  EXPECT_FALSE(m.stopped());
}

TEST(GatewayStopMatcher, EarliestMatchWinsThenLongest) {
  StopMatcher m({"cd", "bc", "bcd"});
  auto r = m.push("abcdef");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "a");
  EXPECT_EQ(r.matched, "bcd");
  StopMatcher keep({"bc"}, true);
  EXPECT_EQ(keep.push("abcd").text, "abc");
}

TEST(GatewayStopMatcher, FlushReleasesHeldTextAtTheEnd) {
  StopMatcher m({"xyz"});
  EXPECT_EQ(m.push("abx").text, "ab");
  EXPECT_EQ(m.flush(), "x");
  StopMatcher none({});
  EXPECT_EQ(none.push("anything").text, "anything");
}

const text::Tokenizer& tok() {
  static text::Tokenizer t = text::Tokenizer::from_file(std::string(FLASHTIER_SOURCE_DIR) + "/tests/fixtures/glm5-tiny-chat/model/tokenizer.json");
  return t;
}

flashtier::v1::GenerateResponse msg(const std::vector<int32_t>& ids, bool finished = false,
                                    flashtier::v1::FinishReason reason = flashtier::v1::FINISH_REASON_STOP) {
  flashtier::v1::GenerateResponse m;
  for (int32_t id : ids) m.add_tokens()->set_token_id(id);
  m.set_finished(finished);
  if (finished) m.set_finish_reason(reason);
  return m;
}

TEST(GatewayChoiceOutput, StopTokenIsCountedButNeverShown) {
  ChoiceOutput::Options o;
  o.stop_ids = {3000, 3007};
  ChoiceOutput co(tok(), o);
  auto ids = tok().encode("Hello world");
  std::string text = co.push(msg(ids)).text;
  auto last = co.push(msg({3007}, true));
  text += last.text;
  EXPECT_EQ(text, "Hello world");
  EXPECT_TRUE(last.tokens.empty());
  EXPECT_EQ(co.consumed_tokens(), ids.size() + 1);
  EXPECT_EQ(co.output_ids(), ids);
  EXPECT_EQ(co.matched_stop_token(), 3007);
  EXPECT_TRUE(co.finished());
}

TEST(GatewayChoiceOutput, HeldStopIdThatDidNotStopIsText) {
  ChoiceOutput::Options o;
  o.stop_ids = {3000};
  o.skip_special_tokens = false;
  ChoiceOutput co(tok(), o);
  std::string text = co.push(msg({3000})).text;  // held: might be the end
  EXPECT_EQ(text, "");
  text += co.push(msg(tok().encode("!"), true, flashtier::v1::FINISH_REASON_LENGTH)).text;
  EXPECT_EQ(text, "<|endoftext|>!");
}

TEST(GatewayChoiceOutput, SkipsSpecialTokensButKeepsParserTags) {
  ChoiceOutput::Options o;
  o.keep_special = {3014};
  ChoiceOutput co(tok(), o);
  std::string text = co.push(msg({3006, 3014, 3018})).text;
  text += co.flush().text;
  EXPECT_EQ(text, "<|begin_of_audio|><think>");  // <|system|> skipped, kept id and non-special tag shown
}

TEST(GatewayChoiceOutput, StopStringEndsTheChoice) {
  ChoiceOutput::Options o;
  o.stop = {"world"};
  ChoiceOutput co(tok(), o);
  auto ids = tok().encode("Hello world again");
  std::string text;
  for (int32_t id : ids) text += co.push(msg({id})).text;
  EXPECT_EQ(text, "Hello ");
  EXPECT_TRUE(co.stopped_by_string());
  EXPECT_EQ(co.matched_stop(), "world");
  EXPECT_TRUE(co.finished());
  EXPECT_LT(co.consumed_tokens(), ids.size());
}

TEST(GatewayChoiceOutput, MultiByteCharactersSplitOverTokensStayWhole) {
  ChoiceOutput co(tok(), {});
  auto ids = tok().encode("Γειά σου 世界 🙂");
  std::string text;
  for (int32_t id : ids) {
    std::string piece = co.push(msg({id})).text;
    // Every piece is valid UTF-8 on its own: no piece ends inside a character.
    if (!piece.empty()) {
      unsigned char c = static_cast<unsigned char>(piece.back());
      EXPECT_TRUE(c < 0x80 || (c & 0xC0) == 0x80) << "piece ends with a lead byte";
    }
    text += piece;
  }
  text += co.flush().text;
  EXPECT_EQ(text, "Γειά σου 世界 🙂");
}

TEST(GatewayMetrics, PrometheusExposition) {
  Metrics m;
  m.count_request("/v1/completions", 200);
  m.count_request("/v1/completions", 200);
  m.count_request("/v1/completions", 400);
  m.ttft.observe(0.003);
  m.ttft.observe(0.2);
  m.ttft.observe(1000);
  m.streams_running = 2;
  std::string t = m.render();
  EXPECT_NE(t.find("flashtier_gateway_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("flashtier_gateway_requests_total{endpoint=\"/v1/completions\",status=\"400\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("flashtier_gateway_time_to_first_token_seconds_bucket{le=\"0.0025\"} 0\n"), std::string::npos);
  EXPECT_NE(t.find("flashtier_gateway_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("flashtier_gateway_time_to_first_token_seconds_bucket{le=\"0.2\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("flashtier_gateway_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(t.find("flashtier_gateway_time_to_first_token_seconds_count 3\n"), std::string::npos);
  EXPECT_NE(t.find("flashtier_gateway_time_to_first_token_seconds_sum 1000.203\n"), std::string::npos);
  EXPECT_NE(t.find("# TYPE flashtier_gateway_running gauge\nflashtier_gateway_running 2\n"), std::string::npos);
}

GatewayOptions parse(std::vector<const char*> args) {
  args.insert(args.begin(), "flashtier-gateway");
  return parse_options(int(args.size()), args.data());
}

TEST(GatewayOptions, Flags) {
  auto o = parse({"--model-dir", "m", "--worker", "a:1", "--worker=b:2", "--port", "9000", "--api-key", "k",
                  "--served-model-name", "glm", "--max-body-bytes", "2048", "--max-queue", "3", "--host", "127.0.0.1"});
  EXPECT_EQ(o.workers, (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_EQ(o.port, 9000);
  EXPECT_EQ(o.api_key, "k");
  EXPECT_EQ(o.served_model_name, "glm");
  EXPECT_EQ(o.max_body_bytes, 2048u);
  EXPECT_EQ(o.max_queue, 3);
  EXPECT_EQ(o.host, "127.0.0.1");
  auto fails = [](std::vector<const char*> a, const std::string& flag) {
    try {
      parse(a);
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  fails({"--worker", "a:1"}, "--model-dir");
  fails({"--model-dir", "m"}, "--worker");
  fails({"--model-dir", "m", "--worker", "nocolon"}, "--worker");
  fails({"--model-dir", "m", "--worker", "a:1", "--port", "70000"}, "--port");
  fails({"--model-dir", "m", "--worker", "a:1", "--max-queue", "x"}, "--max-queue");
  fails({"--model-dir", "m", "--worker", "a:1", "--bogus", "1"}, "--bogus");
  fails({"--model-dir"}, "--model-dir");
}

SchemaLimits limits() { return {16, 3029, "model"}; }

TEST(GatewaySchema, ChatRequestToTemplateRequest) {
  json body = {{"messages", {{{"role", "developer"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "hi"}}}},
               {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}},
               {"tool_choice", "none"},
               {"reasoning_effort", "none"},
               {"chat_template_kwargs", {{"clear_thinking", true}}}};
  ChatSpec s = parse_chat_request(body.dump(), limits());
  json tr = json::parse(s.template_request);
  EXPECT_EQ(tr["messages"][0]["role"], "system");  // the GLM template knows no developer role
  EXPECT_FALSE(tr.contains("tools"));              // tool_choice none drops them
  EXPECT_FALSE(s.has_tools);
  EXPECT_FALSE(s.enable_thinking);                 // reasoning_effort none
  EXPECT_EQ(tr["chat_template_kwargs"]["clear_thinking"], true);
  EXPECT_FALSE(s.max_tokens.has_value());          // chat: up to the context limit

  body["tool_choice"] = "required";
  s = parse_chat_request(body.dump(), limits());
  EXPECT_TRUE(s.has_tools);
  EXPECT_EQ(s.tool_choice, ToolChoice::Required);
  EXPECT_TRUE(json::parse(s.template_request).contains("tools"));
}

TEST(GatewaySchema, ErrorsNameTheField) {
  try {
    parse_completion_request(R"({"prompt":"x","stop":["a",7]})", limits());
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "stop[1]");
    json j = json::parse(error_json(e));
    EXPECT_EQ(j["error"]["param"], "stop[1]");
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  }
  CompletionSpec c = parse_completion_request(R"({"prompt":[[1,2],[3]],"n":2})", limits());
  EXPECT_EQ(c.prompt_ids.size(), 2u);
  EXPECT_EQ(c.max_tokens, 16u);
  SglangSpec g = parse_sglang_generate(R"({"input_ids":[1,2],"sampling_params":{"max_new_tokens":5,"stop_token_ids":[9]}})", limits());
  EXPECT_EQ(g.max_tokens, 5u);
  EXPECT_EQ(g.stop_token_ids, std::vector<int32_t>{9});
}

}  // namespace
}  // namespace ft::gateway
