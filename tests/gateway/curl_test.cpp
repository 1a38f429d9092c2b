// curl against the gateway binary (fake worker behind it): every endpoint answers, and every
// validation error is a 4xx with OpenAI error JSON naming the field.
#include <chrono>
#include <fstream>

#include "tests/gateway/gateway_test_util.h"

namespace ft::test {
namespace {

class GatewayCurl : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    worker_ = new FakeWorker();
    worker_->set_script(script_of(cat(ids_of("fine</think>ok"), {kEos}), std::chrono::microseconds(0)));
    gw_ = new GatewayProcess(gateway_args({worker_->address()}, {"--max-body-bytes", "65536"}));
    ASSERT_TRUE(gw_->wait_healthy());
  }
  static void TearDownTestSuite() {
    delete gw_;
    delete worker_;
  }
  static std::string url(const std::string& path) { return shell_quote("http://127.0.0.1:" + std::to_string(gw_->port()) + path); }
  static CurlResult post(const std::string& path, const std::string& body) {
    return curl("-X POST -H 'Content-Type: application/json' --data-binary " + shell_quote(body) + " " + url(path));
  }
  static FakeWorker* worker_;
  static GatewayProcess* gw_;
};
FakeWorker* GatewayCurl::worker_ = nullptr;
GatewayProcess* GatewayCurl::gw_ = nullptr;

TEST_F(GatewayCurl, EveryEndpointAnswers) {
  struct Case {
    const char* method;
    const char* path;
    const char* body;
    const char* expect;  // substring of the body
  };
  const Case cases[] = {
      {"GET", "/health", "", "\"status\":\"ok\""},
      {"GET", "/health_generate", "", "\"status\":\"ok\""},
      {"GET", "/v1/models", "", "\"object\":\"list\""},
      {"GET", "/v1/models/model", "", "\"id\":\"model\""},
      {"GET", "/metrics", "", "flashtier_gateway_requests_total"},
      {"GET", "/server_info", "", "\"context_length\":4096"},
      {"GET", "/get_server_info", "", "\"context_length\":4096"},
      {"GET", "/get_model_info", "", "\"is_generation\":true"},
      {"POST", "/tokenize", R"({"prompt":"Hello"})", "\"count\":"},
      {"POST", "/v1/tokenize", R"({"prompt":"Hello"})", "\"count\":"},
      {"POST", "/detokenize", R"({"tokens":[72,101]})", "\"prompt\":"},
      {"POST", "/v1/detokenize", R"({"tokens":[72,101]})", "\"prompt\":"},
      {"POST", "/v1/completions", R"({"prompt":"Hi","max_tokens":4})", "\"object\":\"text_completion\""},
      {"POST", "/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}]})", "\"content\":\"ok\""},
      {"POST", "/generate", R"({"text":"Hi"})", "\"meta_info\""},
  };
  for (const auto& c : cases) {
    CurlResult r = std::string(c.method) == "GET" ? curl(url(c.path)) : post(c.path, c.body);
    EXPECT_EQ(r.status, 200) << c.path << ": " << r.body;
    EXPECT_NE(r.body.find(c.expect), std::string::npos) << c.path << ": " << r.body;
  }
  // Streaming through curl -N.
  CurlResult s = curl("-N -X POST -H 'Content-Type: application/json' --data-binary " +
                      shell_quote(R"({"messages":[{"role":"user","content":"Hi"}],"stream":true})") + " " + url("/v1/chat/completions"));
  EXPECT_EQ(s.status, 200);
  EXPECT_NE(s.body.find("chat.completion.chunk"), std::string::npos);
  EXPECT_NE(s.body.find("data: [DONE]"), std::string::npos);
}

struct Bad {
  const char* path;
  const char* body;
  int status;
  const char* param;  // "" = null
};

