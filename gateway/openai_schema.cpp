#include "gateway/openai_schema.h"

#include <cmath>
#include <regex>

#include <nlohmann/json.hpp>

#include "gateway/request_fields.h"

namespace ft::gateway {

using json = nlohmann::ordered_json;

std::string error_json(const ApiError& e) {
  json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return json{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

using namespace request_fields;

// Fields shared by the OpenAI endpoints (and, by name, SGLang's sampling_params).
void parse_sampling(const json& j, SamplingFields& s, const std::string& prefix) {
  if (const json* v = field(j, "temperature")) s.temperature = float(number(*v, prefix + "temperature", 0, 2));
  if (const json* v = field(j, "top_p")) s.top_p = float(number(*v, prefix + "top_p", 0, 1, true));
  if (const json* v = field(j, "top_k")) s.top_k = int(integer(*v, prefix + "top_k", -1, 1 << 20));
  if (const json* v = field(j, "min_p")) s.min_p = float(number(*v, prefix + "min_p", 0, 1));
  if (const json* v = field(j, "presence_penalty")) s.presence_penalty = float(number(*v, prefix + "presence_penalty", -2, 2));
  if (const json* v = field(j, "frequency_penalty"))
    s.frequency_penalty = float(number(*v, prefix + "frequency_penalty", -2, 2));
  if (const json* v = field(j, "repetition_penalty"))
    s.repetition_penalty = float(number(*v, prefix + "repetition_penalty", 0, 10, true));
  const char* seed_key = field(j, "seed") ? "seed" : (field(j, "sampling_seed") ? "sampling_seed" : nullptr);
  if (seed_key) s.seed = static_cast<uint64_t>(integer(j[seed_key], prefix + seed_key, INT64_MIN, INT64_MAX));
}

void parse_stop(const json& j, CommonFields& c, const std::string& prefix, const SchemaLimits& lim) {
  if (const json* v = field(j, "stop")) {
    const std::string p = prefix + "stop";
    if (v->is_string()) {
      if (v->get<std::string>().empty()) bad(p, "'" + p + "' must not be an empty string");
      c.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (v->size() > 16) bad(p, "'" + p + "' takes at most 16 stop strings, got " + std::to_string(v->size()));
      for (size_t i = 0; i < v->size(); ++i) {
        std::string s = string((*v)[i], p + "[" + std::to_string(i) + "]");
        if (s.empty()) bad(p + "[" + std::to_string(i) + "]", "stop strings must not be empty");
        c.stop.push_back(std::move(s));
      }
    } else {
      bad(p, "'" + p + "' must be a string or an array of strings, got " + type_name(*v));
    }
  }
  if (const json* v = field(j, "stop_token_ids")) c.stop_token_ids = token_ids(*v, prefix + "stop_token_ids", lim.vocab_size, true);
  if (const json* v = field(j, "ignore_eos")) c.ignore_eos = boolean(*v, prefix + "ignore_eos");
  if (const json* v = field(j, "skip_special_tokens")) c.skip_special_tokens = boolean(*v, prefix + "skip_special_tokens");
  if (const json* v = field(j, "include_stop_str_in_output"))
    c.include_stop_str = boolean(*v, prefix + "include_stop_str_in_output");
  for (const char* k : {"min_tokens", "min_new_tokens"})  // the second is SGLang's name
    if (const json* v = field(j, k)) c.constraint.min_tokens = static_cast<uint32_t>(integer(*v, prefix + k, 0, INT32_MAX));
}

void parse_common(const json& j, CommonFields& c, const SchemaLimits& lim) {
  check_model(j, lim);
  parse_sampling(j, c.sampling, "");
  parse_stop(j, c, "", lim);
  if (const json* v = field(j, "n")) c.n = int(integer(*v, "n", 1, lim.max_n));
  if (const json* v = field(j, "stream")) c.stream = boolean(*v, "stream");
  if (const json* v = field(j, "stream_options")) {
    if (!v->is_object()) bad("stream_options", "'stream_options' must be an object, got " + type_name(*v));
    if (!c.stream) bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
    for (auto it = v->begin(); it != v->end(); ++it) {
      if (it.key() == "include_usage") {
        if (!it.value().is_null()) c.include_usage = boolean(it.value(), "stream_options.include_usage");
      } else if (it.key() == "continuous_usage_stats") {
        if (!it.value().is_null() && boolean(it.value(), "stream_options.continuous_usage_stats"))
          unsupported("stream_options.continuous_usage_stats", "'stream_options.continuous_usage_stats' is not supported");
      } else {
        bad("stream_options." + it.key(), "unknown field 'stream_options." + it.key() + "'");
      }
    }
  }
  if (const json* v = field(j, "user")) c.user = string(*v, "user");
  if (const json* v = field(j, "logit_bias")) read_logit_bias(*v, "logit_bias", lim.vocab_size, c.constraint);
  if (const json* v = field(j, "return_tokens_as_token_ids")) c.tokens_as_ids = boolean(*v, "return_tokens_as_token_ids");
}

const std::regex& tool_name_re() {
  static const std::regex re("^[A-Za-z0-9_.:-]{1,64}$");
  return re;
}

// One message's content: a string, null, or an array of text parts.
void check_content(const json& m, const std::string& p, const std::string& role) {
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) {
    if (role == "assistant") return;
    bad(p + ".content", "'" + p + ".content' is required for role '" + role + "'");
  }
  const json& c = *it;
  if (c.is_string()) return;
  if (!c.is_array()) bad(p + ".content", "'" + p + ".content' must be a string or an array of content parts, got " + type_name(c));
  for (size_t k = 0; k < c.size(); ++k) {
    const std::string pk = p + ".content[" + std::to_string(k) + "]";
    const json& part = c[k];
    if (part.is_string()) continue;
    if (!part.is_object()) bad(pk, "'" + pk + "' must be an object, got " + type_name(part));
    auto t = part.find("type");
    if (t == part.end() || !t->is_string()) bad(pk + ".type", "'" + pk + ".type' is required and must be a string");
    std::string type = t->get<std::string>();
    if (type == "text") {
      auto tx = part.find("text");
      if (tx == part.end() || !tx->is_string()) bad(pk + ".text", "'" + pk + ".text' is required and must be a string");
    } else if (type == "image_url" || type == "input_audio" || type == "file" || type == "image" || type == "audio" ||
               type == "video" || type == "video_url") {
      unsupported(pk + ".type", "content parts of type '" + type + "' are not supported: this server takes text only");
    } else {
      bad(pk + ".type", "unknown content part type '" + type + "'");
    }
  }
}

json check_messages(const json& msgs) {
  if (!msgs.is_array()) bad("messages", "'messages' must be an array, got " + type_name(msgs));
  if (msgs.empty()) bad("messages", "'messages' must contain at least one message");
  json out = json::array();
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string p = "messages[" + std::to_string(i) + "]";
    const json& m = msgs[i];
    if (!m.is_object()) bad(p, "'" + p + "' must be an object, got " + type_name(m));
    auto r = m.find("role");
    if (r == m.end() || !r->is_string()) bad(p + ".role", "'" + p + ".role' is required and must be a string");
    std::string role = r->get<std::string>();
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool")
      bad(p + ".role", "'" + p + ".role' must be one of system, developer, user, assistant, tool; got '" + role + "'");
    check_content(m, p, role);
    if (auto nm = m.find("name"); nm != m.end() && !nm->is_null() && !nm->is_string())
      bad(p + ".name", "'" + p + ".name' must be a string");
    json copy = m;
    if (role == "developer") copy["role"] = "system";  // the GLM template knows only system
    if (role == "tool") {
      if (auto id = m.find("tool_call_id"); id != m.end() && !id->is_null() && !id->is_string())
        bad(p + ".tool_call_id", "'" + p + ".tool_call_id' must be a string");
    }
    for (const char* rk : {"reasoning_content", "reasoning"})
      if (auto rc = m.find(rk); rc != m.end() && !rc->is_null() && !rc->is_string())
        bad(p + "." + rk, "'" + p + "." + rk + "' must be a string");
    if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
      if (role != "assistant") bad(p + ".tool_calls", "only assistant messages may carry 'tool_calls'");
      if (!tc->is_array()) bad(p + ".tool_calls", "'" + p + ".tool_calls' must be an array");
      for (size_t k = 0; k < tc->size(); ++k) {
        const std::string pk = p + ".tool_calls[" + std::to_string(k) + "]";
        const json& call = (*tc)[k];
        if (!call.is_object()) bad(pk, "'" + pk + "' must be an object");
        auto fn = call.find("function");
        if (fn == call.end() || !fn->is_object()) bad(pk + ".function", "'" + pk + ".function' is required and must be an object");
        auto name = fn->find("name");
        if (name == fn->end() || !name->is_string() || name->get<std::string>().empty())
          bad(pk + ".function.name", "'" + pk + ".function.name' is required and must be a non-empty string");
        auto args = fn->find("arguments");
        if (args != fn->end() && !args->is_null()) {
          if (args->is_string()) {
            json parsed;
            try {
              parsed = json::parse(args->get<std::string>());
            } catch (const json::exception&) {
              bad(pk + ".function.arguments", "'" + pk + ".function.arguments' is not valid JSON");
            }
            if (!parsed.is_object()) bad(pk + ".function.arguments", "'" + pk + ".function.arguments' must encode a JSON object");
          } else if (!args->is_object()) {
            bad(pk + ".function.arguments", "'" + pk + ".function.arguments' must be a JSON string (or an object)");
          }
        }
      }
    }
    out.push_back(std::move(copy));
  }
  return out;
}

