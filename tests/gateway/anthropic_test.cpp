// The Anthropic Messages API of the gateway binary, a fake worker behind it: the official
// @anthropic-ai/sdk npm client (tests/gateway/anthropic_js/run.sh), the raw SSE event sequence
// as curl sees it, the prompt the worker gets, stop reasons, x-api-key and Anthropic-shaped
// errors that name the field.
#include "shared/text/glm_parser.h"
#include "tests/gateway/gateway_test_util.h"

namespace ft::test {
namespace {

int32_t id_of(const char* token) { return tiny_tokenizer().token_to_id(token).value(); }

bool contains(const flashtier::v1::GenerateRequest& r, int32_t id) {
  for (int32_t t : r.prompt_token_ids())
    if (t == id) return true;
  return false;
}

// See tests/gateway/anthropic_js/scripted.mjs for what the scripts say.
FakeScript weather_script(const flashtier::v1::GenerateRequest& r) {
  const auto d = std::chrono::microseconds(500);
  if (contains(r, kObservation)) return script_of(cat(ids_of("It is sunny."), {kUserEos}), d);
  const bool thinking = r.prompt_token_ids(r.prompt_token_ids_size() - 1) == id_of("<think>");
  std::string text = thinking ? "Let me check.</think>" : "";
  text += "I will look it up.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
          "<arg_key>days</arg_key><arg_value>2</arg_value></tool_call>";
  return script_of(cat(ids_of(text), {kObservation}), d);
}

class GatewayAnthropic : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    worker_ = new FakeWorker();
    worker_->set_script(weather_script);
    gw_ = new GatewayProcess(gateway_args({worker_->address()}));
    ASSERT_TRUE(gw_->wait_healthy());
  }
  static void TearDownTestSuite() {
    delete gw_;
    delete worker_;
  }
  static HttpResult post(const std::string& path, const json& body, const std::vector<std::string>& headers = {}) {
    return http_request(gw_->port(), "POST", path, body.dump(), headers);
  }
  static json weather_request() {
    return json::parse(R"({"model": "model", "max_tokens": 128,
      "tools": [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object",
                 "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}],
      "messages": [{"role": "user", "content": "Weather in Paris?"}]})");
  }
  static FakeWorker* worker_;
  static GatewayProcess* gw_;
};
FakeWorker* GatewayAnthropic::worker_ = nullptr;
GatewayProcess* GatewayAnthropic::gw_ = nullptr;

TEST_F(GatewayAnthropic, OfficialSdkStreamingAndNotWithToolUse) {
  run_anthropic_client("scripted.mjs", gw_->port(), "model");
}

// Event name and data "type" of every SSE event of a body.
std::vector<std::pair<std::string, json>> events_of(const std::string& body) {
  std::vector<std::pair<std::string, json>> out;
  size_t p = 0;
  while ((p = body.find("event: ", p)) != std::string::npos) {
    const size_t eol = body.find('\n', p);
    const std::string name = body.substr(p + 7, eol - p - 7);
    const size_t d = body.find("data: ", eol);
    const size_t end = body.find("\n\n", d);
    out.emplace_back(name, json::parse(body.substr(d + 6, end - d - 6)));
    p = end;
  }
  return out;
}