TEST_F(GatewayCurl, EveryValidationErrorNamesTheField) {
  const Bad cases[] = {
      // Bodies
      {"/v1/completions", "", 400, ""},
      {"/v1/completions", "{not json", 400, ""},
      {"/v1/completions", "[1,2]", 400, ""},
      // Shared fields
      {"/v1/completions", R"({"prompt":"x","model":"other"})", 404, "model"},
      {"/v1/completions", R"({"prompt":"x","model":5})", 400, "model"},
      {"/v1/completions", R"({"prompt":"x","temperature":3})", 400, "temperature"},
      {"/v1/completions", R"({"prompt":"x","temperature":"hot"})", 400, "temperature"},
      {"/v1/completions", R"({"prompt":"x","top_p":0})", 400, "top_p"},
      {"/v1/completions", R"({"prompt":"x","top_p":1.5})", 400, "top_p"},
      {"/v1/completions", R"({"prompt":"x","top_k":-5})", 400, "top_k"},
      {"/v1/completions", R"({"prompt":"x","top_k":2.5})", 400, "top_k"},
      {"/v1/completions", R"({"prompt":"x","min_p":2})", 400, "min_p"},
      {"/v1/completions", R"({"prompt":"x","presence_penalty":3})", 400, "presence_penalty"},
      {"/v1/completions", R"({"prompt":"x","frequency_penalty":-3})", 400, "frequency_penalty"},
      {"/v1/completions", R"({"prompt":"x","repetition_penalty":0})", 400, "repetition_penalty"},
      {"/v1/completions", R"({"prompt":"x","seed":"a"})", 400, "seed"},
      {"/v1/completions", R"({"prompt":"x","n":0})", 400, "n"},
      {"/v1/completions", R"({"prompt":"x","n":1000})", 400, "n"},
      {"/v1/completions", R"({"prompt":"x","stream":"yes"})", 400, "stream"},
      {"/v1/completions", R"({"prompt":"x","stream_options":{"include_usage":true}})", 400, "stream_options"},
      {"/v1/completions", R"({"prompt":"x","stream":true,"stream_options":{"include_usage":1}})", 400, "stream_options.include_usage"},
      {"/v1/completions", R"({"prompt":"x","stream":true,"stream_options":{"bogus":true}})", 400, "stream_options.bogus"},
      {"/v1/completions", R"({"prompt":"x","stream":true,"stream_options":[]})", 400, "stream_options"},
      {"/v1/completions", R"({"prompt":"x","stream":true,"stream_options":{"continuous_usage_stats":true}})", 400, "stream_options.continuous_usage_stats"},
      {"/v1/completions", R"({"prompt":"x","stop":5})", 400, "stop"},
      {"/v1/completions", R"({"prompt":"x","stop":""})", 400, "stop"},
      {"/v1/completions", R"({"prompt":"x","stop":["a",""]})", 400, "stop[1]"},
      {"/v1/completions", R"({"prompt":"x","stop":["a",3]})", 400, "stop[1]"},
      {"/v1/completions", R"({"prompt":"x","stop":["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"]})", 400, "stop"},
      {"/v1/completions", R"({"prompt":"x","stop_token_ids":[1,99999]})", 400, "stop_token_ids[1]"},
      {"/v1/completions", R"({"prompt":"x","stop_token_ids":"1"})", 400, "stop_token_ids"},
      {"/v1/completions", R"({"prompt":"x","ignore_eos":"no"})", 400, "ignore_eos"},
      {"/v1/completions", R"({"prompt":"x","skip_special_tokens":1})", 400, "skip_special_tokens"},
      {"/v1/completions", R"({"prompt":"x","include_stop_str_in_output":1})", 400, "include_stop_str_in_output"},
      {"/v1/completions", R"({"prompt":"x","min_tokens":-1})", 400, "min_tokens"},
      {"/v1/completions", R"({"prompt":"x","max_tokens":2,"min_tokens":3})", 400, "min_tokens"},
      {"/v1/completions", R"({"prompt":"x","user":7})", 400, "user"},
      {"/v1/completions", R"({"prompt":"x","logit_bias":{"5":101}})", 400, "logit_bias.5"},
      {"/v1/completions", R"({"prompt":"x","logit_bias":{"x":1}})", 400, "logit_bias.x"},
      {"/v1/completions", R"({"prompt":"x","logit_bias":{"99999":1}})", 400, "logit_bias.99999"},
      {"/v1/completions", R"({"prompt":"x","logit_bias":{"5":"1"}})", 400, "logit_bias.5"},
      {"/v1/completions", R"({"prompt":"x","logit_bias":[1]})", 400, "logit_bias"},
      {"/v1/completions", R"({"prompt":"x","return_tokens_as_token_ids":"y"})", 400, "return_tokens_as_token_ids"},
      // Completions
      {"/v1/completions", R"({})", 400, "prompt"},
      {"/v1/completions", R"({"prompt":""})", 400, "prompt"},
      {"/v1/completions", R"({"prompt":[]})", 400, "prompt"},
      {"/v1/completions", R"({"prompt":5})", 400, "prompt"},
      {"/v1/completions", R"({"prompt":[1,-2]})", 400, "prompt[1]"},
      {"/v1/completions", R"({"prompt":[1,3029]})", 400, "prompt[1]"},
      {"/v1/completions", R"({"prompt":["a",1]})", 400, "prompt[1]"},
      {"/v1/completions", R"({"prompt":[[1],[]]})", 400, "prompt[1]"},
      {"/v1/completions", R"({"prompt":[{"a":1}]})", 400, "prompt"},
      {"/v1/completions", R"({"prompt":"x","max_tokens":0})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt":"x","max_tokens":"10"})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt":"x","max_tokens":5000})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt":"x","logprobs":true})", 400, "logprobs"},
      {"/v1/completions", R"({"prompt":"x","logprobs":21})", 400, "logprobs"},
      {"/v1/completions", R"({"prompt":"x","echo":"y"})", 400, "echo"},
      {"/v1/completions", R"({"prompt":"x","echo":true,"logprobs":1})", 400, "echo"},
      {"/v1/completions", R"({"prompt":"x","suffix":"s"})", 400, "suffix"},
      {"/v1/completions", R"({"prompt":"x","best_of":3})", 400, "best_of"},
      // Chat
      {"/v1/chat/completions", R"({})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages":{}})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages":[]})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages":["hi"]})", 400, "messages[0]"},
      {"/v1/chat/completions", R"({"messages":[{"content":"hi"}]})", 400, "messages[0].role"},
      {"/v1/chat/completions", R"({"messages":[{"role":"robot","content":"hi"}]})", 400, "messages[0].role"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user"}]})", 400, "messages[0].content"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":5}]})", 400, "messages[0].content"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})", 400, "messages[0].content[0].text"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":[{"text":"a"}]}]})", 400, "messages[0].content[0].type"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})", 400, "messages[0].content[0].type"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":[{"type":"weird"}]}]})", 400, "messages[0].content[0].type"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a","name":3}]})", 400, "messages[0].name"},
      {"/v1/chat/completions", R"({"messages":[{"role":"tool","content":"a","tool_call_id":3}]})", 400, "messages[0].tool_call_id"},
      {"/v1/chat/completions", R"({"messages":[{"role":"assistant","content":"a","reasoning_content":3}]})", 400, "messages[0].reasoning_content"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a","tool_calls":[]}]})", 400, "messages[0].tool_calls"},
      {"/v1/chat/completions", R"({"messages":[{"role":"assistant","tool_calls":{}}]})", 400, "messages[0].tool_calls"},
      {"/v1/chat/completions", R"({"messages":[{"role":"assistant","tool_calls":[{"type":"function"}]}]})", 400, "messages[0].tool_calls[0].function"},
      {"/v1/chat/completions", R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":"{}"}}]}]})", 400, "messages[0].tool_calls[0].function.name"},
      {"/v1/chat/completions", R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{bad"}}]}]})", 400, "messages[0].tool_calls[0].function.arguments"},
      {"/v1/chat/completions", R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"[1]"}}]}]})", 400, "messages[0].tool_calls[0].function.arguments"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"max_tokens":0})", 400, "max_tokens"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"max_completion_tokens":-1})", 400, "max_completion_tokens"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"max_completion_tokens":99999})", 400, "max_completion_tokens"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"logprobs":1})", 400, "logprobs"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"top_logprobs":2})", 400, "top_logprobs"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"logprobs":true,"top_logprobs":21})", 400, "top_logprobs"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"functions":[]})", 400, "functions"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"response_format":{"type":"xml"}})", 400, "response_format.type"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"response_format":{"type":"json_schema"}})", 400, "response_format.json_schema"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"integer","multipleOf":2}}}})", 400, "response_format.json_schema.schema"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"string","pattern":"(a"}}}})", 400, "response_format.json_schema.schema"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"response_format":{"type":"json_object"},"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"})", 400, "response_format"},
      {"/v1/completions", R"({"prompt":"x","response_format":{"type":"json_schema","json_schema":{"schema":{"type":"object","required":["a"]}}}})", 400, "response_format.json_schema.schema"},
      {"/generate", R"({"text":"x","sampling_params":{"regex":"(a"}})", 400, "sampling_params.regex"},
      {"/generate", R"({"text":"x","sampling_params":{"regex":"a\\1"}})", 400, "sampling_params.regex"},
      {"/generate", R"({"text":"x","sampling_params":{"ebnf":"root ::= item"}})", 400, "sampling_params.ebnf"},
      {"/generate", R"({"text":"x","sampling_params":{"ebnf":"root ::= \"a\" root"}})", 400, "sampling_params.ebnf"},
      {"/generate", R"({"text":"x","sampling_params":{"json_schema":"{\"type\":\"object\"}","regex":"a"}})", 400, "sampling_params.regex"},
      {"/generate", R"({"text":"x","sampling_params":{"json_schema":7}})", 400, "sampling_params.json_schema"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"response_format":"text"})", 400, "response_format"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"modalities":["audio"]})", 400, "modalities"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"continue_final_message":true})", 400, "continue_final_message"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"parallel_tool_calls":"no"})", 400, "parallel_tool_calls"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"tools":{}})", 400, "tools"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"tools":[{"type":"retrieval"}]})", 400, "tools[0].type"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function"}]})", 400, "tools[0].function"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{}}]})", 400, "tools[0].function.name"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"bad name"}}]})", 400, "tools[0].function.name"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}]})", 400, "tools[1].function.name"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f","description":1}}]})", 400, "tools[0].function.description"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f","parameters":[]}}]})", 400, "tools[0].function.parameters"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"tool_choice":"auto"})", 400, "tool_choice"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"sometimes"})", 400, "tool_choice"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}})", 400, "tool_choice"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function"}})", 400, "tool_choice"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":3})", 400, "tool_choice"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"chat_template_kwargs":[]})", 400, "chat_template_kwargs"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"chat_template_kwargs":{"enable_thinking":"no"}})", 400, "chat_template_kwargs.enable_thinking"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"reasoning_effort":"extreme"})", 400, "reasoning_effort"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"reasoning_effort":1})", 400, "reasoning_effort"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"add_generation_prompt":"yes"})", 400, "add_generation_prompt"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"temperature":-1})", 400, "temperature"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"n":0})", 400, "n"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"stop":[1]})", 400, "stop[0]"},
      // SGLang /generate
      {"/generate", R"({})", 400, "text"},
      {"/generate", R"({"text":""})", 400, "text"},
      {"/generate", R"({"text":5})", 400, "text"},
      {"/generate", R"({"text":["a","b"]})", 400, "text"},
      {"/generate", R"({"text":"a","input_ids":[1]})", 400, "text"},
      {"/generate", R"({"input_ids":[]})", 400, "input_ids"},
      {"/generate", R"({"input_ids":[[1],[2]]})", 400, "input_ids"},
      {"/generate", R"({"input_ids":[1,"a"]})", 400, "input_ids[1]"},
      {"/generate", R"({"input_ids":[1,5000]})", 400, "input_ids[1]"},
      {"/generate", R"({"text":"a","stream":1})", 400, "stream"},
      {"/generate", R"({"text":"a","sampling_params":[]})", 400, "sampling_params"},
      {"/generate", R"({"text":"a","sampling_params":{"max_new_tokens":-1}})", 400, "sampling_params.max_new_tokens"},
      {"/generate", R"({"text":"a","sampling_params":{"temperature":5}})", 400, "sampling_params.temperature"},
      {"/generate", R"({"text":"a","sampling_params":{"top_p":0}})", 400, "sampling_params.top_p"},
      {"/generate", R"({"text":"a","sampling_params":{"top_k":"x"}})", 400, "sampling_params.top_k"},
      {"/generate", R"({"text":"a","sampling_params":{"min_p":-1}})", 400, "sampling_params.min_p"},
      {"/generate", R"({"text":"a","sampling_params":{"stop":[""]}})", 400, "sampling_params.stop[0]"},
      {"/generate", R"({"text":"a","sampling_params":{"stop_token_ids":[-1]}})", 400, "sampling_params.stop_token_ids[0]"},
      {"/generate", R"({"text":"a","sampling_params":{"ignore_eos":"y"}})", 400, "sampling_params.ignore_eos"},
      {"/generate", R"({"text":"a","sampling_params":{"n":2}})", 400, "sampling_params.n"},
      {"/generate", R"({"text":"a","sampling_params":{"regex":"a+","structural_tag":"{}"}})", 400, "sampling_params.structural_tag"},
      {"/generate", R"({"text":"a","return_logprob":"y"})", 400, "return_logprob"},
      // Tokenizer endpoints
      {"/tokenize", R"({})", 400, "prompt"},
      {"/tokenize", R"({"prompt":5})", 400, "prompt"},
      {"/tokenize", R"({"prompt":"a","messages":[]})", 400, "prompt"},
      {"/tokenize", R"({"messages":[{"role":"x","content":"a"}]})", 400, "messages[0].role"},
      {"/detokenize", R"({})", 400, "tokens"},
      {"/detokenize", R"({"tokens":"1,2"})", 400, "tokens"},
      {"/detokenize", R"({"tokens":[1,-1]})", 400, "tokens[1]"},
  };
  for (const auto& c : cases) {
    CurlResult r = post(c.path, c.body);
    SCOPED_TRACE(std::string(c.path) + " " + c.body + " -> " + r.body);
    EXPECT_EQ(r.status, c.status);
    json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error") && j["error"].is_object());
    const json& e = j["error"];
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty());
    EXPECT_TRUE(e["type"].is_string());
    if (std::string(c.param).empty()) EXPECT_TRUE(e["param"].is_null());
    else EXPECT_EQ(e["param"], c.param);
    EXPECT_TRUE(e.contains("code"));
  }
}

