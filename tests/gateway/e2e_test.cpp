// The gateway in front of the real gpu-worker on the tiny-chat fixture (transformers' greedy
// tokens in reference.safetensors, chats in reference.json): completions return exactly the
// fixture's generated ids, chats return the detokenized greedy continuation cut at the first EOS
// and split by the GLM parser (streaming and non-streaming alike), concurrency does not change
// greedy outputs, and a disconnected stream frees its worker slot. Skipped only where the
// gpu-worker binary was not built.
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <thread>

#include "shared/model/safetensors.h"
#include "shared/model/tensor_convert.h"
#include "shared/text/glm_parser.h"
#include "tests/gateway/gateway_test_util.h"

namespace ft::test {
namespace {

using namespace std::chrono_literals;

std::string fixture_dir() { return std::string(FLASHTIER_SOURCE_DIR) + "/tests/fixtures/glm5-tiny-chat"; }

struct Case {
  std::vector<int32_t> input, generated;
  json messages;
};

const std::vector<Case>& cases() {
  static std::vector<Case> out = [] {
    std::vector<Case> v;
    TensorStore ref = TensorStore::open(fixture_dir() + "/reference.safetensors");
    std::ifstream f(fixture_dir() + "/reference.json");
    json meta = json::parse(f);
    for (size_t i = 0; i < meta["case_messages"].size(); ++i) {
      Case c;
      for (int64_t x : to_i64(ref.get("case" + std::to_string(i) + ".input_ids"))) c.input.push_back(int32_t(x));
      for (int64_t x : to_i64(ref.get("case" + std::to_string(i) + ".generated_ids"))) c.generated.push_back(int32_t(x));
      c.messages = meta["case_messages"][i]["messages"];
      EXPECT_TRUE(meta["case_messages"][i]["tools"].is_null());
      v.push_back(std::move(c));
    }
    return v;
  }();
  return out;
}

std::vector<int32_t> eos_ids() {
  std::ifstream f(fixture_dir() + "/model/generation_config.json");
  return json::parse(f)["eos_token_id"].get<std::vector<int32_t>>();
}

class GatewayE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(bin_path("flashtier-gpu-worker"))) return;
    int port = free_port();
    worker_ = new ChildProcess({bin_path("flashtier-gpu-worker"), "--model", fixture_dir() + "/model", "--listen",
                                "127.0.0.1:" + std::to_string(port), "--experts", "local", "--max-batch-size", "8"});
    gw_ = new GatewayProcess(gateway_args({"127.0.0.1:" + std::to_string(port)}));
    if (!gw_->wait_healthy(60000)) ADD_FAILURE() << "stack not healthy; worker said:\n" << worker_->output();
  }
  static void TearDownTestSuite() {
    delete gw_;
    delete worker_;
    gw_ = nullptr;
    worker_ = nullptr;
  }
  void SetUp() override {
    if (!worker_) GTEST_SKIP() << "flashtier-gpu-worker is not built";
  }
  static HttpResult post(const std::string& path, const json& body) { return http_request(gw_->port(), "POST", path, body.dump(), {}, 120000); }
  static std::vector<json> events(const std::string& path, const json& body) {
    HttpResult r = post(path, body);
    EXPECT_EQ(r.status, 200) << r.body;
    auto data = sse_data(r.body);
    std::vector<json> out;
    if (data.empty() || data.back() != "[DONE]") {
      ADD_FAILURE() << "stream did not end with [DONE]: " << r.body;
      return out;
    }
    for (size_t i = 0; i + 1 < data.size(); ++i) out.push_back(parse(data[i]));
    return out;
  }
  static ChildProcess* worker_;
  static GatewayProcess* gw_;
};
ChildProcess* GatewayE2E::worker_ = nullptr;
GatewayProcess* GatewayE2E::gw_ = nullptr;

