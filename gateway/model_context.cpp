#include "gateway/model_context.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "shared/core/error.h"

#include "shared/text/chat_template.h"

namespace ft::gateway {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The text layer's chat-template renderer (transformers-compatible Jinja).
class ChatPromptRenderer {
 public:
  explicit ChatPromptRenderer(const std::string& dir) : tpl_(text::ChatTemplate::from_model_dir(dir)) {}
  std::string render(const std::string& request_json) const { return tpl_.render_openai_request(request_json); }

 private:
  text::ChatTemplate tpl_;
};

namespace {

std::optional<json> read_json(const fs::path& p) {
  if (!fs::exists(p)) return std::nullopt;
  std::ifstream f(p, std::ios::binary);
  if (!f) throw Error(p.string() + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    throw Error(p.string() + ": invalid JSON: " + e.what());
  }
}

bool read_eos(const json& j, std::vector<int32_t>& out) {
  auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return false;
  if (it->is_number_integer()) {
    out.push_back(it->get<int32_t>());
    return true;
  }
  if (it->is_array()) {
    for (const auto& v : *it)
      if (v.is_number_integer()) out.push_back(v.get<int32_t>());
    return !out.empty();
  }
  return false;
}

}  // namespace

ModelContext::~ModelContext() = default;

std::shared_ptr<ModelContext> ModelContext::load(const std::string& model_dir, const std::string& served_name) {
  std::shared_ptr<ModelContext> m(new ModelContext());
  fs::path dir(model_dir);
  if (!fs::is_directory(dir)) throw Error(model_dir + ": not a directory");
  m->model_dir_ = model_dir;
  m->tokenizer_ = std::make_unique<text::Tokenizer>(text::Tokenizer::from_file(dir / "tokenizer.json"));
  try {
    m->chat_ = std::make_unique<ChatPromptRenderer>(model_dir);
  } catch (const std::exception& e) {
    m->template_error_ = e.what();
  }
  if (auto gc = read_json(dir / "generation_config.json")) read_eos(*gc, m->eos_ids_);
  const std::optional<json> cfg = read_json(dir / "config.json");
  if (m->eos_ids_.empty() && cfg)
    if (!read_eos(*cfg, m->eos_ids_) && cfg->contains("text_config")) read_eos((*cfg)["text_config"], m->eos_ids_);
  // Real checkpoints pad the embedding past the tokenizer (GLM-5.3: 154,880 rows, 154,856
  // tokens): the model's size is the one ids are checked against.
  m->vocab_size_ = m->tokenizer_->vocab_size();
  if (cfg) {
    const json& text = cfg->contains("text_config") && (*cfg)["text_config"].is_object() ? (*cfg)["text_config"] : *cfg;
    if (auto it = text.find("vocab_size"); it != text.end() && it->is_number_unsigned() && it->get<size_t>() > 0) {
      m->vocab_size_ = it->get<size_t>();
      if (m->vocab_size_ < m->tokenizer_->vocab_size())
        throw Error((dir / "config.json").string() + ": vocab_size " + std::to_string(m->vocab_size_) +
                    " is smaller than the tokenizer's " + std::to_string(m->tokenizer_->vocab_size()) + " ids");
    }
  }
  if (auto id = m->tokenizer_->token_to_id("<think>")) m->think_id_ = *id;
  if (auto id = m->tokenizer_->token_to_id("</think>")) m->end_think_id_ = *id;
  m->served_name_ = served_name;
  if (m->served_name_.empty()) {
    fs::path p = dir;
    if (p.filename().empty()) p = p.parent_path();
    m->served_name_ = p.filename().string();
  }
  return m;
}

bool ModelContext::has_chat_template() const { return chat_ != nullptr; }

std::string ModelContext::render_chat(const std::string& request_json) const {
  if (!chat_) throw Error("no chat template: " + template_error_);
  return chat_->render(request_json);
}

}  // namespace ft::gateway