void check_tools(const json& tools, ChatSpec& spec) {
  if (!tools.is_array()) bad("tools", "'tools' must be an array, got " + type_name(tools));
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string p = "tools[" + std::to_string(i) + "]";
    const json& t = tools[i];
    if (!t.is_object()) bad(p, "'" + p + "' must be an object");
    auto type = t.find("type");
    if (type == t.end() || !type->is_string() || type->get<std::string>() != "function")
      bad(p + ".type", "'" + p + ".type' must be \"function\"");
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) bad(p + ".function", "'" + p + ".function' is required and must be an object");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string()) bad(p + ".function.name", "'" + p + ".function.name' is required");
    std::string n = name->get<std::string>();
    if (!std::regex_match(n, tool_name_re()))
      bad(p + ".function.name", "'" + p + ".function.name' must match [A-Za-z0-9_.:-]{1,64}, got '" + n + "'");
    if (!spec.tool_names.insert(n).second) bad(p + ".function.name", "duplicate tool name '" + n + "'");
    if (auto d = fn->find("description"); d != fn->end() && !d->is_null() && !d->is_string())
      bad(p + ".function.description", "'" + p + ".function.description' must be a string");
    auto params = fn->find("parameters");
    if (params != fn->end() && !params->is_null() && !params->is_object())
      bad(p + ".function.parameters", "'" + p + ".function.parameters' must be a JSON Schema object");
  }
}

}  // namespace

