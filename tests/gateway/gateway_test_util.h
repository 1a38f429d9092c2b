#pragma once
// Shared setup for the gateway's HTTP tests: the tiny-chat tokenizer (to script tokens from
// text), a fake worker, and a gateway process pointed at it.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "shared/text/tokenizer.h"
#include "tests/gateway/fake_worker.h"
#include "tests/gateway/harness.h"

namespace ft::test {

using json = nlohmann::json;

inline std::string tiny_chat_model() { return std::string(FLASHTIER_SOURCE_DIR) + "/tests/fixtures/glm5-tiny-chat/model"; }

inline const text::Tokenizer& tiny_tokenizer() {
  static text::Tokenizer tok = text::Tokenizer::from_file(tiny_chat_model() + "/tokenizer.json");
  return tok;
}

inline std::vector<int32_t> ids_of(const std::string& s) { return tiny_tokenizer().encode(s); }

inline std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

constexpr int32_t kEos = 3000;          // <|endoftext|>
constexpr int32_t kUserEos = 3007;      // <|user|>
constexpr int32_t kObservation = 3009;  // <|observation|>

inline FakeScript script_of(std::vector<int32_t> tokens, std::chrono::microseconds delay) {
  FakeScript s;
  s.tokens = std::move(tokens);
  s.delay = delay;
  return s;
}

inline std::vector<std::string> gateway_args(const std::vector<std::string>& workers, std::vector<std::string> extra = {}) {
  std::vector<std::string> a{"--model-dir", tiny_chat_model(), "--port", "0", "--host", "127.0.0.1",
                             "--keepalive-ms", "100", "--health-interval-ms", "100"};
  for (const auto& w : workers) {
    a.push_back("--worker");
    a.push_back(w);
  }
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

inline json parse(const std::string& s) {
  try {
    return json::parse(s);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not JSON: " << s;
    return json();
  }
}

// Runs a shell command; its stdout and stderr together.
inline std::string run_command(const std::string& cmd, int* rc) {
  FILE* f = ::popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while (f && (n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  *rc = f ? ::pclose(f) : -1;
  return out;
}

// Runs one of the @anthropic-ai/sdk scripts (tests/gateway/anthropic_js/) against a gateway and
// checks its verdict, the last line {"ok": ..., "failures": [...], "seen": {...}}; returns "seen".
inline json run_anthropic_client(const std::string& script, int port, const std::string& model) {
  int rc = 0;
  const std::string out =
      run_command(shell_quote(std::string(FLASHTIER_SOURCE_DIR) + "/tests/gateway/anthropic_js/run.sh") + " " + script + " " +
                      shell_quote("http://127.0.0.1:" + std::to_string(port)) + " " + shell_quote(model),
                  &rc);
  EXPECT_EQ(rc, 0) << out;
  const size_t line = out.rfind("{\"ok\"");
  if (line == std::string::npos) {
    ADD_FAILURE() << "no verdict line from " << script << ":\n" << out;
    return json();
  }
  json r = json::parse(out.substr(line), nullptr, false);
  if (!r.is_object()) {
    ADD_FAILURE() << out;
    return json();
  }
  EXPECT_TRUE(r["ok"].get<bool>()) << r["failures"].dump(2);
  return r["seen"];
}

// Value of an unlabelled metric line "name value" in Prometheus text.
inline double metric(const std::string& text, const std::string& name) {
  size_t p = 0;
  while ((p = text.find(name + " ", p)) != std::string::npos) {
    if (p == 0 || text[p - 1] == '\n') return std::stod(text.substr(p + name.size() + 1));
    p += name.size();
  }
  return -1;
}

// Value of the first sample of a labelled metric "name{...} value".
inline double labelled_metric(const std::string& text, const std::string& name) {
  size_t p = text.find("\n" + name + "{");
  if (p == std::string::npos) return -1;
  size_t e = text.find('\n', p + 1);
  std::string line = text.substr(p + 1, e - p - 1);
  return std::stod(line.substr(line.rfind(' ') + 1));
}

}  // namespace ft::test
