#include "gateway/anthropic_schema.h"

#include <regex>

#include <nlohmann/json.hpp>

#include "gateway/constraint_fields.h"
#include "gateway/request_fields.h"

namespace ft::gateway {

using namespace request_fields;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string at(const std::string& p, size_t i) { return p + "[" + std::to_string(i) + "]"; }

const json& required(const json& j, const char* key, const std::string& p) {
  const json* v = field(j, key);
  if (!v) bad(p + "." + key, "'" + p + "." + key + "' is required");
  return *v;
}

// A block's "type" (every content block has one).
std::string block_type(const json& b, const std::string& p) {
  if (!b.is_object()) bad(p, "'" + p + "' must be a content block object, got " + type_name(b));
  return string(required(b, "type", p), p + ".type");
}

[[noreturn]] void not_text_only(const std::string& p, const std::string& type) {
  unsupported(p + ".type", "content blocks of type '" + type + "' are not supported: this server takes text only");
}

bool is_media(const std::string& type) {
  return type == "image" || type == "document" || type == "search_result" || type == "container_upload";
}

// A string, or an array of text blocks (system prompts, tool results): their text joined.
std::string text_of(const json& v, const std::string& p) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) bad(p, "'" + p + "' must be a string or an array of text blocks, got " + type_name(v));
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string pi = at(p, i);
    const std::string type = block_type(v[i], pi);
    if (type != "text") {
      if (is_media(type)) not_text_only(pi, type);
      bad(pi + ".type", "'" + pi + ".type' must be \"text\" here, got '" + type + "'");
    }
    if (!out.empty()) out += "\n";
    out += string(required(v[i], "text", pi), pi + ".text");
  }
  return out;
}

// One Anthropic user message: tool_result blocks become OpenAI "tool" messages (in order), the
// text around them user messages.
void map_user(const json& content, const std::string& p, json& out) {
  if (content.is_string()) {
    out.push_back({{"role", "user"}, {"content", content}});
    return;
  }
  std::string text;
  auto flush = [&] {
    if (!text.empty()) out.push_back({{"role", "user"}, {"content", text}});
    text.clear();
  };
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string pi = at(p, i);
    const std::string type = block_type(content[i], pi);
    if (type == "text") {
      if (!text.empty()) text += "\n";
      text += string(required(content[i], "text", pi), pi + ".text");
    } else if (type == "tool_result") {
      flush();
      std::string id = string(required(content[i], "tool_use_id", pi), pi + ".tool_use_id");
      std::string result;
      if (const json* c = field(content[i], "content")) result = text_of(*c, pi + ".content");
      if (const json* e = field(content[i], "is_error"); e && boolean(*e, pi + ".is_error")) result = "Error: " + result;
      out.push_back({{"role", "tool"}, {"tool_call_id", std::move(id)}, {"content", std::move(result)}});
    } else if (is_media(type)) {
      not_text_only(pi, type);
    } else if (type == "tool_use" || type == "thinking" || type == "redacted_thinking") {
      bad(pi + ".type", "'" + pi + ".type' '" + type + "' is only allowed in assistant messages");
    } else {
      bad(pi + ".type", "unknown content block type '" + type + "'");
    }
  }
  flush();
}

// One Anthropic assistant message: text → content, thinking → reasoning_content, tool_use →
// tool_calls (arguments as the object the template iterates).
void map_assistant(const json& content, const std::string& p, json& out) {
  if (content.is_string()) {
    out.push_back({{"role", "assistant"}, {"content", content}});
    return;
  }
  std::string text, reasoning;
  json calls = json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string pi = at(p, i);
    const std::string type = block_type(content[i], pi);
    if (type == "text") {
      text += string(required(content[i], "text", pi), pi + ".text");
    } else if (type == "thinking") {
      reasoning += string(required(content[i], "thinking", pi), pi + ".thinking");
    } else if (type == "redacted_thinking") {
      continue;  // opaque to this server
    } else if (type == "tool_use") {
      std::string id = string(required(content[i], "id", pi), pi + ".id");
      std::string name = string(required(content[i], "name", pi), pi + ".name");
      const json& input = required(content[i], "input", pi);
      if (!input.is_object()) bad(pi + ".input", "'" + pi + ".input' must be an object, got " + type_name(input));
      calls.push_back({{"id", std::move(id)}, {"type", "function"}, {"function", {{"name", std::move(name)}, {"arguments", input}}}});
    } else if (type == "tool_result") {
      bad(pi + ".type", "'" + pi + ".type' 'tool_result' is only allowed in user messages");
    } else if (is_media(type)) {
      not_text_only(pi, type);
    } else {
      bad(pi + ".type", "unknown content block type '" + type + "'");
    }
  }
  json m = {{"role", "assistant"}, {"content", text}};
  if (!reasoning.empty()) m["reasoning_content"] = reasoning;
  if (!calls.empty()) m["tool_calls"] = std::move(calls);
  out.push_back(std::move(m));
}