TEST_F(GatewayAnthropic, StreamedEventsInAnthropicOrder) {
  json req = weather_request();
  req["stream"] = true;
  req["thinking"] = {{"type", "enabled"}, {"budget_tokens", 64}};
  HttpResult r = post("/v1/messages", req);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.header("content-type").find("text/event-stream"), std::string::npos);
  auto ev = events_of(r.body);
  ASSERT_GE(ev.size(), 10u) << r.body;
  for (const auto& [name, data] : ev) EXPECT_EQ(data["type"], name) << data.dump();
  // Collapse runs of deltas: the order of block starts/stops is what a client relies on.
  std::vector<std::string> seq;
  for (const auto& [name, data] : ev) {
    std::string s = name;
    if (name == "content_block_start") s += ":" + data["content_block"]["type"].get<std::string>() + ":" + std::to_string(data["index"].get<int>());
    if (name == "content_block_delta") s = "delta:" + data["delta"]["type"].get<std::string>();
    if (name == "content_block_stop") s += ":" + std::to_string(data["index"].get<int>());
    if (seq.empty() || seq.back() != s) seq.push_back(s);
  }
  const std::vector<std::string> want = {
      "message_start", "ping",
      "content_block_start:thinking:0", "delta:thinking_delta", "delta:signature_delta", "content_block_stop:0",
      "content_block_start:text:1", "delta:text_delta", "content_block_stop:1",
      "content_block_start:tool_use:2", "delta:input_json_delta", "content_block_stop:2",
      "message_delta", "message_stop"};
  EXPECT_EQ(seq, want) << r.body;
  // Deltas concatenate to the blocks; the tool input's JSON is streamed, not held to the end.
  std::string thinking, text, input;
  int input_deltas = 0;
  for (const auto& [name, data] : ev) {
    if (name != "content_block_delta") continue;
    const json& d = data["delta"];
    if (d["type"] == "thinking_delta") thinking += d["thinking"].get<std::string>();
    if (d["type"] == "text_delta") text += d["text"].get<std::string>();
    if (d["type"] == "input_json_delta") {
      input += d["partial_json"].get<std::string>();
      ++input_deltas;
    }
  }
  EXPECT_EQ(thinking, "Let me check.");
  EXPECT_EQ(text, "I will look it up.");
  EXPECT_EQ(json::parse(input), json::parse(R"({"city": "Paris", "days": 2})"));
  EXPECT_GE(input_deltas, 3);
  const json& start = ev[0].second["message"];
  EXPECT_EQ(start["role"], "assistant");
  EXPECT_TRUE(start["content"].empty());
  EXPECT_GT(start["usage"]["input_tokens"].get<int>(), 0);
  const json& md = ev[ev.size() - 2].second;
  EXPECT_EQ(md["delta"]["stop_reason"], "tool_use");
  EXPECT_TRUE(md["delta"]["stop_sequence"].is_null());
  EXPECT_GT(md["usage"]["output_tokens"].get<int>(), 10);
}

TEST_F(GatewayAnthropic, RequestMapsOntoTheChatTemplate) {
  json req = weather_request();
  req["system"] = json::array({{{"type", "text"}, {"text", "Be brief."}}});
  req["messages"] = json::parse(R"([
    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
    {"role": "assistant", "content": [{"type": "thinking", "thinking": "I should call it.", "signature": "s"},
      {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny, 25C"}]},
      {"type": "text", "text": "Thanks!"}]}])");
  req["temperature"] = 0.5;
  req["top_k"] = 7;
  HttpResult r = post("/v1/messages", req);
  ASSERT_EQ(r.status, 200) << r.body;
  json m = parse(r.body);
  EXPECT_EQ(m["content"], json::parse(R"([{"type": "text", "text": "It is sunny."}])"));
  EXPECT_EQ(m["stop_reason"], "end_turn");
  const auto reqs = worker_->requests();
  ASSERT_FALSE(reqs.empty());
  const auto& last = reqs.back();
  EXPECT_FLOAT_EQ(last.sampling().temperature(), 0.5f);
  EXPECT_EQ(last.sampling().top_k(), 7);
  EXPECT_EQ(last.max_new_tokens(), 128u);
  std::vector<int32_t> ids(last.prompt_token_ids().begin(), last.prompt_token_ids().end());
  const std::string prompt = tiny_tokenizer().decode(ids, false);
  // GLM-5.3's rendering (glm-chat-format.md): system, tools, the call in GLM's XML form, the
  // result after <|observation|>, the user's text, and thinking off (Anthropic's default).
  for (const char* part : {"<|system|>", "Be brief.", "\"name\": \"get_weather\"", "I should call it.",
                           "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
                           "<|observation|><tool_response>sunny, 25C</tool_response>", "Thanks!"})
    EXPECT_NE(prompt.find(part), std::string::npos) << part << "\n" << prompt;
  EXPECT_TRUE(prompt.ends_with("<|assistant|><think></think>")) << prompt;
}