TEST_F(GatewayE2E, CompletionsReturnTheFixtureGreedyIds) {
  for (size_t i = 0; i < cases().size(); ++i) {
    const Case& c = cases()[i];
    SCOPED_TRACE("case " + std::to_string(i));
    json body = {{"prompt", c.input}, {"max_tokens", c.generated.size()}, {"temperature", 0}, {"ignore_eos", true},
                 {"logprobs", 0}, {"return_tokens_as_token_ids", true}};
    HttpResult r = post("/v1/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    json ch = parse(r.body)["choices"][0];
    std::vector<std::string> want_tokens;
    for (int32_t id : c.generated) want_tokens.push_back("token_id:" + std::to_string(id));
    EXPECT_EQ(ch["logprobs"]["tokens"], json(want_tokens));
    const std::string want_text = tiny_tokenizer().decode(c.generated, true);
    EXPECT_EQ(ch["text"], want_text);
    EXPECT_EQ(ch["finish_reason"], "length");
    EXPECT_EQ(parse(r.body)["usage"]["completion_tokens"], c.generated.size());

    body["stream"] = true;
    body.erase("logprobs");
    std::string text;
    for (const auto& ev : events("/v1/completions", body)) text += ev["choices"][0]["text"].get<std::string>();
    EXPECT_EQ(text, want_text);

    // SGLang's /generate gives the same ids.
    HttpResult g = post("/generate", {{"input_ids", c.input},
                                      {"sampling_params", {{"temperature", 0}, {"max_new_tokens", c.generated.size()}, {"ignore_eos", true}}}});
    ASSERT_EQ(g.status, 200) << g.body;
    EXPECT_EQ(parse(g.body)["output_ids"], json(c.generated));
  }
}

TEST_F(GatewayE2E, ChatReturnsTheGreedyContinuationSplitByTheParser) {
  const auto eos = eos_ids();
  for (size_t i = 0; i < cases().size(); ++i) {
    const Case& c = cases()[i];
    SCOPED_TRACE("case " + std::to_string(i));
    // Expected: the fixture's greedy tokens up to the first EOS, detokenized, split by the parser.
    std::vector<int32_t> cut;
    bool stopped = false;
    for (int32_t id : c.generated) {
      if (std::find(eos.begin(), eos.end(), id) != eos.end()) {
        stopped = true;
        break;
      }
      cut.push_back(id);
    }
    const std::string text = tiny_tokenizer().decode(cut, true);
    text::GlmParseOptions po;
    po.starts_in_reasoning = c.input.back() == tiny_tokenizer().token_to_id("<think>").value();
    po.parse_tool_calls = false;
    text::GlmMessage want = text::parse_glm_output(text, po);

    json body = {{"model", "model"}, {"messages", c.messages}, {"temperature", 0}, {"max_completion_tokens", c.generated.size()}};
    HttpResult r = post("/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    json j = parse(r.body);
    EXPECT_EQ(j["usage"]["prompt_tokens"], c.input.size()) << "template + tokenizer do not reproduce the fixture prompt";
    json msg = j["choices"][0]["message"];
    EXPECT_EQ(msg["reasoning_content"], want.reasoning_content ? json(*want.reasoning_content) : json(nullptr));
    EXPECT_EQ(msg["reasoning"], msg["reasoning_content"]);
    EXPECT_EQ(msg["content"], want.content ? json(*want.content) : json(nullptr));
    EXPECT_EQ(j["choices"][0]["finish_reason"], stopped ? "stop" : "length");

    body["stream"] = true;
    std::string reasoning, content, finish;
    for (const auto& ev : events("/v1/chat/completions", body)) {
      const json& ch = ev["choices"][0];
      if (ch["delta"].contains("reasoning_content")) reasoning += ch["delta"]["reasoning_content"].get<std::string>();
      if (ch["delta"].contains("content")) content += ch["delta"]["content"].get<std::string>();
      if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    }
    EXPECT_EQ(reasoning, want.reasoning_content.value_or(""));
    EXPECT_EQ(content, want.content.value_or(""));
    EXPECT_EQ(finish, j["choices"][0]["finish_reason"]);
  }
}

TEST_F(GatewayE2E, EightConcurrentStreamsGiveTheSequentialGreedyOutputs) {
  auto body = [](int k) {
    std::vector<int32_t> prompt = cases()[k % cases().size()].input;
    prompt.insert(prompt.end() - 2, 40 + k);  // eight different prompts
    return json{{"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}, {"stream", true}};
  };
  auto run = [&](int k) {
    std::string text;
    for (const auto& ev : events("/v1/completions", body(k))) text += ev["choices"][0]["text"].get<std::string>();
    return text;
  };
  std::vector<std::string> seq;
  for (int k = 0; k < 8; ++k) seq.push_back(run(k));
  std::vector<std::future<std::string>> par;
  for (int k = 0; k < 8; ++k) par.push_back(std::async(std::launch::async, run, k));
  for (int k = 0; k < 8; ++k) EXPECT_EQ(par[k].get(), seq[k]) << "stream " << k;
  EXPECT_GT(std::set<std::string>(seq.begin(), seq.end()).size(), 1u);
}

TEST_F(GatewayE2E, DisconnectedStreamFreesItsSlot) {
  json body = {{"prompt", cases()[0].input}, {"max_tokens", 20000}, {"ignore_eos", true}, {"stream", true}};
  SseStream st(gw_->port(), "/v1/completions", body.dump());
  ASSERT_EQ(st.status(30000), 200);
  std::string ev;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(st.next(ev, 30000));
  std::string m = http_request(gw_->port(), "GET", "/metrics").body;
  EXPECT_EQ(metric(m, "flashtier_gateway_running"), 1);
  st.close();
  // The worker's own Stats (polled every 100 ms) show the slot freed and the cancellation.
  bool freed = false;
  for (int i = 0; i < 100 && !freed; ++i) {
    std::this_thread::sleep_for(50ms);
    m = http_request(gw_->port(), "GET", "/metrics").body;
    freed = metric(m, "flashtier_gateway_running") == 0 && labelled_metric(m, "flashtier_worker_running") == 0 &&
            labelled_metric(m, "flashtier_worker_cancelled_total") >= 1;
  }
  EXPECT_TRUE(freed) << m;
  EXPECT_GE(metric(m, "flashtier_gateway_client_disconnects_total"), 1);
  // And the worker serves the next request.
  HttpResult r = post("/v1/completions", {{"prompt", cases()[1].input}, {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true}});
  EXPECT_EQ(r.status, 200);
}

TEST_F(GatewayE2E, ARepeatedPromptIsServedFromThePrefixCache) {
  // A prompt no other test sends whole, twice: the second time the worker restores all but the
  // one token it must compute, reports it in usage, and answers the same. (The first may already
  // find a shorter prefix: other tests sent case 2's prompt.)
  std::vector<int32_t> prompt = cases()[2].input;
  prompt.insert(prompt.end(), cases()[0].input.begin(), cases()[0].input.end());
  const json body = {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}};
  HttpResult a = post("/v1/completions", body), b = post("/v1/completions", body);
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_LT(parse(a.body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<size_t>(), cases()[2].input.size());
  EXPECT_EQ(parse(b.body)["usage"]["prompt_tokens_details"]["cached_tokens"], prompt.size() - 1);
  EXPECT_EQ(parse(a.body)["choices"][0]["text"], parse(b.body)["choices"][0]["text"]);
  // The worker's Stats (polled by the gateway) carry the cache's hits and its memory.
  std::string m;
  for (int i = 0; i < 200; ++i) {
    m = http_request(gw_->port(), "GET", "/metrics").body;
    if (labelled_metric(m, "flashtier_worker_prefix_cache_hits_total") >= 1) break;
    std::this_thread::sleep_for(25ms);
  }
  EXPECT_GE(labelled_metric(m, "flashtier_worker_prefix_cache_hits_total"), 1) << m;
  EXPECT_GT(labelled_metric(m, "flashtier_worker_prefix_cache_bytes"), 0) << m;
  EXPECT_NE(m.find("flashtier_worker_memory_bytes{worker=\""), std::string::npos) << m;
}

}  // namespace
}  // namespace ft::test