json map_messages(const json& msgs) {
  if (!msgs.is_array()) bad("messages", "'messages' must be an array, got " + type_name(msgs));
  if (msgs.empty()) bad("messages", "'messages' must contain at least one message");
  json out = json::array();
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string p = at("messages", i);
    const json& m = msgs[i];
    if (!m.is_object()) bad(p, "'" + p + "' must be an object, got " + type_name(m));
    const std::string role = string(required(m, "role", p), p + ".role");
    const json& content = required(m, "content", p);
    if (!content.is_string() && !content.is_array())
      bad(p + ".content", "'" + p + ".content' must be a string or an array of content blocks, got " + type_name(content));
    if (role == "user") map_user(content, p + ".content", out);
    else if (role == "assistant") map_assistant(content, p + ".content", out);
    else bad(p + ".role", "'" + p + ".role' must be \"user\" or \"assistant\", got '" + role + "' (the system prompt is 'system')");
  }
  return out;
}

const std::regex& tool_name_re() {
  static const std::regex re("^[A-Za-z0-9_.:-]{1,128}$");
  return re;
}

// Anthropic tools → OpenAI function tools (what the template and the output parser read).
json map_tools(const json& tools, ChatSpec& s) {
  if (!tools.is_array()) bad("tools", "'tools' must be an array, got " + type_name(tools));
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string p = at("tools", i);
    const json& t = tools[i];
    if (!t.is_object()) bad(p, "'" + p + "' must be an object, got " + type_name(t));
    if (const json* type = field(t, "type"); type && string(*type, p + ".type") != "custom")
      unsupported(p + ".type", "server tools ('" + type->get<std::string>() + "') are not supported; give client tools "
                               "with name, description and input_schema");
    const std::string name = string(required(t, "name", p), p + ".name");
    if (!std::regex_match(name, tool_name_re()))
      bad(p + ".name", "'" + p + ".name' must match [A-Za-z0-9_.:-]{1,128}, got '" + name + "'");
    if (!s.tool_names.insert(name).second) bad(p + ".name", "duplicate tool name '" + name + "'");
    const json& schema = required(t, "input_schema", p);
    if (!schema.is_object()) bad(p + ".input_schema", "'" + p + ".input_schema' must be a JSON Schema object");
    json fn = {{"name", name}};
    if (const json* d = field(t, "description")) fn["description"] = string(*d, p + ".description");
    fn["parameters"] = schema;
    if (const json* st = field(t, "strict")) fn["strict"] = boolean(*st, p + ".strict");
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

void map_tool_choice(const json& v, ChatSpec& s) {
  if (!v.is_object()) bad("tool_choice", "'tool_choice' must be an object, got " + type_name(v));
  const std::string type = string(required(v, "type", "tool_choice"), "tool_choice.type");
  if (type == "auto") s.tool_choice = ToolChoice::Auto;
  else if (type == "any") s.tool_choice = ToolChoice::Required;
  else if (type == "none") s.tool_choice = ToolChoice::None;
  else if (type == "tool") {
    s.tool_choice = ToolChoice::Named;
    s.tool_name = string(required(v, "name", "tool_choice"), "tool_choice.name");
    if (!s.tool_names.count(s.tool_name))
      bad("tool_choice.name", "'tool_choice.name' names tool '" + s.tool_name + "', which is not in 'tools'");
  } else {
    bad("tool_choice.type", "'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\", got '" + type + "'");
  }
  if (const json* d = field(v, "disable_parallel_tool_use"))
    s.parallel_tool_calls = !boolean(*d, "tool_choice.disable_parallel_tool_use");
}

bool parse_thinking(const json& v, uint32_t max_tokens) {
  if (!v.is_object()) bad("thinking", "'thinking' must be an object, got " + type_name(v));
  const std::string type = string(required(v, "type", "thinking"), "thinking.type");
  if (type == "disabled") return false;
  if (type != "enabled" && type != "adaptive")
    bad("thinking.type", "'thinking.type' must be \"enabled\", \"adaptive\" or \"disabled\", got '" + type + "'");
  // The budget is accepted and checked as Anthropic does, but not enforced: GLM decides when
  // its reasoning ends (max_tokens bounds the whole reply).
  if (const json* b = field(v, "budget_tokens")) {
    const int64_t budget = integer(*b, "thinking.budget_tokens", 1, INT32_MAX);
    if (max_tokens && budget >= static_cast<int64_t>(max_tokens))
      bad("thinking.budget_tokens", "'thinking.budget_tokens' must be less than 'max_tokens'");
  } else if (type == "enabled") {
    bad("thinking.budget_tokens", "'thinking.budget_tokens' is required when thinking is enabled");
  }
  return true;
}

}  // namespace

