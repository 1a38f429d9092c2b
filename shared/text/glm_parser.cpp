#include "shared/text/glm_parser.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include <nlohmann/json.hpp>

#include "shared/core/error.h"
#include "shared/text/jinja_value.h"
#include "shared/text/utf8.h"

namespace ft::text {

namespace {

constexpr std::string_view kThink = "<think>", kThinkEnd = "</think>", kCall = "<tool_call>", kCallEnd = "</tool_call>",
                           kKey = "<arg_key>", kKeyEnd = "</arg_key>", kValue = "<arg_value>", kValueEnd = "</arg_value>";

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string strip(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && is_ws(s[b])) ++b;
  while (e > b && is_ws(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

std::string json_escaped(std::string_view s) {
  std::string q;
  jinja::append_json_string(q, s, false);
  return q.substr(1, q.size() - 2);
}

// A non-string argument value: JSON if it parses (re-emitted as Python json.dumps would), a
// Python literal True/False/None, else the raw text as a JSON string.
std::string typed_value_json(const std::string& raw) {
  const std::string v = strip(raw);
  if (v == "True") return "true";
  if (v == "False") return "false";
  if (v == "None") return "null";
  if (!v.empty()) {
    try {
      return jinja::to_json(jinja::from_json_text(v));
    } catch (const jinja::TemplateRuntimeError&) {
    }
  }
  std::string out;
  jinja::append_json_string(out, v, false);
  return out;
}

}  // namespace

// ---- ToolSchemas

ToolSchemas ToolSchemas::from_openai_tools_json(std::string_view tools_json) {
  ToolSchemas s;
  if (tools_json.empty()) return s;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(tools_json);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("tools: invalid JSON: ") + e.what());
  }
  if (!j.is_array()) throw Error("tools: expected an array");
  for (const auto& t : j) {
    if (!t.is_object()) continue;
    const nlohmann::json& fn = t.contains("function") && t["function"].is_object() ? t["function"] : t;
    if (!fn.contains("name") || !fn["name"].is_string()) continue;
    auto& params = s.string_params_[fn["name"].get<std::string>()];
    if (fn.contains("strict") && fn["strict"] == true) s.strict_.insert(fn["name"].get<std::string>());
    if (!fn.contains("parameters") || !fn["parameters"].is_object()) continue;
    const auto& props = fn["parameters"].value("properties", nlohmann::json::object());
    if (!props.is_object()) continue;
    for (auto it = props.begin(); it != props.end(); ++it) {
      const auto& p = it.value();
      if (p.is_object() && p.contains("type") && p["type"] == "string") params.insert(it.key());
    }
  }
  return s;
}

bool ToolSchemas::is_string_param(std::string_view tool, std::string_view arg) const {
  auto it = string_params_.find(std::string(tool));
  return it != string_params_.end() && it->second.count(std::string(arg)) != 0;
}

// ---- streaming parser

std::string GlmStreamParser::Trim::push(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (is_ws(c)) {
      if (started) held.push_back(c);
    } else {
      out += held;
      held.clear();
      out.push_back(c);
      started = true;
    }
  }
  return out;
}

