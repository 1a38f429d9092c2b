// The demo model with GLM-5.3-Flash's real vocabulary (flashtier-demo-model --vocab 154880):
// the tokenizer puts GLM's special tokens at their real ids (expected values from
// glm-chat-format.md, not from the tool), and the whole stack on it (real gpu-worker, gateway)
// takes any prompt id below the model's vocab_size (the tokenizer ends at 154,856), refuses ids
// past it naming the field, decodes the padding ids (no token) to nothing, and serves the
// @anthropic-ai/sdk client a tool-use conversation streaming and not. Skipped where the
// gpu-worker binary was not built.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "shared/text/tokenizer.h"
#include "tests/gateway/gateway_test_util.h"

namespace ft::test {
namespace {

namespace fs = std::filesystem;

json read_json_file(const fs::path& p) {
  std::ifstream f(p);
  return json::parse(f);
}

class DemoStack : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("ft-demo-vocab-" + std::to_string(::getpid())));
    int rc = 0;
    // Narrow and shallow: the vocabulary is what this test is about (2 x 154880 x 64 bf16).
    const std::string out = run_command(bin_path("flashtier-demo-model") + " --out " + shell_quote(dir_->string()) +
                                            " --vocab 154880 --hidden 64 --layers 4 --experts 4 --top-k 2",
                                        &rc);
    if (rc != 0) ADD_FAILURE() << "flashtier-demo-model failed: " << out;
  }
  // The stack starts on the first test that needs it (ctest runs each test in its own process).
  static void start_stack() {
    if (worker_ || !fs::exists(bin_path("flashtier-gpu-worker"))) return;
    const int port = free_port();
    worker_ = new ChildProcess({bin_path("flashtier-gpu-worker"), "--model", dir_->string(), "--listen",
                                "127.0.0.1:" + std::to_string(port), "--experts", "local", "--max-batch-size", "4"});
    std::vector<std::string> args = gateway_args({"127.0.0.1:" + std::to_string(port)});
    args[1] = dir_->string();  // --model-dir
    gw_ = new GatewayProcess(args);
    if (!gw_->wait_healthy(60000)) ADD_FAILURE() << "stack not healthy; worker said:\n" << worker_->output();
  }
  static void TearDownTestSuite() {
    delete gw_;
    delete worker_;
    gw_ = nullptr;
    worker_ = nullptr;
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }
  void need_stack() {
    start_stack();
    if (!worker_) GTEST_SKIP() << "flashtier-gpu-worker is not built";
  }
  static HttpResult post(const std::string& path, const json& body) {
    return http_request(gw_->port(), "POST", path, body.dump(), {}, 120000);
  }
  static std::string served() { return dir_->filename().string(); }
  static fs::path* dir_;
  static ChildProcess* worker_;
  static GatewayProcess* gw_;
};
fs::path* DemoStack::dir_ = nullptr;
ChildProcess* DemoStack::worker_ = nullptr;
GatewayProcess* DemoStack::gw_ = nullptr;

TEST_F(DemoStack, SpecialTokensAtGlm53Ids) {
  const text::Tokenizer tok = text::Tokenizer::from_file(*dir_ / "tokenizer.json");
  const std::pair<const char*, int32_t> want[] = {
      {"<|endoftext|>", 154820}, {"[gMASK]", 154822}, {"<sop>", 154824},     {"<|system|>", 154826},
      {"<|user|>", 154827},      {"<|assistant|>", 154828}, {"<|observation|>", 154829}, {"<think>", 154841},
      {"</think>", 154842},      {"<tool_call>", 154843}};
  for (const auto& [t, id] : want) EXPECT_EQ(tok.token_to_id(t), std::optional<int32_t>(id)) << t;
  EXPECT_EQ(tok.vocab_size(), 154856u);  // 154,856 real tokens (glm-chat-format.md)
  const json cfg = read_json_file(*dir_ / "config.json");
  EXPECT_EQ(cfg["text_config"]["vocab_size"], 154880);
  EXPECT_EQ(read_json_file(*dir_ / "generation_config.json")["eos_token_id"], json::parse("[154820, 154827, 154829]"));
  // Ordinary text still tokenizes (BPE ids from 0) and round-trips; every id below the specials
  // is a token (as in the real vocabulary, so random weights make text); the padding ids past
  // the last token decode to nothing.
  const auto ids = tok.encode("Hello! What is the weather in Paris?");
  for (int32_t id : ids) EXPECT_LT(id, 154820);
  EXPECT_EQ(tok.decode(ids), "Hello! What is the weather in Paris?");
  for (int32_t id : {1000, 100000, 150000, 154819}) EXPECT_FALSE(tok.decode(std::vector<int32_t>{id}).empty()) << id;
  const std::vector<int32_t> padding = {154856, 154870, 154879};
  EXPECT_EQ(tok.decode(padding), "");
  // The chat prompt starts as GLM-5.3's does: [gMASK]<sop><|system|>.
  const std::string rendered_start = "[gMASK]<sop>";
  const auto start = tok.encode(rendered_start);
  EXPECT_EQ(start, std::vector<int32_t>({154822, 154824}));
}

TEST_F(DemoStack, PromptIdsAreCheckedAgainstTheModelsVocabSize) {
  need_stack();
  // The reference recipe's benchmark draws ids up to 150,000; 154879 is padding (no token).
  json body = {{"prompt", {154822, 154824, 5, 100000, 150000, 154855, 154879}}, {"max_tokens", 6},
               {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 0}, {"return_tokens_as_token_ids", true}};
  HttpResult r = post("/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  json c = parse(r.body);
  EXPECT_EQ(c["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(c["usage"]["completion_tokens"], 6);
  EXPECT_EQ(c["choices"][0]["logprobs"]["tokens"].size(), 6u);
  body["prompt"] = {1, 154880};
  r = post("/v1/completions", body);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(parse(r.body)["error"]["param"], "prompt[1]");
  r = post("/generate", {{"input_ids", {154822, 120000}}, {"sampling_params", {{"max_new_tokens", 2}}}});
  EXPECT_EQ(r.status, 200) << r.body;
  r = post("/detokenize", {{"tokens", {154822, 154870, 154824}}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(parse(r.body)["prompt"], "[gMASK]<sop>");
  r = post("/detokenize", {{"tokens", {154880}}});
  EXPECT_EQ(r.status, 400) << r.body;
  r = http_request(gw_->port(), "GET", "/server_info");
  EXPECT_EQ(parse(r.body)["vocab_size"], 154880);
}

TEST_F(DemoStack, AnthropicSdkToolConversationStreamingAndNot) {
  need_stack();
  const json seen = run_anthropic_client("demo.mjs", gw_->port(), served());
  std::printf("demo model replies: %s\n", seen.dump().c_str());
}

}  // namespace
}  // namespace ft::test