AnthropicSpec parse_anthropic_request(std::string_view body, const SchemaLimits& lim, bool for_count) {
  json j = parse_object(body);
  AnthropicSpec a;
  ChatSpec& s = a.chat;
  check_model(j, lim);
  if (const json* v = field(j, "max_tokens")) s.max_tokens = static_cast<uint32_t>(integer(*v, "max_tokens", 1, INT32_MAX));
  else if (!for_count) bad("max_tokens", "'max_tokens' is required");
  json messages = json::array();
  if (const json* v = field(j, "system")) {
    std::string sys = text_of(*v, "system");
    if (!sys.empty()) messages.push_back({{"role", "system"}, {"content", std::move(sys)}});
  }
  const json* msgs = field(j, "messages");
  if (!msgs) bad("messages", "'messages' is required");
  for (auto& m : map_messages(*msgs)) messages.push_back(std::move(m));

  if (const json* v = field(j, "temperature")) s.sampling.temperature = float(number(*v, "temperature", 0, 1));
  if (const json* v = field(j, "top_p")) s.sampling.top_p = float(number(*v, "top_p", 0, 1, true));
  if (const json* v = field(j, "top_k")) s.sampling.top_k = int(integer(*v, "top_k", 0, 1 << 20));
  if (const json* v = field(j, "stop_sequences")) {
    if (!v->is_array()) bad("stop_sequences", "'stop_sequences' must be an array of strings, got " + type_name(*v));
    if (v->size() > 16) bad("stop_sequences", "'stop_sequences' takes at most 16 strings");
    for (size_t i = 0; i < v->size(); ++i) {
      std::string stop = string((*v)[i], at("stop_sequences", i));
      if (stop.empty()) bad(at("stop_sequences", i), "stop sequences must not be empty");
      s.stop.push_back(std::move(stop));
    }
  }
  if (const json* v = field(j, "stream")) s.stream = boolean(*v, "stream");
  if (const json* v = field(j, "metadata")) {
    if (!v->is_object()) bad("metadata", "'metadata' must be an object, got " + type_name(*v));
    if (const json* u = field(*v, "user_id")) s.user = string(*u, "metadata.user_id");
  }
  if (const json* v = field(j, "thinking")) a.thinking = parse_thinking(*v, s.max_tokens.value_or(0));
  s.enable_thinking = a.thinking;

  json tools;
  if (const json* v = field(j, "tools")) {
    tools = map_tools(*v, s);
    if (tools.empty()) tools = json();
  }
  if (const json* v = field(j, "tool_choice")) {
    map_tool_choice(*v, s);
    if (s.tool_choice != ToolChoice::None && s.tool_choice != ToolChoice::Auto && tools.is_null())
      bad("tool_choice", "'tool_choice' requires a tool call but no 'tools' were given");
  }
  s.has_tools = !tools.is_null() && s.tool_choice != ToolChoice::None;

  json tr = {{"messages", std::move(messages)}, {"add_generation_prompt", true}};
  if (s.has_tools) {
    tr["tools"] = tools;
    s.tools_json = dump(tools);
    // The endpoint still refuses an output without the call, should a worker not apply it.
    constrain_tool_choice(s);
  }
  check_constraint(s.constraint, s.max_tokens.value_or(0), "max_tokens");
  s.template_request = dump(tr);
  return a;
}

bool is_anthropic_path(std::string_view path) { return path == "/v1/messages" || path.starts_with("/v1/messages/"); }

const char* anthropic_error_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status < 500 ? "invalid_request_error" : "api_error";
  }
}

std::string anthropic_error_json(const ApiError& e) {
  // Anthropic's shape has no "param": the message names the field, as Anthropic's own errors do
  // ("messages.0.content.0.type: ...").
  std::string message = e.message;
  if (!e.param.empty() && message.find(e.param) == std::string::npos) message = e.param + ": " + message;
  return dump(json{{"type", "error"}, {"error", {{"type", anthropic_error_type(e.status)}, {"message", message}}}});
}

}  // namespace ft::gateway