CompletionSpec parse_completion_request(std::string_view body, const SchemaLimits& lim) {
  json j = parse_object(body);
  CompletionSpec s;
  parse_common(j, s, lim);
  const json* prompt = field(j, "prompt");
  if (!prompt) bad("prompt", "'prompt' is required");
  if (prompt->is_string()) {
    s.prompt_texts.push_back(prompt->get<std::string>());
  } else if (prompt->is_array()) {
    if (prompt->empty()) bad("prompt", "'prompt' must not be empty");
    const json& first = (*prompt)[0];
    if (first.is_number()) {
      s.prompt_ids.push_back(token_ids(*prompt, "prompt", lim.vocab_size, false));
    } else if (first.is_string()) {
      for (size_t i = 0; i < prompt->size(); ++i) s.prompt_texts.push_back(string((*prompt)[i], "prompt[" + std::to_string(i) + "]"));
    } else if (first.is_array()) {
      for (size_t i = 0; i < prompt->size(); ++i)
        s.prompt_ids.push_back(token_ids((*prompt)[i], "prompt[" + std::to_string(i) + "]", lim.vocab_size, false));
    } else {
      bad("prompt", "'prompt' must be a string, an array of strings, an array of token ids or an array of such arrays");
    }
  } else {
    bad("prompt", "'prompt' must be a string or an array, got " + type_name(*prompt));
  }
  for (const auto& t : s.prompt_texts)
    if (t.empty()) bad("prompt", "'prompt' must not be an empty string");
  size_t prompts = s.prompt_texts.size() + s.prompt_ids.size();
  if (prompts * static_cast<size_t>(s.n) > static_cast<size_t>(lim.max_n) * 4)
    bad("prompt", "too many prompts x n in one request (" + std::to_string(prompts) + " x " + std::to_string(s.n) + ")");
  if (const json* v = field(j, "max_tokens")) s.max_tokens = static_cast<uint32_t>(integer(*v, "max_tokens", 1, INT32_MAX));
  else s.max_tokens = 16;  // OpenAI's default for completions
  if (const json* v = field(j, "logprobs")) {
    if (v->is_boolean()) bad("logprobs", "'logprobs' must be an integer in [0, 20] for completions, got a boolean");
    s.logprobs = true;
    s.top_logprobs = int(integer(*v, "logprobs", 0, 20));
  }
  if (const json* v = field(j, "echo")) s.echo = boolean(*v, "echo");
  if (const json* v = field(j, "response_format")) read_response_format(*v, s.constraint);
  check_constraint(s.constraint, *s.max_tokens, "max_tokens");
  if (s.echo && s.logprobs) unsupported("echo", "'echo' together with 'logprobs' (prompt logprobs) is not supported");
  if (const json* v = field(j, "suffix")) {
    string(*v, "suffix");
    unsupported("suffix", "'suffix' is not supported");
  }
  if (const json* v = field(j, "best_of"))
    if (integer(*v, "best_of", 1, lim.max_n) != s.n) unsupported("best_of", "'best_of' other than n is not supported");
  return s;
}

