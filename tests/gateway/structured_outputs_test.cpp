// Structured outputs on the whole stack (issue 13's "done when"): the demo model (random weights,
// made by flashtier-demo-model), the real gpu-worker (CPU backend) and the gateway, driven by real
// clients in tests/gateway/js-structured: 200 generations over nested/array/enum/anyOf/format
// schemas validated by ajv, named and required tool choice (streamed and not, with and without
// parallel calls) with arguments validated by ajv, the openai client's chat.completions.parse
// with a zod schema, logit_bias (-100 bans, +100 forces) and min_tokens. Skipped only where the gpu-worker is not built.
#include <cstdio>
#include <filesystem>

#include "tests/gateway/gateway_test_util.h"

namespace ft::test {
namespace {

class StructuredOutputs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(bin_path("flashtier-gpu-worker"))) return;
    dir_ = std::filesystem::temp_directory_path() / ("flashtier-structured-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    const std::string model = (dir_ / "demo-model").string();
    const int rc = std::system((shell_quote(bin_path("flashtier-demo-model")) + " --out " + shell_quote(model) + " >/dev/null").c_str());
    ASSERT_EQ(rc, 0) << "flashtier-demo-model failed";
    const int port = free_port();
    worker_ = new ChildProcess({bin_path("flashtier-gpu-worker"), "--model", model, "--listen",
                                "127.0.0.1:" + std::to_string(port), "--experts", "local", "--max-batch-size", "8"});
    gw_ = new GatewayProcess({"--model-dir", model, "--port", "0", "--host", "127.0.0.1", "--served-model-name", "demo-model",
                              "--worker", "127.0.0.1:" + std::to_string(port), "--health-interval-ms", "100"});
    if (!gw_->wait_healthy(60000)) ADD_FAILURE() << "stack not healthy; worker said:\n" << worker_->output();
  }
  static void TearDownTestSuite() {
    delete gw_;
    delete worker_;
    gw_ = nullptr;
    worker_ = nullptr;
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  void SetUp() override {
    if (!worker_) GTEST_SKIP() << "flashtier-gpu-worker is not built";
  }
  // Runs one section of structured.mjs; returns its result line.
  static json run_section(const std::string& section) {
    const std::string cmd = shell_quote(std::string(FLASHTIER_SOURCE_DIR) + "/tests/gateway/js-structured/run.sh") + " " +
                            shell_quote("http://127.0.0.1:" + std::to_string(gw_->port()) + "/v1") + " " + section + " 2>&1";
    FILE* f = ::popen(cmd.c_str(), "r");
    if (!f) return json();
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    const int rc = ::pclose(f);
    EXPECT_EQ(rc, 0) << out;
    const size_t line = out.rfind("{\"ok\"");
    if (line == std::string::npos) {
      ADD_FAILURE() << out;
      return json();
    }
    return json::parse(out.substr(line), nullptr, false);
  }
  static inline std::filesystem::path dir_;
  static inline ChildProcess* worker_ = nullptr;
  static inline GatewayProcess* gw_ = nullptr;
};

int total(const json& counts, const std::string& prefix) {
  int n = 0;
  for (auto it = counts.begin(); it != counts.end(); ++it)
    if (it.key().rfind(prefix, 0) == 0) n += it.value().get<int>();
  return n;
}

TEST_F(StructuredOutputs, TwoHundredSchemaGenerationsValidateWithAjv) {
  const json r = run_section("schemas");
  ASSERT_TRUE(r.is_object());
  EXPECT_TRUE(r["ok"].get<bool>()) << r["failures"].dump(2);
  EXPECT_EQ(total(r["counts"], "schema"), 200) << r["counts"].dump();
  EXPECT_EQ(total(r["counts"], "json_object"), 10) << r["counts"].dump();
}

TEST_F(StructuredOutputs, NamedAndRequiredToolChoiceYieldValidCalls) {
  const json r = run_section("tools");
  ASSERT_TRUE(r.is_object());
  EXPECT_TRUE(r["ok"].get<bool>()) << r["failures"].dump(2);
  for (const char* k : {"named-stream", "named-plain", "required-stream", "required-plain"})
    EXPECT_GE(r["counts"].value(k, 0), 10) << k << " " << r["counts"].dump();
}

TEST_F(StructuredOutputs, OpenAiClientParsesWithZodAndHonoursLogitBiasAndMinTokens) {
  const json r = run_section("parse");
  ASSERT_TRUE(r.is_object());
  EXPECT_TRUE(r["ok"].get<bool>()) << r["failures"].dump(2);
  EXPECT_EQ(r["counts"].value("parse", 0), 10) << r["counts"].dump();
  for (const char* k : {"error-multipleOf", "error-contradiction", "error-min_tokens", "logit_bias-ban", "logit_bias-force", "min_tokens"})
    EXPECT_EQ(r["counts"].value(k, 0), 1) << k << " " << r["counts"].dump();
}

}  // namespace
}  // namespace ft::test
