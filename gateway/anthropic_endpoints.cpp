// POST /v1/messages (Anthropic Messages API, streaming and not) and POST
// /v1/messages/count_tokens, on the chat pipeline the OpenAI endpoint uses: the request maps onto
// a ChatSpec (anthropic_schema.cpp), the GLM parser's ordered events become content blocks
// (thinking, text, tool_use) in generation order.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include <nlohmann/json.hpp>

#include "gateway/anthropic_schema.h"
#include "gateway/chat_pipeline.h"
#include "gateway/endpoints.h"
#include "shared/text/glm_parser.h"

namespace ft::gateway {

using json = nlohmann::ordered_json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// One SSE event as Anthropic sends it: a named event whose data repeats the name as "type".
void event(std::string& out, const char* name, const json& data) {
  out += "event: ";
  out += name;
  out += "\ndata: ";
  out += dump(data);
  out += "\n\n";
}

std::string tool_use_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char b[32];
  std::snprintf(b, sizeof b, "%012llx%012llx", static_cast<unsigned long long>(rng() & 0xffffffffffffULL),
                static_cast<unsigned long long>(rng() & 0xffffffffffffULL));
  return std::string("toolu_") + b;
}

class MessagesListener : public GenerationListener {
 public:
  MessagesListener(const App& app, const AnthropicSpec& spec, std::string id, size_t prompt_tokens,
                   const text::GlmParseOptions& popts)
      : app_(app), spec_(spec), chat_(spec.chat), id_(std::move(id)), prompt_tokens_(prompt_tokens), parser_(popts) {
    enforce_ = chat_.requires_tool_call();
  }

  void on_start(std::string& out) override {
    json msg = message_head();
    msg["usage"] = {{"input_tokens", prompt_tokens_}, {"output_tokens", 0}};
    event(out, "message_start", {{"type", "message_start"}, {"message", std::move(msg)}});
    event(out, "ping", {{"type", "ping"}});
  }

  std::optional<ApiError> on_step(int, ChoiceStep& step, ChoiceOutput& co, std::string& out) override {
    if (auto e = take(parser_.feed(step.text), out)) return e;
    if (co.finished())
      if (auto e = take(parser_.finish(), out)) return e;
    if (!parser_.error().empty())  // a strict tool's call repeated an argument key
      return ApiError{422, parser_.error(), "tools", "api_error", "tool_arguments_invalid"};
    return std::nullopt;
  }

  std::optional<ApiError> on_finish(int, const ChoiceFinish& f, ChoiceOutput& co, std::string& out) override {
    finish_ = f;
    close_block(out);
    if (enforce_ && calls_ == 0) {
      std::string want = chat_.tool_choice == ToolChoice::Named ? "a call to '" + chat_.tool_name + "'" : "a tool call";
      return ApiError{422, "tool_choice requires " + want + ", but the model's output contains none", "tool_choice",
                      "api_error", "tool_choice_not_satisfied"};
    }
    if (f.reason == "length") stop_reason_ = "max_tokens";
    else if (calls_ > 0) stop_reason_ = "tool_use";
    else if (!co.matched_stop().empty()) {
      stop_reason_ = "stop_sequence";
      stop_sequence_ = co.matched_stop();
    } else stop_reason_ = "end_turn";
    if (chat_.stream)
      event(out, "message_delta",
            {{"type", "message_delta"}, {"delta", {{"stop_reason", stop_reason_}, {"stop_sequence", stop_sequence()}}},
             {"usage", usage()}});
    return std::nullopt;
  }

  void on_end(std::string& out) override { event(out, "message_stop", {{"type", "message_stop"}}); }

  void on_error(const ApiError& e, std::string& out) override {
    event(out, "error", json::parse(anthropic_error_json(e)));
  }

  json response() const {
    json msg = message_head();
    for (const Block& b : blocks_) {
      if (b.kind == Block::Thinking) {
        msg["content"].push_back({{"type", "thinking"}, {"thinking", b.text}, {"signature", ""}});
      } else if (b.kind == Block::Text) {
        msg["content"].push_back({{"type", "text"}, {"text", b.text}});
      } else {
        // Each key once (a repeated key: last value wins).
        json input = json::parse(parser_.final_arguments(b.call_index), nullptr, false);
        if (!input.is_object()) input = json::object();
        msg["content"].push_back({{"type", "tool_use"}, {"id", b.id}, {"name", b.name}, {"input", std::move(input)}});
      }
    }
    msg["stop_reason"] = stop_reason_;
    msg["stop_sequence"] = stop_sequence();
    msg["usage"] = usage();
    return msg;
  }

 private:
  struct Block {
    enum Kind { Thinking, Text, ToolUse } kind = Text;
    std::string text;      // Thinking, Text
    std::string id, name;  // ToolUse
    int call_index = -1;
  };

  json message_head() const {
    return {{"id", id_},           {"type", "message"},        {"role", "assistant"},     {"model", app_.model->served_name()},
            {"content", json::array()}, {"stop_reason", nullptr}, {"stop_sequence", nullptr}};
  }

  json stop_sequence() const { return stop_sequence_.empty() ? json(nullptr) : json(stop_sequence_); }

  json usage() const {
    const uint64_t prompt = finish_.prompt_tokens ? finish_.prompt_tokens : prompt_tokens_;
    const uint64_t cached = std::min<uint64_t>(finish_.cached_tokens, prompt);
    return {{"input_tokens", prompt - cached},
            {"cache_creation_input_tokens", 0},
            {"cache_read_input_tokens", cached},
            {"output_tokens", finish_.completion_tokens}};
  }

  int open_index() const { return static_cast<int>(blocks_.size()) - 1; }