ChatSpec parse_chat_request(std::string_view body, const SchemaLimits& lim) {
  json j = parse_object(body);
  ChatSpec s;
  parse_common(j, s, lim);
  const json* msgs = field(j, "messages");
  if (!msgs) bad("messages", "'messages' is required");
  json messages = check_messages(*msgs);

  if (const json* v = field(j, "max_tokens")) s.max_tokens = static_cast<uint32_t>(integer(*v, "max_tokens", 1, INT32_MAX));
  if (const json* v = field(j, "max_completion_tokens"))
    s.max_tokens = static_cast<uint32_t>(integer(*v, "max_completion_tokens", 1, INT32_MAX));
  if (const json* v = field(j, "logprobs")) s.logprobs = boolean(*v, "logprobs");
  if (const json* v = field(j, "top_logprobs")) {
    s.top_logprobs = int(integer(*v, "top_logprobs", 0, 20));
    if (!s.logprobs && s.top_logprobs > 0) bad("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
  }
  if (field(j, "functions") || field(j, "function_call"))
    unsupported(field(j, "functions") ? "functions" : "function_call",
                "'functions'/'function_call' are deprecated and not supported; use 'tools' and 'tool_choice'");
  if (const json* v = field(j, "response_format")) read_response_format(*v, s.constraint);
  if (const json* v = field(j, "modalities")) {
    if (!v->is_array()) bad("modalities", "'modalities' must be an array");
    for (const auto& x : *v)
      if (x != json("text")) unsupported("modalities", "only the 'text' modality is supported");
  }
  if (const json* v = field(j, "continue_final_message"))
    if (boolean(*v, "continue_final_message")) unsupported("continue_final_message", "'continue_final_message' is not supported");
  if (const json* v = field(j, "parallel_tool_calls")) s.parallel_tool_calls = boolean(*v, "parallel_tool_calls");

  json tools;
  if (const json* v = field(j, "tools")) {
    check_tools(*v, s);
    if (!v->empty()) tools = *v;
  }
  if (const json* v = field(j, "tool_choice")) {
    if (v->is_string()) {
      std::string c = v->get<std::string>();
      if (c == "none") s.tool_choice = ToolChoice::None;
      else if (c == "auto") s.tool_choice = ToolChoice::Auto;
      else if (c == "required") s.tool_choice = ToolChoice::Required;
      else bad("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or a named function, got '" + c + "'");
    } else if (v->is_object()) {
      auto fn = v->find("function");
      if (v->value("type", json()) != json("function") || fn == v->end() || !fn->is_object() || !fn->contains("name") ||
          !(*fn)["name"].is_string())
        bad("tool_choice", "a named 'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
      s.tool_choice = ToolChoice::Named;
      s.tool_name = (*fn)["name"].get<std::string>();
      if (!s.tool_names.count(s.tool_name))
        bad("tool_choice", "'tool_choice' names function '" + s.tool_name + "', which is not in 'tools'");
    } else {
      bad("tool_choice", "'tool_choice' must be a string or an object, got " + type_name(*v));
    }
    if (s.tool_choice != ToolChoice::None && tools.is_null())
      bad("tool_choice", "'tool_choice' is set but no 'tools' were given");
  }
  s.has_tools = !tools.is_null() && s.tool_choice != ToolChoice::None;

  json kwargs = json::object();
  if (const json* v = field(j, "chat_template_kwargs")) {
    if (!v->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object, got " + type_name(*v));
    kwargs = *v;
    if (auto et = v->find("enable_thinking"); et != v->end() && !et->is_null())
      s.enable_thinking = boolean(*et, "chat_template_kwargs.enable_thinking");
    else if (auto th = v->find("thinking"); th != v->end() && th->is_boolean())
      s.enable_thinking = th->get<bool>();
  }
  std::optional<std::string> effort;
  if (const json* v = field(j, "reasoning_effort")) {
    effort = string(*v, "reasoning_effort");
    static const std::set<std::string> ok = {"none", "minimal", "low", "medium", "high", "xhigh", "max"};
    if (!ok.count(*effort))
      bad("reasoning_effort", "'reasoning_effort' must be one of none, minimal, low, medium, high, xhigh, max; got '" + *effort + "'");
    if (*effort == "none") s.enable_thinking = false;
  }
  bool add_generation_prompt = true;
  if (const json* v = field(j, "add_generation_prompt")) add_generation_prompt = boolean(*v, "add_generation_prompt");

  json tr = {{"messages", std::move(messages)}, {"add_generation_prompt", add_generation_prompt}};
  if (s.has_tools) {  // tool_choice "none" drops the tools from the prompt
    tr["tools"] = tools;
    s.tools_json = tools.dump(-1, ' ', false, json::error_handler_t::replace);
    constrain_tool_choice(s);
  }
  check_constraint(s.constraint, s.max_tokens.value_or(0), field(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens");
  if (effort) tr["reasoning_effort"] = *effort;
  if (!kwargs.empty()) tr["chat_template_kwargs"] = kwargs;
  s.template_request = tr.dump(-1, ' ', false, json::error_handler_t::replace);
  return s;
}

void constrain_tool_choice(ChatSpec& s) {
  if (s.requires_tool_call())
    set_tool_choice(s.constraint, s.tools_json, s.tool_choice == ToolChoice::Named ? s.tool_name : "", !s.parallel_tool_calls);
}

SglangSpec parse_sglang_generate(std::string_view body, const SchemaLimits& lim) {
  json j = parse_object(body);
  SglangSpec s;
  const json* text = field(j, "text");
  const json* ids = field(j, "input_ids");
  if (text && ids) bad("text", "give either 'text' or 'input_ids', not both");
  if (!text && !ids) bad("text", "'text' or 'input_ids' is required");
  if (text) {
    if (text->is_array()) unsupported("text", "batched 'text' is not supported; send one request per prompt");
    s.text = string(*text, "text");
    if (s.text->empty()) bad("text", "'text' must not be empty");
  }
  if (ids) {
    if (ids->is_array() && !ids->empty() && (*ids)[0].is_array())
      unsupported("input_ids", "batched 'input_ids' is not supported; send one request per prompt");
    s.input_ids = token_ids(*ids, "input_ids", lim.vocab_size, false);
  }
  if (const json* v = field(j, "stream")) s.stream = boolean(*v, "stream");
  if (const json* v = field(j, "return_logprob")) s.return_logprob = boolean(*v, "return_logprob");
  if (const json* v = field(j, "top_logprobs_num")) s.top_logprobs = int(integer(*v, "top_logprobs_num", 0, 20));
  s.logprobs = s.return_logprob;
  if (const json* sp = field(j, "sampling_params")) {
    if (!sp->is_object()) bad("sampling_params", "'sampling_params' must be an object, got " + type_name(*sp));
    const std::string pre = "sampling_params.";
    parse_sampling(*sp, s.sampling, pre);
    parse_stop(*sp, s, pre, lim);
    if (const json* v = field(*sp, "max_new_tokens"))
      s.max_tokens = static_cast<uint32_t>(integer(*v, pre + "max_new_tokens", 0, INT32_MAX));
    if (const json* v = field(*sp, "n"))
      if (integer(*v, pre + "n", 1, 1) != 1) unsupported(pre + "n", "'sampling_params.n' other than 1 is not supported");
    read_sglang_constraint(*sp, pre, s.constraint);
    check_constraint(s.constraint, s.max_tokens.value_or(0), pre + "max_new_tokens");
  }
  return s;
}

TokenizeSpec parse_tokenize_request(std::string_view body) {
  json j = parse_object(body);
  TokenizeSpec s;
  const json* prompt = field(j, "prompt");
  if (!prompt) prompt = field(j, "text");
  const json* msgs = field(j, "messages");
  if (prompt && msgs) bad("prompt", "give either 'prompt' or 'messages', not both");
  if (prompt) s.prompt = string(*prompt, "prompt");
  else if (msgs) {
    json tr = {{"messages", check_messages(*msgs)}, {"add_generation_prompt", true}};
    if (const json* v = field(j, "add_generation_prompt")) tr["add_generation_prompt"] = boolean(*v, "add_generation_prompt");
    if (const json* v = field(j, "tools")) tr["tools"] = *v;
    if (const json* v = field(j, "chat_template_kwargs")) {
      if (!v->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
      tr["chat_template_kwargs"] = *v;
    }
    if (const json* v = field(j, "reasoning_effort")) tr["reasoning_effort"] = string(*v, "reasoning_effort");
    s.chat_request = tr.dump(-1, ' ', false, json::error_handler_t::replace);
  } else {
    bad("prompt", "'prompt' is required");
  }
  return s;
}

std::vector<int32_t> parse_detokenize_request(std::string_view body, const SchemaLimits& lim) {
  json j = parse_object(body);
  const json* t = field(j, "tokens");
  if (!t) bad("tokens", "'tokens' is required");
  return token_ids(*t, "tokens", lim.vocab_size, true);
}

}  // namespace ft::gateway
