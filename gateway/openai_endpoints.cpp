// POST /v1/completions and POST /v1/chat/completions.
#include <chrono>
#include <span>

#include <nlohmann/json.hpp>

#include "gateway/chat_pipeline.h"
#include "gateway/endpoints.h"
#include "gateway/generation.h"
#include "gateway/openai_schema.h"
#include "shared/core/error.h"
#include "shared/text/glm_parser.h"

namespace ft::gateway {

using json = nlohmann::ordered_json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void sse(std::string& out, const json& j) {
  out += "data: ";
  out += dump(j);
  out += "\n\n";
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

SchemaLimits limits(const App& app) { return {app.opts.max_n, app.model->vocab_size(), app.model->served_name()}; }

json usage_json(uint64_t prompt, uint64_t completion, uint64_t cached) {
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

// Usage over choices: prompt tokens once per prompt, completion tokens per choice.
struct UsageSum {
  explicit UsageSum(int choices, int per_prompt) : per_prompt(per_prompt), f(choices) {}
  int per_prompt;
  std::vector<ChoiceFinish> f;
  uint64_t live_completion = 0;
  json get() const {
    uint64_t p = 0, c = 0, cached = 0;
    for (size_t i = 0; i < f.size(); ++i) {
      if (i % per_prompt == 0) {
        p += f[i].prompt_tokens;
        cached += f[i].cached_tokens;
      }
      c += f[i].completion_tokens;
    }
    return usage_json(p, c, cached);
  }
};

std::string token_string(const text::Tokenizer& tok, int32_t id, bool as_ids) {
  if (as_ids) return "token_id:" + std::to_string(id);
  return tok.decode(std::span<const int32_t>(&id, 1), false);
}

json token_bytes(const text::Tokenizer& tok, int32_t id) {
  json b = json::array();
  for (unsigned char ch : tok.token_bytes(id)) b.push_back(int(ch));
  return b;
}

json stop_reason(const ChoiceOutput& co) {
  if (!co.matched_stop().empty()) return co.matched_stop();
  if (co.matched_stop_token()) return *co.matched_stop_token();
  return nullptr;
}

// ------------------------------------------------------------------------------------------------
// Completions

class CompletionListener : public GenerationListener {
 public:
  CompletionListener(const App& app, const CompletionSpec& spec, std::string id, int64_t created, size_t choices,
                     std::vector<std::string> echo)
      : app_(app), spec_(spec), id_(std::move(id)), created_(created), echo_(std::move(echo)), ch_(choices),
        usage_(int(choices), spec.n) {}

  std::optional<ApiError> on_step(int i, ChoiceStep& step, ChoiceOutput&, std::string& out) override {
    Choice& c = ch_[i];
    std::string piece;
    if (c.first && spec_.echo) piece = echo_[i / spec_.n];
    c.first = false;
    piece += step.text;
    json lp = nullptr;
    if (spec_.logprobs && !step.tokens.empty()) {
      lp = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}, {"text_offset", json::array()}};
      for (const auto& t : step.tokens) {
        std::string s = token_string(app_.model->tokenizer(), t.id, spec_.tokens_as_ids);
        lp["tokens"].push_back(s);
        lp["token_logprobs"].push_back(t.logprob);
        json top = json::object();
        for (const auto& [id, l] : t.top) top[token_string(app_.model->tokenizer(), id, spec_.tokens_as_ids)] = l;
        lp["top_logprobs"].push_back(std::move(top));
        lp["text_offset"].push_back(c.offset);
        c.offset += app_.model->tokenizer().decode(std::span<const int32_t>(&t.id, 1), spec_.skip_special_tokens).size();
      }
    }
    if (spec_.stream) {
      if (piece.empty() && lp.is_null()) return std::nullopt;
      json chunk = base("text_completion");
      chunk["choices"] = json::array({{{"index", i}, {"text", piece}, {"logprobs", lp}, {"finish_reason", nullptr}}});
      if (spec_.include_usage) chunk["usage"] = nullptr;
      sse(out, chunk);
    } else {
      c.text += piece;
      if (!lp.is_null()) {
        if (c.logprobs.is_null()) c.logprobs = lp;
        else
          for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
            for (auto& v : lp[k]) c.logprobs[k].push_back(std::move(v));
      }
    }
    return std::nullopt;
  }

  std::optional<ApiError> on_finish(int i, const ChoiceFinish& f, ChoiceOutput& co, std::string& out) override {
    Choice& c = ch_[i];
    c.finish = f.reason;
    c.stop_reason = stop_reason(co);
    usage_.f[i] = f;
    if (spec_.stream) {
      json chunk = base("text_completion");
      chunk["choices"] = json::array(
          {{{"index", i}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", f.reason}, {"stop_reason", c.stop_reason}}});
      if (spec_.include_usage) chunk["usage"] = nullptr;
      sse(out, chunk);
    }
    return std::nullopt;
  }

  void on_end(std::string& out) override {
    if (spec_.include_usage) {
      json chunk = base("text_completion");
      chunk["choices"] = json::array();
      chunk["usage"] = usage_.get();
      sse(out, chunk);
    }
    out += "data: [DONE]\n\n";
  }

  json response() const {
    json r = base("text_completion");
    r["choices"] = json::array();
    for (size_t i = 0; i < ch_.size(); ++i) {
      const Choice& c = ch_[i];
      if (spec_.logprobs && c.logprobs.is_null()) {
        json empty = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}, {"text_offset", json::array()}};
        r["choices"].push_back({{"index", i}, {"text", c.text}, {"logprobs", empty}, {"finish_reason", c.finish}, {"stop_reason", c.stop_reason}});
      } else {
        r["choices"].push_back({{"index", i}, {"text", c.text}, {"logprobs", c.logprobs}, {"finish_reason", c.finish}, {"stop_reason", c.stop_reason}});
      }
    }
    r["usage"] = usage_.get();
    return r;
  }

 private:
  struct Choice {
    bool first = true;
    std::string text;
    json logprobs = nullptr;
    size_t offset = 0;
    std::string finish;
    json stop_reason = nullptr;
  };
  json base(const char* object) const {
    return {{"id", id_}, {"object", object}, {"created", created_}, {"model", app_.model->served_name()}};
  }
  const App& app_;
  const CompletionSpec& spec_;
  std::string id_;
  int64_t created_;
  std::vector<std::string> echo_;
  std::vector<Choice> ch_;
  UsageSum usage_;
};

// ------------------------------------------------------------------------------------------------
// Chat

class ChatListener : public GenerationListener {
 public:
  ChatListener(const App& app, const ChatSpec& spec, std::string id, int64_t created, const text::GlmParseOptions& popts)
      : app_(app), spec_(spec), id_(std::move(id)), created_(created), usage_(spec.n, spec.n) {
    for (int i = 0; i < spec.n; ++i) ch_.emplace_back(popts);
    enforce_ = spec.requires_tool_call();
  }

  void on_start(std::string& out) override {
    for (size_t i = 0; i < ch_.size(); ++i) {
      json chunk = base();
      chunk["choices"] = json::array(
          {{{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
      if (spec_.include_usage) chunk["usage"] = nullptr;
      sse(out, chunk);
    }
  }

  std::optional<ApiError> on_step(int i, ChoiceStep& step, ChoiceOutput& co, std::string& out) override {
    Choice& c = ch_[i];
    text::GlmDelta d = c.parser.feed(step.text);
    if (co.finished()) {
      text::GlmDelta tail = c.parser.finish();
      d.reasoning_content += tail.reasoning_content;
      d.content += tail.content;
      for (auto& t : tail.tool_calls) {
        if (!d.tool_calls.empty() && d.tool_calls.back().index == t.index && t.id.empty()) d.tool_calls.back().arguments += t.arguments;
        else d.tool_calls.push_back(std::move(t));
      }
    }
    if (!c.parser.error().empty())  // a strict tool's call repeated an argument key
      return ApiError{422, c.parser.error(), "tools", "server_error", "tool_arguments_invalid"};
    return emit(i, d, step.tokens, out);
  }

  std::optional<ApiError> on_finish(int i, const ChoiceFinish& f, ChoiceOutput&, std::string& out) override {
    Choice& c = ch_[i];
    usage_.f[i] = f;
    if (enforce_) {
      bool ok = false;
      for (const auto& call : c.calls) ok = ok || spec_.tool_choice == ToolChoice::Required || call.name == spec_.tool_name;
      if (!ok) {
        std::string want = spec_.tool_choice == ToolChoice::Named ? "a call to '" + spec_.tool_name + "'" : "a tool call";
        return ApiError{422,
                        "tool_choice requires " + want + ", but the model's output (choice " + std::to_string(i) +
                            ", finish_reason " + f.reason + ") contains none",
                        "tool_choice", "server_error", "tool_choice_not_satisfied"};
      }
    }
    c.finish = (!c.calls.empty() && f.reason == "stop") ? "tool_calls" : f.reason;
    if (spec_.stream) {
      json chunk = base();
      chunk["choices"] = json::array({{{"index", i}, {"delta", json::object()}, {"logprobs", nullptr}, {"finish_reason", c.finish}}});
      if (spec_.include_usage) chunk["usage"] = nullptr;
      sse(out, chunk);
    }
    return std::nullopt;
  }

  void on_end(std::string& out) override {
    if (spec_.include_usage) {
      json chunk = base();
      chunk["choices"] = json::array();
      chunk["usage"] = usage_.get();
      sse(out, chunk);
    }
    out += "data: [DONE]\n\n";
  }

  json response() const {
    json r = base();
    r["object"] = "chat.completion";
    r["choices"] = json::array();
    for (size_t i = 0; i < ch_.size(); ++i) {
      const Choice& c = ch_[i];
      json msg = {{"role", "assistant"},
                  {"content", c.content.empty() ? json(nullptr) : json(c.content)},
                  {"reasoning_content", c.reasoning.empty() ? json(nullptr) : json(c.reasoning)},
                  {"reasoning", c.reasoning.empty() ? json(nullptr) : json(c.reasoning)}};
      if (!c.calls.empty()) {
        json calls = json::array();
        for (size_t k = 0; k < c.calls.size(); ++k) {
          const auto& call = c.calls[k];
          // Each key once (a repeated key: last value wins); the streamed text may carry both.
          std::string args = c.parser.final_arguments(static_cast<int>(k));
          if (args.empty()) args = call.arguments;
          calls.push_back({{"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", args}}}});
        }
        msg["tool_calls"] = std::move(calls);
      }
      json lp = spec_.logprobs ? json{{"content", c.logprobs}} : json(nullptr);
      r["choices"].push_back({{"index", i}, {"message", msg}, {"logprobs", lp}, {"finish_reason", c.finish}});
    }
    r["usage"] = usage_.get();
    return r;
  }

 private:
  struct Call {
    std::string id, name, arguments;
  };
  struct Choice {
    explicit Choice(const text::GlmParseOptions& o) : parser(o) {}
    text::GlmStreamParser parser;
    std::string content, reasoning, held;
    std::vector<Call> calls;
    json logprobs = json::array();
    std::string finish;
  };

  json base() const {
    return {{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_}, {"model", app_.model->served_name()}};
  }

  json logprob_entries(const std::vector<OutToken>& toks) const {
    json arr = json::array();
    const auto& tok = app_.model->tokenizer();
    for (const auto& t : toks) {
      json top = json::array();
      for (const auto& [id, l] : t.top)
        top.push_back({{"token", token_string(tok, id, spec_.tokens_as_ids)}, {"logprob", l}, {"bytes", token_bytes(tok, id)}});
      arr.push_back({{"token", token_string(tok, t.id, spec_.tokens_as_ids)},
                     {"logprob", t.logprob},
                     {"bytes", token_bytes(tok, t.id)},
                     {"top_logprobs", std::move(top)}});
    }
    return arr;
  }

  std::optional<ApiError> emit(int i, text::GlmDelta& d, const std::vector<OutToken>& toks, std::string& out) {
    Choice& c = ch_[i];
    if (!spec_.parallel_tool_calls)
      std::erase_if(d.tool_calls, [](const text::ToolCallDelta& t) { return t.index > 0; });
    for (const auto& t : d.tool_calls) {
      if (t.id.empty()) continue;
      if (spec_.tool_choice == ToolChoice::Named && t.name != spec_.tool_name)
        return ApiError{422, "tool_choice requires a call to '" + spec_.tool_name + "', but the model called '" + t.name + "'",
                        "tool_choice", "server_error", "tool_choice_not_satisfied"};
    }
    if (enforce_) {
      if (c.calls.empty() && d.tool_calls.empty()) {  // hold content until a call shows up
        c.held += d.content;
        d.content.clear();
      } else if (!c.held.empty()) {
        d.content.insert(0, c.held);
        c.held.clear();
      }
    }
    c.reasoning += d.reasoning_content;
    c.content += d.content;
    for (const auto& t : d.tool_calls) {
      if (!t.id.empty()) c.calls.push_back({t.id, t.name, ""});
      if (t.index >= 0 && size_t(t.index) < c.calls.size()) c.calls[t.index].arguments += t.arguments;
    }
    json lp = nullptr;
    if (spec_.logprobs && !toks.empty()) {
      json entries = logprob_entries(toks);
      if (spec_.stream) lp = {{"content", entries}};
      else
        for (auto& e : entries) c.logprobs.push_back(std::move(e));
    }
    if (!spec_.stream) return std::nullopt;
    json delta = json::object();
    if (!d.reasoning_content.empty()) {
      delta["reasoning_content"] = d.reasoning_content;
      delta["reasoning"] = d.reasoning_content;
    }
    if (!d.content.empty()) delta["content"] = d.content;
    if (!d.tool_calls.empty()) {
      json calls = json::array();
      for (const auto& t : d.tool_calls) {
        json tc = {{"index", t.index}};
        if (!t.id.empty()) {
          tc["id"] = t.id;
          tc["type"] = "function";
          tc["function"] = {{"name", t.name}, {"arguments", t.arguments}};
        } else {
          tc["function"] = {{"arguments", t.arguments}};
        }
        calls.push_back(std::move(tc));
      }
      delta["tool_calls"] = std::move(calls);
    }
    if (delta.empty() && lp.is_null()) return std::nullopt;
    json chunk = base();
    chunk["choices"] = json::array({{{"index", i}, {"delta", delta}, {"logprobs", lp}, {"finish_reason", nullptr}}});
    if (spec_.include_usage) chunk["usage"] = nullptr;
    sse(out, chunk);
    return std::nullopt;
  }

  const App& app_;
  const ChatSpec& spec_;
  std::string id_;
  int64_t created_;
  std::vector<Choice> ch_;
  UsageSum usage_;
  bool enforce_ = false;
};

}  // namespace

// The synchronous part of each request (parse, validate, render, tokenize, plan) lives in plain
// functions: GCC 12 mishandles std::initializer_list temporaries inside coroutines.
namespace {

struct PreparedCompletion {
  CompletionSpec spec;
  std::vector<std::string> echo;
  std::string id;
  GenerationPlan plan;
};

std::unique_ptr<PreparedCompletion> prepare_completion(App& app, const std::string& body) {
  auto p = std::make_unique<PreparedCompletion>();
  p->spec = parse_completion_request(body, limits(app));
  const auto& spec = p->spec;
  const auto& tok = app.model->tokenizer();
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& t : spec.prompt_texts) {
    prompts.push_back(tok.encode(t));
    if (prompts.back().empty()) throw ApiError::bad_field("prompt", "the prompt encodes to no tokens");
    p->echo.push_back(t);
  }
  for (const auto& ids : spec.prompt_ids) {
    prompts.push_back(ids);
    p->echo.push_back(spec.echo ? tok.decode(ids, spec.skip_special_tokens) : std::string());
  }
  if (!app.pool->any_ready()) throw ApiError{503, "no gpu-worker is ready (loading or down)", "", "service_unavailable", "no_worker"};
  if (auto e = check_context(app, prompts, spec.max_tokens, "prompt", "max_tokens")) throw *e;
  p->id = new_request_id(app, "cmpl-");
  p->plan = make_plan(app, spec, prompts, p->id);
  return p;
}

std::unique_ptr<PreparedChat> prepare_chat(App& app, const std::string& body) {
  ChatSpec spec = parse_chat_request(body, limits(app));
  const bool mct = body.find("\"max_completion_tokens\"") != std::string::npos;
  return prepare_chat_spec(app, std::move(spec), mct ? "max_completion_tokens" : "max_tokens", "chatcmpl-");
}

std::string render_chat_prompt(const App& app, const ChatSpec& spec) {
  if (!app.model->has_chat_template())
    throw ApiError{500, "the model has no usable chat template: " + app.model->chat_template_error(), "", "server_error",
                   "no_chat_template"};
  std::string prompt;
  try {
    prompt = app.model->render_chat(spec.template_request);
  } catch (const std::exception& e) {
    throw ApiError::bad_field("messages", std::string("the chat template could not render these messages: ") + e.what());
  }
  // GLM-5.3's template always opens <think>; thinking off = close the block in the prompt.
  if (!spec.enable_thinking && prompt.ends_with("<think>")) prompt += "</think>";
  return prompt;
}

}  // namespace

std::vector<int32_t> chat_prompt_ids(const App& app, const ChatSpec& spec) {
  return app.model->tokenizer().encode(render_chat_prompt(app, spec));
}

std::unique_ptr<PreparedChat> prepare_chat_spec(App& app, ChatSpec spec_in, const std::string& max_tokens_param,
                                                const char* id_prefix) {
  auto p = std::make_unique<PreparedChat>();
  p->spec = std::move(spec_in);
  const auto& spec = p->spec;
  const auto& tok = app.model->tokenizer();
  std::vector<std::vector<int32_t>> prompts(1, chat_prompt_ids(app, spec));
  const auto& ids = prompts[0];
  p->prompt_tokens = ids.size();
  if (!app.pool->any_ready()) throw ApiError{503, "no gpu-worker is ready (loading or down)", "", "service_unavailable", "no_worker"};
  if (auto e = check_context(app, prompts, spec.max_tokens, "messages", max_tokens_param)) throw *e;

  std::set<int32_t> keep;  // tags the parser must see even when special tokens are skipped
  for (const char* t : {"<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"})
    if (auto id = tok.token_to_id(t)) keep.insert(*id);
  p->parse.starts_in_reasoning = !ids.empty() && app.model->think_id() >= 0 && ids.back() == app.model->think_id();
  // A constraint applies to what follows the reasoning when the prompt leaves the model inside it.
  p->spec.constraint.source.after_reasoning = p->parse.starts_in_reasoning;
  p->parse.parse_tool_calls = spec.has_tools;
  if (spec.has_tools) p->parse.schemas = text::ToolSchemas::from_openai_tools_json(spec.tools_json);
  p->id = new_request_id(app, id_prefix);
  p->plan = make_plan(app, spec, prompts, p->id, keep);
  return p;
}

// `body` is the non-streaming response (built by the caller when the outcome is Completed).
asio::awaitable<int> finish_outcome(HttpExchange& ex, const GenerationOutcome& o, std::string body) {
  if (o.kind == GenerationOutcome::ClientGone) co_return 499;
  if (o.kind == GenerationOutcome::Failed) {
    if (!ex.responded()) co_return co_await respond_error(ex, *o.error);
    co_return o.error->status;
  }
  if (!ex.responded()) co_await ex.respond(200, "application/json", std::move(body), {});
  co_return 200;
}

asio::awaitable<int> handle_completions(App& app, HttpExchange& ex) {
  const auto arrival = std::chrono::steady_clock::now();
  std::unique_ptr<PreparedCompletion> p;
  std::optional<ApiError> err;
  try {
    p = prepare_completion(app, ex.request().body);
  } catch (const ApiError& e) {
    err = e;
  }
  if (err) co_return co_await respond_error(ex, *err);
  p->plan.arrival = arrival;
  CompletionListener listener(app, p->spec, p->id, unix_now(), p->plan.requests.size(), std::move(p->echo));
  GenerationOutcome o = co_await run_generation(app, ex, std::move(p->plan), listener);
  std::string body;
  if (o.kind == GenerationOutcome::Completed && !ex.responded()) body = dump(listener.response());
  co_return co_await finish_outcome(ex, o, std::move(body));
}

asio::awaitable<int> handle_chat_completions(App& app, HttpExchange& ex) {
  const auto arrival = std::chrono::steady_clock::now();
  std::unique_ptr<PreparedChat> p;
  std::optional<ApiError> err;
  try {
    p = prepare_chat(app, ex.request().body);
  } catch (const ApiError& e) {
    err = e;
  }
  if (err) co_return co_await respond_error(ex, *err);
  p->plan.arrival = arrival;
  ChatListener listener(app, p->spec, p->id, unix_now(), p->parse);
  GenerationOutcome o = co_await run_generation(app, ex, std::move(p->plan), listener);
  std::string body;
  if (o.kind == GenerationOutcome::Completed && !ex.responded()) body = dump(listener.response());
  co_return co_await finish_outcome(ex, o, std::move(body));
}

}  // namespace ft::gateway
