#include "shared/text/chat_template.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "shared/core/error.h"
#include "shared/text/jinja_template.h"

namespace ft::text {

using jinja::Value;
using ojson = nlohmann::ordered_json;

namespace {

std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw Error(p.string() + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Value parse_json_value(const std::string& text, const char* what) {
  try {
    return jinja::from_json_text(text);
  } catch (const jinja::TemplateRuntimeError& e) {
    throw Error(std::string("chat template ") + what + ": " + e.message);
  }
}

}  // namespace

ChatTemplate::ChatTemplate(std::string_view source, std::string name)
    : tpl_(std::make_unique<jinja::Template>(source, std::move(name))), special_tokens_(Value::dict()) {}

ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

const std::string& ChatTemplate::name() const { return tpl_->name(); }

ChatTemplate ChatTemplate::from_file(const std::filesystem::path& file, const std::filesystem::path& tokenizer_config) {
  ChatTemplate t(read_text(file), file.string());
  if (!tokenizer_config.empty() && std::filesystem::exists(tokenizer_config)) t.load_special_tokens(tokenizer_config);
  return t;
}

ChatTemplate ChatTemplate::from_model_dir(const std::filesystem::path& dir) {
  const auto jinja_file = dir / "chat_template.jinja";
  const auto config = dir / "tokenizer_config.json";
  if (std::filesystem::exists(jinja_file)) return from_file(jinja_file, config);
  if (!std::filesystem::exists(config))
    throw Error(dir.string() + ": no chat template (neither chat_template.jinja nor tokenizer_config.json)");
  ojson j;
  try {
    j = ojson::parse(read_text(config));
  } catch (const ojson::exception& e) {
    throw Error(config.string() + ": invalid JSON: " + e.what());
  }
  std::string source;
  const auto it = j.find("chat_template");
  if (it == j.end() || it->is_null()) throw Error(config.string() + ": has no chat_template");
  if (it->is_string()) {
    source = it->get<std::string>();
  } else if (it->is_array()) {
    // A list of named templates: transformers picks "default".
    for (const auto& t : *it)
      if (t.value("name", "") == "default") source = t.value("template", "");
    if (source.empty()) throw Error(config.string() + ": chat_template list has no 'default' entry");
  } else {
    throw Error(config.string() + ": chat_template must be a string");
  }
  ChatTemplate t(source, config.string() + ":chat_template");
  t.load_special_tokens(config);
  return t;
}

void ChatTemplate::load_special_tokens(const std::filesystem::path& tokenizer_config) {
  ojson j;
  try {
    j = ojson::parse(read_text(tokenizer_config));
  } catch (const ojson::exception& e) {
    throw Error(tokenizer_config.string() + ": invalid JSON: " + e.what());
  }
  auto d = std::make_shared<jinja::Dict>();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    // Either the token text or an AddedToken object {"content": ...}.
    if (it->is_string())
      d->set(Value(key), Value(it->get<std::string>()));
    else if (it->is_object() && it->contains("content"))
      d->set(Value(key), Value((*it)["content"].get<std::string>()));
  }
  special_tokens_ = Value::dict(d);
}

std::string ChatTemplate::render(const Value& messages, const Value& tools, bool add_generation_prompt,
                                 const Value& kwargs) const {
  auto vars = std::make_shared<jinja::Dict>();
  // Same precedence as transformers: special tokens, overridden by request kwargs.
  if (special_tokens_.kind() == jinja::Kind::Dict)
    for (const auto& [k, v] : special_tokens_.map().entries) vars->set(k, v);
  if (kwargs.kind() == jinja::Kind::Dict)
    for (const auto& [k, v] : kwargs.map().entries) vars->set(k, v);
  vars->set(Value("messages"), messages);
  vars->set(Value("tools"), tools.is_undefined() ? Value::none() : tools);
  vars->set(Value("documents"), Value::none());
  vars->set(Value("add_generation_prompt"), Value(add_generation_prompt));
  return tpl_->render(Value::dict(vars));
}

std::string ChatTemplate::render(const ChatRequest& req) const {
  const Value messages = parse_json_value(req.messages_json, "messages");
  const Value tools = req.tools_json.empty() ? Value::none() : parse_json_value(req.tools_json, "tools");
  const Value kwargs = req.kwargs_json.empty() ? Value::dict() : parse_json_value(req.kwargs_json, "kwargs");
  return render(messages, tools, req.add_generation_prompt, kwargs);
}

std::string ChatTemplate::render_openai_request(std::string_view request_json) const {
  ojson req;
  try {
    req = ojson::parse(request_json);
  } catch (const ojson::exception& e) {
    throw Error(std::string("request: invalid JSON: ") + e.what());
  }
  if (!req.is_object() || !req.contains("messages") || !req["messages"].is_array())
    throw Error("request: 'messages' must be an array");
  ojson messages = req["messages"];
  for (auto& m : messages) {
    if (!m.is_object()) throw Error("request: every message must be an object");
    if (m.contains("reasoning") && !m.contains("reasoning_content")) m["reasoning_content"] = m["reasoning"];
    if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
      for (auto& tc : m["tool_calls"]) {
        if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object()) continue;
        auto& fn = tc["function"];
        if (fn.contains("arguments") && fn["arguments"].is_string()) {
          // Templates iterate the arguments as a mapping; OpenAI clients send a JSON string.
          try {
            fn["arguments"] = ojson::parse(fn["arguments"].get<std::string>());
          } catch (const ojson::exception&) {
            throw Error("request: tool call arguments are not valid JSON: " + fn["arguments"].get<std::string>());
          }
        }
      }
    }
  }
  ChatRequest r;
  r.messages_json = messages.dump();
  if (req.contains("tools") && req["tools"].is_array() && !req["tools"].empty()) r.tools_json = req["tools"].dump();
  r.add_generation_prompt = req.value("add_generation_prompt", true);
  ojson kw = ojson::object();
  for (const char* k : {"reasoning_effort", "enable_thinking", "clear_thinking"})
    if (req.contains(k) && !req[k].is_null()) kw[k] = req[k];
  if (req.contains("chat_template_kwargs") && req["chat_template_kwargs"].is_object())
    for (auto it = req["chat_template_kwargs"].begin(); it != req["chat_template_kwargs"].end(); ++it) kw[it.key()] = it.value();
  r.kwargs_json = kw.dump();
  return render(r);
}

}  // namespace ft::text
