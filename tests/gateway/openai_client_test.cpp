// The official `openai` npm client (installed by tests/gateway/js/run.sh) against the gateway
// binary with a fake worker behind it: streaming and non-streaming chat, completions, errors.
#include <cstdio>

#include "tests/gateway/gateway_test_util.h"

namespace ft::test {
namespace {

TEST(GatewayOpenAiNodeClient, ChatStreamingChatAndCompletion) {
  FakeWorker w;
  const int32_t think = tiny_tokenizer().token_to_id("<think>").value();
  const auto chat = cat(ids_of("Thinking hard.</think>Hello from flashtier."), {kUserEos});
  const auto completion = cat(ids_of(" and so on"), {kEos});
  // Chat prompts end with the generation prompt's <think>; completions do not.
  w.set_script([&](const flashtier::v1::GenerateRequest& r) {
    bool is_chat = r.prompt_token_ids(r.prompt_token_ids_size() - 1) == think;
    return script_of(is_chat ? chat : completion, std::chrono::milliseconds(2));
  });
  GatewayProcess gw(gateway_args({w.address()}));
  ASSERT_TRUE(gw.wait_healthy());
  std::string cmd = shell_quote(std::string(FLASHTIER_SOURCE_DIR) + "/tests/gateway/js/run.sh") + " " +
                    shell_quote("http://127.0.0.1:" + std::to_string(gw.port()) + "/v1") + " model 2>&1";
  FILE* f = ::popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int rc = ::pclose(f);
  EXPECT_EQ(rc, 0) << out;
  size_t line = out.rfind("{\"ok\"");
  ASSERT_NE(line, std::string::npos) << out;
  json r = json::parse(out.substr(line), nullptr, false);
  ASSERT_TRUE(r.is_object()) << out;
  EXPECT_TRUE(r["ok"].get<bool>()) << r["failures"].dump(2);
  EXPECT_EQ(r["seen"]["chat"]["content"], "Hello from flashtier.");
  EXPECT_EQ(r["seen"]["completion"], " and so on");
}

}  // namespace
}  // namespace ft::test