TEST_F(GatewayAnthropic, StopReasons) {
  json req = weather_request();
  req["stop_sequences"] = {"look"};
  HttpResult r = post("/v1/messages", req);
  ASSERT_EQ(r.status, 200) << r.body;
  json m = parse(r.body);
  EXPECT_EQ(m["stop_reason"], "stop_sequence");
  EXPECT_EQ(m["stop_sequence"], "look");
  // (Content loses its outer whitespace, as in the OpenAI endpoint.)
  EXPECT_EQ(m["content"], json::parse(R"([{"type": "text", "text": "I will"}])"));

  req = weather_request();
  req["max_tokens"] = 3;
  r = post("/v1/messages", req);  // the fake worker ends with "length" at max_new_tokens
  ASSERT_EQ(r.status, 200) << r.body;
  m = parse(r.body);
  EXPECT_EQ(m["stop_reason"], "max_tokens") << r.body;
  EXPECT_EQ(m["usage"]["output_tokens"], 3);

  // Without tools the call text is not parsed: plain text, end_turn.
  req = weather_request();
  req.erase("tools");
  r = post("/v1/messages", req);
  m = parse(r.body);
  EXPECT_EQ(m["stop_reason"], "end_turn");
  ASSERT_EQ(m["content"].size(), 1u) << r.body;
  EXPECT_EQ(m["content"][0]["type"], "text");
}

TEST_F(GatewayAnthropic, CountTokensAndApiKey) {
  json req = weather_request();
  req.erase("max_tokens");
  HttpResult r = post("/v1/messages/count_tokens", req);
  ASSERT_EQ(r.status, 200) << r.body;
  const int counted = parse(r.body)["input_tokens"].get<int>();
  EXPECT_GT(counted, 20);
  r = post("/v1/messages", weather_request());
  EXPECT_EQ(parse(r.body)["usage"]["input_tokens"].get<int>(), counted);

  FakeWorker w;
  w.set_script(weather_script);
  GatewayProcess gw(gateway_args({w.address()}, {"--api-key", "s3cret"}));
  ASSERT_TRUE(gw.wait_healthy());
  const std::string body = weather_request().dump();
  r = http_request(gw.port(), "POST", "/v1/messages", body, {"x-api-key: s3cret", "anthropic-version: 2023-06-01"});
  EXPECT_EQ(r.status, 200) << r.body;
  for (const char* key : {"x-api-key: wrong", ""}) {
    std::vector<std::string> h;
    if (*key) h.push_back(key);
    r = http_request(gw.port(), "POST", "/v1/messages", body, h);
    EXPECT_EQ(r.status, 401) << r.body;
    json e = parse(r.body);
    EXPECT_EQ(e["type"], "error");
    EXPECT_EQ(e["error"]["type"], "authentication_error") << r.body;
  }
}