TEST_F(GatewayCurl, BodyLimitRoutingAndMethods) {
  std::string path = ::testing::TempDir() + "/big.json";
  {
    std::ofstream f(path);
    f << "{\"prompt\":\"" << std::string(100000, 'a') << "\"}";
  }
  CurlResult r = curl("-X POST -H 'Content-Type: application/json' --data-binary @" + shell_quote(path) + " " + url("/v1/completions"));
  EXPECT_EQ(r.status, 413) << r.body;
  EXPECT_EQ(json::parse(r.body, nullptr, false)["error"]["code"], "request_too_large");
  // A client that asks "Expect: 100-continue" gets the go-ahead at once (curl would wait 1 s).
  auto t0 = std::chrono::steady_clock::now();
  r = curl("-H 'Expect: 100-continue' -H 'Content-Type: application/json' --data-binary " +
           shell_quote(R"({"prompt":"x","max_tokens":2})") + " " + url("/v1/completions"));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.5);
  r = curl(url("/nope"));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(json::parse(r.body, nullptr, false)["error"]["code"], "not_found");
  r = curl(url("/v1/completions"));  // GET on a POST route
  EXPECT_EQ(r.status, 405);
  r = post("/v1/models", "{}");
  EXPECT_EQ(r.status, 405);
}

}  // namespace
}  // namespace ft::test