GlmStreamParser::GlmStreamParser(GlmParseOptions opts)
    : opts_(std::move(opts)), state_(opts_.starts_in_reasoning ? State::Reasoning : State::Pre) {
  std::random_device rd;
  rng_state_ = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
               static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

std::vector<std::string_view> GlmStreamParser::tags() const {
  const bool tools = opts_.parse_tool_calls;
  switch (state_) {
    case State::Pre:
      if (tools) return {kThink, kThinkEnd, kCall};
      return {kThink, kThinkEnd};
    case State::Reasoning:
      // A model that re-opens <think> at the very start: the tag is not reasoning text.
      if (!reasoning_.started) return {kThink, kThinkEnd};
      return {kThinkEnd};
    case State::Content:
    case State::AfterCall:
      if (tools) return {kCall};
      return {};
    case State::Name:
    case State::BetweenArgs: return {kKey, kCallEnd};
    case State::Key: return {kKeyEnd, kCallEnd};
    case State::AfterKey: return {kValue, kCallEnd};
    case State::Value: return {kValueEnd};
  }
  return {};
}

GlmDelta GlmStreamParser::feed(std::string_view text) {
  GlmDelta out;
  buf_.append(text);
  process(false, out);
  return out;
}

GlmDelta GlmStreamParser::finish() {
  GlmDelta out;
  process(true, out);
  // Close an unfinished call so its arguments are still a JSON object.
  switch (state_) {
    case State::Name:
      if (!strip(name_).empty()) {
        emit_name(out);
        close_call(out);
      }
      break;
    case State::BetweenArgs:
    case State::Key:
    case State::AfterKey: close_call(out); break;
    case State::Value:
      end_value(out);
      close_call(out);
      break;
    default: break;
  }
  state_ = State::AfterCall;
  return out;
}

void GlmStreamParser::process(bool final, GlmDelta& out) {
  while (true) {
    size_t limit = buf_.size();
    if (!final) limit -= utf8_incomplete_tail(buf_);
    const std::string_view view(buf_.data(), limit);
    const auto want = tags();
    size_t best = std::string_view::npos;
    std::string_view tag;
    for (std::string_view t : want) {
      const size_t p = view.find(t);
      if (p < best) {
        best = p;
        tag = t;
      }
    }
    if (best == 0) {
      buf_.erase(0, tag.size());
      on_tag(tag, out);
      continue;
    }
    if (best != std::string_view::npos) {
      // Text first: it may change the state (and so the tags that matter).
      const std::string text(view.substr(0, best));
      buf_.erase(0, best);
      on_text(text, out);
      continue;
    }
    size_t hold = 0;
    if (!final) {
      // The longest suffix that could still grow into a tag.
      for (std::string_view t : want)
        for (size_t k = std::min(t.size() - 1, view.size()); k > hold; --k)
          if (view.substr(view.size() - k) == t.substr(0, k)) {
            hold = k;
            break;
          }
    }
    const std::string text(view.substr(0, view.size() - hold));
    buf_.erase(0, text.size());
    if (!text.empty()) on_text(text, out);
    return;
  }
}

void GlmStreamParser::on_text(std::string_view s, GlmDelta& out) {
  switch (state_) {
    case State::Pre: {
      size_t i = 0;
      while (i < s.size() && is_ws(s[i])) ++i;
      if (i == s.size()) return;
      state_ = State::Content;
      on_text(s.substr(i), out);
      return;
    }
    case State::Reasoning: add_reasoning(reasoning_.push(s), out); return;
    case State::Content:
    case State::AfterCall: add_content(content_.push(s), out); return;  // text between and after calls is content
    case State::Name: {
      name_.append(s);
      // GLM-4.5/4.6 end the name with a newline; GLM-4.7+ go straight to <arg_key>.
      const size_t nl = name_.find('\n');
      if (nl != std::string::npos && !strip(std::string_view(name_).substr(0, nl)).empty()) {
        name_.resize(nl);
        emit_name(out);
        state_ = State::BetweenArgs;
      }
      return;
    }
    case State::Key: key_.append(s); return;
    case State::Value:
      if (value_is_string_) {
        const std::string kept = value_trim_.push(s);
        if (!kept.empty()) {
          const std::string esc = json_escaped(kept);
          value_json_ += esc;
          emit_args(esc, out);
        }
      } else {
        value_.append(s);
      }
      return;
    case State::BetweenArgs:
    case State::AfterKey:
      return;  // separators inside a call (whitespace, a literal "\n")
  }
}

void GlmStreamParser::on_tag(std::string_view tag, GlmDelta& out) {
  if (tag == kThink) {
    if (state_ == State::Pre) state_ = State::Reasoning;
    return;
  }
  if (tag == kThinkEnd) {
    state_ = State::Content;
    return;
  }
  if (tag == kCall) {
    state_ = State::Name;
    name_.clear();
    name_emitted_ = false;
    args_started_ = false;
    ++calls_;
    pairs_.emplace_back();
    return;
  }
  if (tag == kKey) {
    if (state_ == State::Name) emit_name(out);
    key_.clear();
    state_ = State::Key;
    return;
  }
  if (tag == kKeyEnd) {
    state_ = State::AfterKey;
    return;
  }
  if (tag == kValue) {
    begin_value(out);
    state_ = State::Value;
    return;
  }
  if (tag == kValueEnd) {
    end_value(out);
    state_ = State::BetweenArgs;
    return;
  }
  if (tag == kCallEnd) {
    if (state_ == State::Name) emit_name(out);
    close_call(out);
    state_ = State::AfterCall;
  }
}

void GlmStreamParser::emit_name(GlmDelta& out) {
  if (name_emitted_) return;
  name_emitted_ = true;
  ToolCallDelta d;
  d.index = calls_ - 1;
  if (opts_.make_call_id) {
    d.id = opts_.make_call_id();
  } else {
    // splitmix64: ids only need to be unique, not secret.
    auto next = [this] {
      uint64_t z = (rng_state_ += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return z ^ (z >> 31);
    };
    char b[32];
    std::snprintf(b, sizeof b, "%016llx%08llx", static_cast<unsigned long long>(next()),
                  static_cast<unsigned long long>(next() & 0xFFFFFFFFull));
    d.id = std::string("call_") + b;
  }
  d.name = strip(name_);
  GlmEvent ev;
  ev.kind = GlmEvent::Kind::ToolCall;
  ev.call = d;
  out.events.push_back(std::move(ev));
  out.tool_calls.push_back(std::move(d));
}

namespace {
// Text of one kind: appended to its field and to the last event when that event is of its kind.
void add_text(std::string_view s, GlmEvent::Kind kind, std::string& field, GlmDelta& out) {
  if (s.empty()) return;
  field += s;
  if (out.events.empty() || out.events.back().kind != kind) out.events.push_back({kind, "", {}});
  out.events.back().text += s;
}
}  // namespace

void GlmStreamParser::add_reasoning(std::string_view s, GlmDelta& out) {
  add_text(s, GlmEvent::Kind::Reasoning, out.reasoning_content, out);
}

void GlmStreamParser::add_content(std::string_view s, GlmDelta& out) {
  add_text(s, GlmEvent::Kind::Content, out.content, out);
}

void GlmStreamParser::emit_args(std::string_view frag, GlmDelta& out) {
  const int index = calls_ - 1;
  if (!out.tool_calls.empty() && out.tool_calls.back().index == index)
    out.tool_calls.back().arguments.append(frag);
  else
    out.tool_calls.push_back({index, "", "", std::string(frag)});
  if (!out.events.empty() && out.events.back().kind == GlmEvent::Kind::ToolCall && out.events.back().call.index == index) {
    out.events.back().call.arguments.append(frag);
  } else {
    GlmEvent ev;
    ev.kind = GlmEvent::Kind::ToolCall;
    ev.call = {index, "", "", std::string(frag)};
    out.events.push_back(std::move(ev));
  }
}

void GlmStreamParser::begin_value(GlmDelta& out) {
  if (!name_emitted_) emit_name(out);
  const std::string key = strip(key_);
  std::string prefix = args_started_ ? ", " : "{";
  args_started_ = true;
  jinja::append_json_string(prefix, key, false);
  prefix += ": ";
  const std::string tool = strip(name_);
  if (error_.empty() && opts_.schemas.is_strict(tool) && !pairs_.empty())
    for (const auto& [k, v] : pairs_.back())
      if (k == key) {
        error_ = "tool call " + std::to_string(calls_ - 1) + " ('" + tool + "') repeats argument '" + key +
                 "'; the tool is strict";
        break;
      }
  value_is_string_ = opts_.schemas.is_string_param(tool, key);
  value_.clear();
  value_trim_ = Trim{};
  value_json_.clear();
  if (value_is_string_) {
    prefix += "\"";
    value_json_ = "\"";
  }
  emit_args(prefix, out);
}

void GlmStreamParser::end_value(GlmDelta& out) {
  const std::string tail = value_is_string_ ? std::string("\"") : typed_value_json(value_);
  value_json_ += tail;
  emit_args(tail, out);
  if (!pairs_.empty()) pairs_.back().emplace_back(strip(key_), std::move(value_json_));
  value_json_.clear();
  value_.clear();
}

std::string GlmStreamParser::final_arguments(int index) const {
  if (index < 0 || static_cast<size_t>(index) >= pairs_.size()) return {};
  // Python dict semantics: a key keeps its first position and takes its last value.
  std::vector<std::pair<std::string, std::string>> kept;
  for (const auto& kv : pairs_[index]) {  // not a structured binding: clang 14 cannot capture one
    auto it = std::find_if(kept.begin(), kept.end(), [&](const auto& p) { return p.first == kv.first; });
    if (it != kept.end()) it->second = kv.second;
    else kept.emplace_back(kv.first, kv.second);
  }
  if (kept.empty()) return "{}";
  std::string s = "{";
  for (size_t i = 0; i < kept.size(); ++i) {
    if (i) s += ", ";
    jinja::append_json_string(s, kept[i].first, false);
    s += ": ";
    s += kept[i].second;
  }
  return s + "}";
}

void GlmStreamParser::close_call(GlmDelta& out) {
  if (!name_emitted_) emit_name(out);
  emit_args(args_started_ ? "}" : "{}", out);
}

// ---- one-shot

void append_delta(GlmMessage& msg, const GlmDelta& d) {
  if (!d.reasoning_content.empty()) msg.reasoning_content = msg.reasoning_content.value_or("") + d.reasoning_content;
  if (!d.content.empty()) msg.content = msg.content.value_or("") + d.content;
  for (const ToolCallDelta& t : d.tool_calls) {
    while (static_cast<int>(msg.tool_calls.size()) <= t.index) msg.tool_calls.emplace_back();
    ToolCall& c = msg.tool_calls[t.index];
    if (!t.id.empty()) c.id = t.id;
    if (!t.name.empty()) c.name = t.name;
    c.arguments += t.arguments;
  }
}

GlmMessage parse_glm_output(std::string_view text, const GlmParseOptions& opts) {
  GlmStreamParser p(opts);
  GlmMessage msg;
  append_delta(msg, p.feed(text));
  append_delta(msg, p.finish());
  for (size_t i = 0; i < msg.tool_calls.size(); ++i) msg.tool_calls[i].arguments = p.final_arguments(static_cast<int>(i));
  return msg;
}

}  // namespace ft::text