TEST_F(GatewayAnthropic, ErrorsAreAnthropicShapedAndNameTheField) {
  struct Bad {
    std::string body;
    int status;
    const char* field;  // must appear in error.message
  };
  auto with = [](const char* key, json v) {
    json j = weather_request();
    j[key] = std::move(v);
    return j.dump();
  };
  auto msgs = [](const char* messages) {
    json j = weather_request();
    j["messages"] = json::parse(messages);
    return j.dump();
  };
  json no_max = weather_request();
  no_max.erase("max_tokens");
  const std::vector<Bad> cases = {
      {"{not json", 400, "JSON"},
      {no_max.dump(), 400, "max_tokens"},
      {with("max_tokens", 0), 400, "max_tokens"},
      {with("model", "claude-other"), 404, "model"},
      {with("temperature", 1.5), 400, "temperature"},
      {with("top_k", -1), 400, "top_k"},
      {with("stop_sequences", "x"), 400, "stop_sequences"},
      {with("stop_sequences", json::array({""})), 400, "stop_sequences[0]"},
      {with("system", 5), 400, "system"},
      {with("stream", "yes"), 400, "stream"},
      {with("thinking", {{"type", "enabled"}}), 400, "thinking.budget_tokens"},
      {with("thinking", {{"type", "enabled"}, {"budget_tokens", 500}}), 400, "thinking.budget_tokens"},
      {with("thinking", {{"type", "maybe"}}), 400, "thinking.type"},
      {with("tool_choice", {{"type", "tool"}, {"name", "nope"}}), 400, "tool_choice.name"},
      {with("tool_choice", {{"type", "sometimes"}}), 400, "tool_choice.type"},
      {with("tool_choice", "auto"), 400, "tool_choice"},
      {with("tools", json::parse(R"([{"name": "bad name!", "input_schema": {}}])")), 400, "tools[0].name"},
      {with("tools", json::parse(R"([{"name": "f"}])")), 400, "tools[0].input_schema"},
      {with("tools", json::parse(R"([{"type": "web_search_20250305", "name": "web_search"}])")), 400, "tools[0].type"},
      {msgs("[]"), 400, "messages"},
      {msgs(R"([{"role": "system", "content": "x"}])"), 400, "messages[0].role"},
      {msgs(R"([{"role": "user"}])"), 400, "messages[0].content"},
      {msgs(R"([{"role": "user", "content": 5}])"), 400, "messages[0].content"},
      {msgs(R"([{"role": "user", "content": [{"type": "image", "source": {}}]}])"), 400, "messages[0].content[0].type"},
      {msgs(R"([{"role": "user", "content": [{"type": "bogus"}]}])"), 400, "messages[0].content[0].type"},
      {msgs(R"([{"role": "user", "content": [{"type": "text"}]}])"), 400, "messages[0].content[0].text"},
      {msgs(R"([{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]}])"), 400,
       "messages[0].content[0].type"},
      {msgs(R"([{"role": "user", "content": "a"}, {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": 3}]}])"),
       400, "messages[1].content[0].input"},
      {msgs(R"([{"role": "user", "content": [{"type": "tool_result"}]}])"), 400, "messages[0].content[0].tool_use_id"},
  };
  for (const auto& c : cases) {
    HttpResult r = http_request(gw_->port(), "POST", "/v1/messages", c.body);
    EXPECT_EQ(r.status, c.status) << c.body << "\n" << r.body;
    json e = parse(r.body);
    EXPECT_EQ(e["type"], "error") << r.body;
    EXPECT_EQ(e["error"]["type"], c.status == 404 ? "not_found_error" : "invalid_request_error") << r.body;
    EXPECT_NE(e["error"]["message"].get<std::string>().find(c.field), std::string::npos) << c.field << ": " << r.body;
  }
  // Routing errors on the Anthropic paths are Anthropic-shaped too; OpenAI's stay OpenAI's.
  HttpResult r = http_request(gw_->port(), "GET", "/v1/messages");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(parse(r.body)["type"], "error");
  r = http_request(gw_->port(), "POST", "/v1/chat/completions", "{}");
  EXPECT_TRUE(parse(r.body)["error"].contains("param"));
}

TEST_F(GatewayAnthropic, RequiredToolChoiceWithoutACallIsAnError) {
  worker_->set_script(script_of(cat(ids_of("No tools today."), {kUserEos}), std::chrono::microseconds(0)));
  json req = weather_request();
  req["tool_choice"] = {{"type", "any"}};
  HttpResult r = post("/v1/messages", req);
  worker_->set_script(weather_script);
  EXPECT_EQ(r.status, 422) << r.body;
  json e = parse(r.body);
  EXPECT_EQ(e["type"], "error");
  EXPECT_NE(e["error"]["message"].get<std::string>().find("tool_choice"), std::string::npos) << r.body;
}

// tool_choice "any" and a named tool reach the worker as a tool-call constraint (the grammar the
// OpenAI surface uses), with disable_parallel_tool_use as a single call; "auto" carries none.
TEST_F(GatewayAnthropic, ToolChoiceReachesTheWorkerAsAConstraint) {
  json req = weather_request();
  req["tool_choice"] = {{"type", "tool"}, {"name", "get_weather"}, {"disable_parallel_tool_use", true}};
  HttpResult r = post("/v1/messages", req);
  ASSERT_EQ(r.status, 200) << r.body;
  auto g = worker_->requests().back();
  ASSERT_TRUE(g.has_constraint());
  EXPECT_EQ(g.constraint().tool_calls().function(), "get_weather");
  EXPECT_TRUE(g.constraint().tool_calls().single_call());
  EXPECT_NE(g.constraint().tool_calls().tools_json().find("\"get_weather\""), std::string::npos);
  EXPECT_FALSE(g.constraint().after_reasoning());  // thinking off: from the first token
  req["tool_choice"] = {{"type", "any"}};
  r = post("/v1/messages", req);
  ASSERT_EQ(r.status, 200) << r.body;
  g = worker_->requests().back();
  ASSERT_TRUE(g.has_constraint());
  EXPECT_EQ(g.constraint().tool_calls().function(), "");
  EXPECT_FALSE(g.constraint().tool_calls().single_call());
  req["tool_choice"] = {{"type", "auto"}};
  r = post("/v1/messages", req);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_FALSE(worker_->requests().back().has_constraint());
}

}  // namespace
}  // namespace ft::test
