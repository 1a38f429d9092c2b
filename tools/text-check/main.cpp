// flashtier-text-check: checks the tokenizer and chat template of a model directory against golden
// files made with Hugging Face tokenizers / transformers. Ends with "N passed, M failed".
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/core/error.h"
#include "shared/text/chat_template.h"
#include "shared/text/tokenizer.h"

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

constexpr const char* kUsage =
    "usage: flashtier-text-check --model-dir DIR [--tokenizer-golden FILE]... [--template FILE] [--chat-golden FILE]...\n"
    "  --model-dir DIR         tokenizer.json, tokenizer_config.json and optionally chat_template.jinja\n"
    "  --tokenizer-golden FILE cases {text, ids, decoded, decoded_skip_special}\n"
    "  --chat-golden FILE      cases {messages, tools, add_generation_prompt, template_kwargs, rendered, ids}\n"
    "  --template FILE         template for the chat goldens that follow it (or, given last, for every\n"
    "                          golden whose \"template\" field names a file other than the model's own)\n"
    "  --verbose               print every case, not only failures\n";

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw ft::Error(p.string() + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

ojson read_json(const fs::path& p) {
  try {
    return ojson::parse(read_text(p));
  } catch (const ojson::exception& e) {
    throw ft::Error(p.string() + ": invalid JSON: " + e.what());
  }
}

// Where two strings first differ, with a little context, JSON-escaped so whitespace is visible.
std::string first_difference(const std::string& got, const std::string& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  const size_t from = i > 20 ? i - 20 : 0;
  return "first difference at byte " + std::to_string(i) + ": got " + ojson(got.substr(from, 60)).dump(-1, ' ', false, ojson::error_handler_t::replace) +
         " want " + ojson(want.substr(from, 60)).dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size() && i < 24; ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  if (ids.size() > 24) s += ",...";
  return s + "] (" + std::to_string(ids.size()) + " ids)";
}

std::string ids_difference(const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  return "ids differ at position " + std::to_string(i) + " (got " + std::to_string(got.size()) + " ids, want " +
         std::to_string(want.size()) + ")";
}

struct Tally {
  int passed = 0, failed = 0;
};

void report(Tally& t, bool ok, const std::string& what, const std::vector<std::string>& problems, bool verbose) {
  if (ok) {
    ++t.passed;
    if (verbose) std::cout << "PASS " << what << "\n";
    return;
  }
  ++t.failed;
  std::cout << "FAIL " << what << "\n";
  for (const auto& p : problems) std::cout << "     " << p << "\n";
}

void check_tokenizer(const ft::text::Tokenizer& tok, const fs::path& file, Tally& t, bool verbose) {
  const ojson g = read_json(file);
  const auto& cases = g.at("cases");
  Tally local;
  for (size_t i = 0; i < cases.size(); ++i) {
    const ojson& c = cases[i];
    std::vector<std::string> problems;
    const std::string text = c.at("text").get<std::string>();
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    const auto got = tok.encode(text);
    if (got != want) problems.push_back("encode: " + ids_difference(got, want) + "; got " + ids_text(got));
    if (c.contains("decoded")) {
      const std::string d = tok.decode(want, false);
      if (d != c["decoded"].get<std::string>()) problems.push_back("decode: " + first_difference(d, c["decoded"]));
    }
    if (c.contains("decoded_skip_special")) {
      const std::string d = tok.decode(want, true);
      if (d != c["decoded_skip_special"].get<std::string>())
        problems.push_back("decode(skip_special_tokens): " + first_difference(d, c["decoded_skip_special"]));
    }
    std::string label = text.substr(0, 40);
    report(local, problems.empty(), file.filename().string() + " case " + std::to_string(i) + " " +
                                         ojson(label).dump(-1, ' ', false, ojson::error_handler_t::replace),
           problems, verbose);
  }
  std::cout << file.string() << ": " << local.passed << " passed, " << local.failed << " failed\n";
  t.passed += local.passed;
  t.failed += local.failed;
}

// The template a chat golden was rendered with: the model's own, or the file its "template"
// field names, looked up next to the golden, in the model directory and in ../templates.
ft::text::ChatTemplate template_for(const ojson& golden, const fs::path& golden_file, const fs::path& model_dir,
                                    const std::optional<fs::path>& override_file) {
  const std::string field = golden.value("template", "tokenizer_config.json:chat_template");
  const bool model_own = field.rfind("tokenizer_config.json", 0) == 0 || field.rfind("chat_template.jinja", 0) == 0;
  const fs::path config = model_dir / "tokenizer_config.json";
  if (model_own) return ft::text::ChatTemplate::from_model_dir(model_dir);
  if (override_file) return ft::text::ChatTemplate::from_file(*override_file, config);
  const std::string name = field.substr(0, field.find(' '));
  const fs::path dir = golden_file.parent_path();
  for (const fs::path& candidate : {dir / name, model_dir / name, dir / ".." / "templates" / name,
                                    dir / "templates" / name, fs::path("tests/fixtures/templates") / name}) {
    if (fs::exists(candidate)) return ft::text::ChatTemplate::from_file(candidate, config);
  }
  throw ft::Error(golden_file.string() + ": its cases were rendered with '" + field +
                  "'; pass that template with --template FILE");
}

void check_chat(const ft::text::Tokenizer& tok, const fs::path& model_dir, const fs::path& file,
                const std::optional<fs::path>& override_file, Tally& t, bool verbose) {
  const ojson g = read_json(file);
  const auto& cases = g.at("cases");
  std::optional<ft::text::ChatTemplate> tpl;
  try {
    tpl.emplace(template_for(g, file, model_dir, override_file));
  } catch (const ft::Error& e) {
    std::cout << "FAIL " << file.string() << ": " << e.what() << "\n";
    std::cout << file.string() << ": 0 passed, " << cases.size() << " failed\n";
    t.failed += static_cast<int>(cases.size());
    return;
  }
  std::cout << file.string() << ": template " << tpl->name() << "\n";
  Tally local;
  for (size_t i = 0; i < cases.size(); ++i) {
    const ojson& c = cases[i];
    std::vector<std::string> problems;
    ft::text::ChatRequest req;
    req.messages_json = c.at("messages").dump();
    if (c.contains("tools") && !c["tools"].is_null()) req.tools_json = c["tools"].dump();
    req.add_generation_prompt = c.value("add_generation_prompt", true);
    if (c.contains("template_kwargs")) req.kwargs_json = c["template_kwargs"].dump();
    try {
      const std::string rendered = tpl->render(req);
      const std::string want = c.at("rendered").get<std::string>();
      if (rendered != want) problems.push_back("rendered: " + first_difference(rendered, want));
      if (c.contains("ids")) {
        const auto want_ids = c["ids"].get<std::vector<int32_t>>();
        const auto got_ids = tok.encode(rendered);
        if (got_ids != want_ids) problems.push_back("ids: " + ids_difference(got_ids, want_ids));
      }
    } catch (const ft::Error& e) {
      problems.push_back(std::string("render error: ") + e.what());
    }
    report(local, problems.empty(), file.filename().string() + " case " + std::to_string(i), problems, verbose);
  }
  std::cout << file.string() << ": " << local.passed << " passed, " << local.failed << " failed\n";
  t.passed += local.passed;
  t.failed += local.failed;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<fs::path> model_dir;
  std::vector<fs::path> tok_goldens;
  std::vector<std::pair<fs::path, std::optional<fs::path>>> chat_goldens;
  std::optional<fs::path> current_template;
  bool verbose = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << a << " needs a value\n" << kUsage;
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model-dir") model_dir = value();
    else if (a == "--tokenizer-golden") tok_goldens.emplace_back(value());
    else if (a == "--chat-golden") chat_goldens.emplace_back(value(), current_template);
    else if (a == "--template") current_template = value();
    else if (a == "--verbose" || a == "-v") verbose = true;
    else if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    } else {
      std::cerr << "unknown argument: " << a << "\n" << kUsage;
      return 2;
    }
  }
  if (!model_dir) {
    std::cerr << kUsage;
    return 2;
  }
  // A --template given after the goldens applies to those that had none.
  for (auto& [g, tpl] : chat_goldens)
    if (!tpl) tpl = current_template;

  Tally total;
  try {
    const auto tok = ft::text::Tokenizer::from_file(*model_dir / "tokenizer.json");
    for (const auto& f : tok_goldens) check_tokenizer(tok, f, total, verbose);
    for (const auto& [f, tpl] : chat_goldens) check_chat(tok, *model_dir, f, tpl, total, verbose);
  } catch (const ft::Error& e) {
    std::cout << "error: " << e.what() << "\n";
    ++total.failed;
  } catch (const std::exception& e) {
    std::cout << "error: " << e.what() << "\n";
    ++total.failed;
  }
  std::cout << total.passed << " passed, " << total.failed << " failed\n";
  return total.failed == 0 ? 0 : 1;
}