  void close_block(std::string& out) {
    if (!open_) return;
    open_ = false;
    if (!chat_.stream) return;
    if (blocks_.back().kind == Block::Thinking)
      event(out, "content_block_delta",
            {{"type", "content_block_delta"}, {"index", open_index()}, {"delta", {{"type", "signature_delta"}, {"signature", ""}}}});
    event(out, "content_block_stop", {{"type", "content_block_stop"}, {"index", open_index()}});
  }

  // Opens a block of `kind` unless one is open already (tool_use blocks always open anew).
  Block& block(Block::Kind kind, std::string& out, const text::ToolCallDelta* call = nullptr) {
    if (open_ && blocks_.back().kind == kind && !call) return blocks_.back();
    close_block(out);
    Block b;
    b.kind = kind;
    if (call) {
      b.id = call->id;
      b.name = call->name;
      b.call_index = call->index;
    }
    blocks_.push_back(std::move(b));
    open_ = true;
    if (chat_.stream) {
      json cb;
      if (kind == Block::Thinking) cb = {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}};
      else if (kind == Block::Text) cb = {{"type", "text"}, {"text", ""}};
      else cb = {{"type", "tool_use"}, {"id", call->id}, {"name", call->name}, {"input", json::object()}};
      event(out, "content_block_start", {{"type", "content_block_start"}, {"index", open_index()}, {"content_block", cb}});
    }
    return blocks_.back();
  }

  void delta(std::string& out, const char* type, const char* key, const std::string& value) {
    if (!chat_.stream || value.empty()) return;
    event(out, "content_block_delta", {{"type", "content_block_delta"}, {"index", open_index()}, {"delta", {{"type", type}, {key, value}}}});
  }

  // The parser's events, in order, onto the block list (and the stream).
  std::optional<ApiError> take(const text::GlmDelta& d, std::string& out) {
    for (const text::GlmEvent& ev : d.events) {
      if (ev.kind == text::GlmEvent::Kind::Reasoning) {
        if (!spec_.thinking) continue;  // not asked for: Anthropic clients expect no thinking blocks
        block(Block::Thinking, out).text += ev.text;
        delta(out, "thinking_delta", "thinking", ev.text);
      } else if (ev.kind == text::GlmEvent::Kind::Content) {
        block(Block::Text, out).text += ev.text;
        delta(out, "text_delta", "text", ev.text);
      } else {
        const text::ToolCallDelta& c = ev.call;
        if (!chat_.parallel_tool_calls && c.index > 0) continue;  // disable_parallel_tool_use: the first call only
        if (!c.id.empty()) {
          if (chat_.tool_choice == ToolChoice::Named && c.name != chat_.tool_name)
            return ApiError{422, "tool_choice requires a call to '" + chat_.tool_name + "', but the model called '" + c.name + "'",
                            "tool_choice", "api_error", "tool_choice_not_satisfied"};
          block(Block::ToolUse, out, &c);
          ++calls_;
        }
        if (open_ && blocks_.back().kind == Block::ToolUse && blocks_.back().call_index == c.index)
          delta(out, "input_json_delta", "partial_json", c.arguments);
      }
    }
    return std::nullopt;
  }

  const App& app_;
  const AnthropicSpec& spec_;
  const ChatSpec& chat_;
  std::string id_;
  size_t prompt_tokens_;
  text::GlmStreamParser parser_;
  std::vector<Block> blocks_;
  bool open_ = false;
  bool enforce_ = false;
  int calls_ = 0;
  ChoiceFinish finish_;
  std::string stop_reason_ = "end_turn", stop_sequence_;
};

SchemaLimits limits(const App& app) { return {app.opts.max_n, app.model->vocab_size(), app.model->served_name()}; }

struct PreparedMessages {
  AnthropicSpec spec;
  std::unique_ptr<PreparedChat> chat;
};

// Plain functions, not coroutines: GCC 12 mishandles initializer-list temporaries in coroutines.
std::unique_ptr<PreparedMessages> prepare_messages(App& app, const std::string& body) {
  auto p = std::make_unique<PreparedMessages>();
  p->spec = parse_anthropic_request(body, limits(app));
  p->chat = prepare_chat_spec(app, p->spec.chat, "max_tokens", "msg_");
  p->chat->parse.make_call_id = tool_use_id;
  return p;
}

std::string count_tokens(App& app, const std::string& body) {
  AnthropicSpec spec = parse_anthropic_request(body, limits(app), true);
  return dump(json{{"input_tokens", chat_prompt_ids(app, spec.chat).size()}});
}

}  // namespace

asio::awaitable<int> handle_anthropic_messages(App& app, HttpExchange& ex) {
  const auto arrival = std::chrono::steady_clock::now();
  std::unique_ptr<PreparedMessages> p;
  std::optional<ApiError> err;
  try {
    p = prepare_messages(app, ex.request().body);
  } catch (const ApiError& e) {
    err = e;
  }
  if (err) co_return co_await respond_error(ex, *err);
  p->chat->plan.arrival = arrival;
  MessagesListener listener(app, p->spec, p->chat->id, p->chat->prompt_tokens, p->chat->parse);
  GenerationOutcome o = co_await run_generation(app, ex, std::move(p->chat->plan), listener);
  std::string body;
  if (o.kind == GenerationOutcome::Completed && !ex.responded()) body = dump(listener.response());
  co_return co_await finish_outcome(ex, o, std::move(body));
}

asio::awaitable<int> handle_anthropic_count_tokens(App& app, HttpExchange& ex) {
  std::string body;
  std::optional<ApiError> err;
  try {
    body = count_tokens(app, ex.request().body);
  } catch (const ApiError& e) {
    err = e;
  }
  if (err) co_return co_await respond_error(ex, *err);
  co_await ex.respond(200, "application/json", std::move(body));
  co_return 200;
}

}  // namespace ft::gateway
