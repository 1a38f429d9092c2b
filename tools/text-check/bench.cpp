// flashtier-text-bench: throughput of the text layer (tokenizer, detokenizer, chat template,
// GLM parser) on a model directory's tokenizer and template. Prints a markdown table.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "shared/core/error.h"
#include "shared/text/chat_template.h"
#include "shared/text/detokenizer.h"
#include "shared/text/glm_parser.h"
#include "shared/text/tokenizer.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// Best of `reps` wall times in milliseconds.
double time_ms(int reps, const std::function<void()>& fn) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return best;
}

// A deterministic mix of prose, code, numbers, CJK, emoji and whitespace runs.
std::string corpus(size_t min_bytes) {
  static const char* parts[] = {
      "The quick brown fox jumps over the lazy dog; DON'T STOP, we'll see it's fine. ",
      "def merge(a, b):\n    return sorted(a + b, key=lambda x: (x[1], -x[0]))  # stable\n\n",
      "for (int i = 0; i < n; ++i) { sum += v[i] * 0.5f; }\n",
      "Größere Äpfel schmecken süß. Ça va très bien, merci ! ",
      "我们今天去公园散步，然后吃了一顿美味的晚餐。東京は日本の首都です。",
      "Invoice #20240917: 1,234.56 EUR due 2024-10-01 (ref 998877665544).\n",
      "🙂🚀👍🏽 naïve café résumé\t\t   \n",
      "    if (x) {\n        return y;\n    }\n",
  };
  std::string s;
  size_t k = 0;
  while (s.size() < min_bytes) s += parts[(k++ * 7) % (sizeof parts / sizeof *parts)];
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  fs::path model_dir = "tests/fixtures/glm-text";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model-dir" && i + 1 < argc) model_dir = argv[++i];
    else {
      std::cerr << "usage: flashtier-text-bench [--model-dir DIR]\n";
      return 2;
    }
  }
  try {
    const auto tok_file = model_dir / "tokenizer.json";
    // Grow the text until it is ~100k tokens with this vocabulary.
    std::string text = corpus(1 << 16);
    {
      const auto probe = ft::text::Tokenizer::from_file(tok_file);
      const double bytes_per_token = static_cast<double>(text.size()) / probe.encode(text).size();
      text = corpus(static_cast<size_t>(100000 * bytes_per_token * 1.01));
    }
    std::vector<int32_t> ids;
    double cold = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const auto fresh = ft::text::Tokenizer::from_file(tok_file);  // empty word cache
      cold = std::min(cold, time_ms(1, [&] { ids = fresh.encode(text); }));
    }
    const double load = time_ms(3, [&] { (void)ft::text::Tokenizer::from_file(tok_file); });
    const auto tok = ft::text::Tokenizer::from_file(tok_file);
    ids = tok.encode(text);
    const double warm = time_ms(5, [&] { ids = tok.encode(text); });
    std::string decoded;
    const double dec = time_ms(5, [&] { decoded = tok.decode(ids); });
    const double stream = time_ms(5, [&] {
      ft::text::IncrementalDetokenizer d(tok);
      size_t n = 0;
      for (int32_t id : ids) n += d.push(id).size();
      n += d.finish().size();
      if (n != decoded.size()) std::abort();
    });

    const auto tpl = ft::text::ChatTemplate::from_model_dir(model_dir);
    ft::text::ChatRequest small;
    small.messages_json = R"([{"role":"system","content":"You are terse."},{"role":"user","content":"2+2?"}])";
    ft::text::ChatRequest big;
    std::string msgs = "[";
    for (int i = 0; i < 50; ++i) {
      if (i) msgs += ",";
      msgs += R"({"role":"user","content":"Question number )" + std::to_string(i) + R"( about the weather?"},)";
      msgs += R"({"role":"assistant","content":"","reasoning_content":"Call the tool.","tool_calls":[{"id":"c)" +
              std::to_string(i) + R"(","type":"function","function":{"name":"get_weather","arguments":{"city":"Paris","days":3}}}]},)";
      msgs += R"({"role":"tool","tool_call_id":"c)" + std::to_string(i) + R"(","content":"{\"temp\": 21}"})";
    }
    big.messages_json = msgs + "]";
    big.tools_json = R"([{"type":"function","function":{"name":"get_weather","description":"Get the weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}}])";
    std::string r_small, r_big;
    const double t_small = time_ms(50, [&] { r_small = tpl.render(small); });
    const double t_big = time_ms(10, [&] { r_big = tpl.render(big); });

    std::string gen = "Let me think about this carefully. ";
    while (gen.size() < 200000) gen += "The weather in Paris is mild; consider 2 days. ";
    gen += "</think>Here you go.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>";
    const auto gen_ids = tok.encode(gen);
    const double t_parse = time_ms(3, [&] {
      ft::text::GlmStreamParser p;
      ft::text::IncrementalDetokenizer d(tok);
      for (int32_t id : gen_ids) (void)p.feed(d.push(id));
      (void)p.feed(d.finish());
      (void)p.finish();
    });

    auto row = [](const std::string& what, const std::string& size, double ms, const std::string& rate) {
      std::printf("| %s | %s | %.2f ms | %s |\n", what.c_str(), size.c_str(), ms, rate.c_str());
    };
    auto per_s = [](double n, double ms, const char* unit) {
      char b[64];
      std::snprintf(b, sizeof b, "%.2f M%s/s", n / ms / 1000.0, unit);
      return std::string(b);
    };
    const double n = static_cast<double>(ids.size());
    std::printf("model dir: %s (%zu-entry vocabulary)\n\n", model_dir.string().c_str(), tok.vocab_size());
    std::printf("| operation | input | time (best) | throughput |\n|---|---|---|---|\n");
    row("load tokenizer.json", std::to_string(fs::file_size(tok_file)) + " B", load, "-");
    row("encode, cold word cache", std::to_string(ids.size()) + " tokens / " + std::to_string(text.size()) + " B", cold, per_s(n, cold, " tok"));
    row("encode, warm word cache", std::to_string(ids.size()) + " tokens", warm, per_s(n, warm, " tok"));
    row("decode", std::to_string(ids.size()) + " tokens", dec, per_s(n, dec, " tok"));
    row("streaming detokenize (1 id per call)", std::to_string(ids.size()) + " tokens", stream, per_s(n, stream, " tok"));
    row("render GLM-5.3 template, 2 messages", std::to_string(r_small.size()) + " B out", t_small, "-");
    row("render GLM-5.3 template, 150 messages + tools", std::to_string(r_big.size()) + " B out", t_big, "-");
    row("detokenize + GLM stream parse (1 id per call)", std::to_string(gen_ids.size()) + " tokens", t_parse,
        per_s(static_cast<double>(gen_ids.size()), t_parse, " tok"));
  } catch (const ft::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
