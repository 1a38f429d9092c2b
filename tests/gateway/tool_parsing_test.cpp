// The GLM tool-call parsing fixes as clients of both APIs see them (fake worker, gateway binary):
// text between and after calls is kept, a repeated argument key is last-wins in the final
// arguments and a 422 for a strict tool, on /v1/chat/completions and /v1/messages alike.
#include "tests/gateway/gateway_test_util.h"

namespace ft::test {
namespace {

// "First." call(city Paris, days 2, city Lyon) " Then." call(now) "Done."
const char* kOutput =
    "ok</think>First.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key>"
    "<arg_value>2</arg_value><arg_key>city</arg_key><arg_value>Lyon</arg_value></tool_call> Then.<tool_call>now"
    "</tool_call>Done.";

json tools(bool strict) {
  json fn = {{"name", "get_weather"},
             {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}, {"days", {{"type", "integer"}}}}}}}};
  if (strict) fn["strict"] = true;
  return json::array({{{"type", "function"}, {"function", fn}},
                      {{"type", "function"}, {"function", {{"name", "now"}, {"parameters", {{"type", "object"}}}}}}});
}

json anthropic_tools(bool strict) {
  json out = json::array();
  for (const auto& t : tools(strict)) {
    json a = {{"name", t["function"]["name"]}, {"input_schema", t["function"]["parameters"]}};
    if (t["function"].contains("strict")) a["strict"] = true;
    out.push_back(a);
  }
  return out;
}

class GatewayToolParsing : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    worker_ = new FakeWorker();
    worker_->set_script(script_of(cat(ids_of(kOutput), {kObservation}), std::chrono::microseconds(0)));
    gw_ = new GatewayProcess(gateway_args({worker_->address()}));
    ASSERT_TRUE(gw_->wait_healthy());
  }
  static void TearDownTestSuite() {
    delete gw_;
    delete worker_;
  }
  static HttpResult chat(bool strict, bool stream) {
    json body = {{"messages", {{{"role", "user"}, {"content", "Weather?"}}}}, {"tools", tools(strict)}, {"stream", stream}};
    return http_request(gw_->port(), "POST", "/v1/chat/completions", body.dump());
  }
  static HttpResult messages(bool strict) {
    json body = {{"max_tokens", 100},
                 {"thinking", {{"type", "enabled"}, {"budget_tokens", 10}}},
                 {"messages", {{{"role", "user"}, {"content", "Weather?"}}}},
                 {"tools", anthropic_tools(strict)}};
    return http_request(gw_->port(), "POST", "/v1/messages", body.dump());
  }
  static FakeWorker* worker_;
  static GatewayProcess* gw_;
};
FakeWorker* GatewayToolParsing::worker_ = nullptr;
GatewayProcess* GatewayToolParsing::gw_ = nullptr;

TEST_F(GatewayToolParsing, OpenAiKeepsTextAndTakesTheLastValue) {
  HttpResult r = chat(false, false);
  ASSERT_EQ(r.status, 200) << r.body;
  const json m = parse(r.body)["choices"][0]["message"];
  EXPECT_EQ(m["content"], "First. Then.Done.");
  ASSERT_EQ(m["tool_calls"].size(), 2u) << r.body;
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], R"({"city": "Lyon", "days": 2})");
  EXPECT_EQ(m["tool_calls"][1]["function"]["arguments"], "{}");
  // Streamed: the same content; the fragments of call 0 parse (last-wins) to the same object.
  r = chat(false, true);
  ASSERT_EQ(r.status, 200) << r.body;
  std::string content, args0;
  for (const auto& d : sse_data(r.body)) {
    if (d == "[DONE]") break;
    const json delta = parse(d)["choices"][0]["delta"];
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (delta.contains("tool_calls"))
      for (const auto& t : delta["tool_calls"])
        if (t["index"] == 0) args0 += t["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(content, "First. Then.Done.");
  EXPECT_EQ(json::parse(args0), json::parse(R"({"city": "Lyon", "days": 2})"));
}

TEST_F(GatewayToolParsing, StrictToolRepeatingAKeyIsA422) {
  HttpResult r = chat(true, false);
  EXPECT_EQ(r.status, 422) << r.body;
  EXPECT_EQ(parse(r.body)["error"]["code"], "tool_arguments_invalid");
  EXPECT_NE(r.body.find("repeats argument 'city'"), std::string::npos) << r.body;
  r = messages(true);
  EXPECT_EQ(r.status, 422) << r.body;
  EXPECT_EQ(parse(r.body)["type"], "error");
  EXPECT_NE(r.body.find("repeats argument 'city'"), std::string::npos) << r.body;
}

TEST_F(GatewayToolParsing, AnthropicBlocksKeepTheModelsOrder) {
  HttpResult r = messages(false);
  ASSERT_EQ(r.status, 200) << r.body;
  const json m = parse(r.body);
  std::vector<std::string> kinds;
  for (const auto& b : m["content"]) kinds.push_back(b["type"].get<std::string>() + ":" + b.value("text", b.value("name", b.value("thinking", ""))));
  EXPECT_EQ(kinds, (std::vector<std::string>{"thinking:ok", "text:First.", "tool_use:get_weather", "text: Then.",
                                              "tool_use:now", "text:Done."}))
      << r.body;
  EXPECT_EQ(m["content"][2]["input"], json::parse(R"({"city": "Lyon", "days": 2})"));
  EXPECT_EQ(m["content"][4]["input"], json::object());
  EXPECT_EQ(m["stop_reason"], "tool_use");
}

}  // namespace
}  // namespace ft::test
