#include "gateway/constraint_fields.h"

#include "gateway/api_error.h"
#include "proto/flashtier/generate.pb.h"

namespace ft::gateway {

namespace {

using Kind = grammar::ConstraintSource::Kind;

[[noreturn]] void bad(const std::string& param, const std::string& msg) { throw ApiError::bad_field(param, msg); }

void set_source(ConstraintFields& c, Kind kind, std::string text, std::string param) {
  if (c.source.kind != Kind::None)
    bad(param, "'" + param + "' and '" + c.param + "' both constrain the output; give only one");
  c.source.kind = kind;
  c.source.text = std::move(text);
  c.param = std::move(param);
}

}  // namespace

void read_logit_bias(const ojson& v, const std::string& param, size_t vocab, ConstraintFields& c) {
  if (v.is_null()) return;
  if (!v.is_object()) bad(param, "'" + param + "' must be an object mapping token ids to biases");
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string p = param + "." + it.key();
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(it.key(), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != it.key().size() || id < 0) bad(p, "'" + param + "' keys must be token ids, got '" + it.key() + "'");
    if (vocab && static_cast<size_t>(id) >= vocab)
      bad(p, "token id " + it.key() + " in '" + param + "' is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    if (!it.value().is_number()) bad(p, "'" + p + "' must be a number");
    const double b = it.value().get<double>();
    if (!(b >= -100.0 && b <= 100.0)) bad(p, "'" + p + "' must be in [-100, 100], got " + it.value().dump());
    c.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
  }
}

void read_response_format(const ojson& v, ConstraintFields& c) {
  if (v.is_null()) return;
  if (!v.is_object() || !v.contains("type") || !v["type"].is_string())
    bad("response_format", "'response_format' must be an object with a string 'type'");
  const std::string t = v["type"].get<std::string>();
  if (t == "text") return;
  if (t == "json_object") {
    set_source(c, Kind::JsonObject, "", "response_format");
    return;
  }
  if (t != "json_schema")
    bad("response_format.type", "'response_format.type' must be 'text', 'json_object' or 'json_schema', got '" + t + "'");
  auto js = v.find("json_schema");
  if (js == v.end() || !js->is_object())
    bad("response_format.json_schema", "'response_format.json_schema' must be an object with a 'schema'");
  if (auto n = js->find("name"); n != js->end() && !n->is_string())
    bad("response_format.json_schema.name", "'response_format.json_schema.name' must be a string");
  if (auto s = js->find("strict"); s != js->end() && !s->is_null() && !s->is_boolean())
    bad("response_format.json_schema.strict", "'response_format.json_schema.strict' must be a boolean");
  auto schema = js->find("schema");
  // No schema: any JSON value, as the OpenAI API reads it.
  const std::string text = schema == js->end() ? "{}" : schema->dump();
  if (schema != js->end() && !schema->is_object() && !schema->is_boolean())
    bad("response_format.json_schema.schema", "'response_format.json_schema.schema' must be a JSON Schema object");
  set_source(c, Kind::JsonSchema, text, "response_format.json_schema.schema");
}

void read_sglang_constraint(const ojson& sp, const std::string& prefix, ConstraintFields& c) {
  if (auto it = sp.find("json_schema"); it != sp.end() && !it->is_null()) {
    if (!it->is_string() && !it->is_object()) bad(prefix + "json_schema", "'" + prefix + "json_schema' must be a JSON Schema (a string or an object)");
    set_source(c, Kind::JsonSchema, it->is_string() ? it->get<std::string>() : it->dump(), prefix + "json_schema");
  }
  for (const auto& [key, kind] : {std::pair<const char*, Kind>{"regex", Kind::Regex}, {"ebnf", Kind::Ebnf}}) {
    auto it = sp.find(key);
    if (it == sp.end() || it->is_null()) continue;
    if (!it->is_string()) bad(prefix + key, "'" + prefix + key + "' must be a string");
    set_source(c, kind, it->get<std::string>(), prefix + key);
  }
  if (auto it = sp.find("structural_tag"); it != sp.end() && !it->is_null())
    throw ApiError{400, "'" + prefix + "structural_tag' is not supported", prefix + "structural_tag", "invalid_request_error",
                   "unsupported_parameter"};
}

void set_tool_choice(ConstraintFields& c, const std::string& tools_json, const std::string& function, bool single_call) {
  if (c.source.kind != Kind::None)
    bad(c.param, "'" + c.param + "' cannot be combined with tool_choice \"required\" or a named function: the output must be a tool call");
  c.source.kind = Kind::ToolCalls;
  c.source.tools.tools_json = tools_json;
  c.source.tools.function = function;
  c.source.tools.single_call = single_call;
  c.param = "tool_choice";
}

void check_constraint(const ConstraintFields& c, uint32_t max_tokens, const std::string& max_tokens_param) {
  if (max_tokens > 0 && c.min_tokens > max_tokens)
    bad("min_tokens", "'min_tokens' (" + std::to_string(c.min_tokens) + ") is more than '" + max_tokens_param + "' (" +
                          std::to_string(max_tokens) + ")");
  if (c.source.kind == Kind::None) return;
  try {
    grammar::compile_constraint(c.source);
  } catch (const grammar::GrammarError& e) {
    bad(c.param, "'" + c.param + "' cannot be used: " + e.what());
  }
}

void to_proto(const ConstraintFields& c, flashtier::v1::GenerateRequest& r) {
  r.set_min_tokens(c.min_tokens);
  for (const auto& [id, b] : c.logit_bias) (*r.mutable_logit_bias())[id] = b;
  if (c.source.kind == Kind::None) return;
  auto* k = r.mutable_constraint();
  k->set_after_reasoning(c.source.after_reasoning);
  switch (c.source.kind) {
    case Kind::JsonSchema: k->set_json_schema(c.source.text); break;
    case Kind::JsonObject: k->set_json_object(true); break;
    case Kind::Regex: k->set_regex(c.source.text); break;
    case Kind::Ebnf: k->set_ebnf(c.source.text); break;
    case Kind::ToolCalls: {
      auto* t = k->mutable_tool_calls();
      t->set_tools_json(c.source.tools.tools_json);
      t->set_function(c.source.tools.function);
      t->set_single_call(c.source.tools.single_call);
      break;
    }
    case Kind::None: break;
  }
}

}  // namespace ft::gateway
