#pragma once
// GLM-4.5/4.6/4.7/5.3 generated-text parsing (spec: glm-chat-format.md §3-§5): reasoning in
// <think>…</think>, then content, then tool calls
//   <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>…</tool_call>
// with or without the GLM-4.5/4.6 newlines. The streaming parser turns text deltas into OpenAI
// deltas; the one-shot parser is the same state machine fed once, so both always agree.
//
// Text outside the calls (before, between and after them) is content; the content stream as a
// whole has its outer whitespace stripped. A repeated argument key inside one call: with a
// strict tool ("strict": true in its definition) the parser reports an error (error()); otherwise
// the last value wins. Streamed argument fragments are never taken back, so the streamed text of
// such a call carries both pairs (JSON parsers read that last-wins too); the final arguments
// (final_arguments(), parse_glm_output) hold each key once, at its first position, with the last
// value, as a Python dict would. Without a repeated key both texts are identical.
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace ft::text {

// Which arguments the request's tools declare as strings ("type": "string" exactly): those
// values are kept verbatim; every other value is JSON if it parses, else a string.
class ToolSchemas {
 public:
  ToolSchemas() = default;
  // OpenAI `tools` array ({"type":"function","function":{name, parameters}}); throws ft::Error
  // on invalid JSON.
  static ToolSchemas from_openai_tools_json(std::string_view tools_json);
  bool is_string_param(std::string_view tool, std::string_view arg) const;
  // The tool's definition says "strict": true (OpenAI function.strict, Anthropic tool.strict).
  bool is_strict(std::string_view tool) const { return strict_.count(std::string(tool)) != 0; }

 private:
  std::unordered_map<std::string, std::unordered_set<std::string>> string_params_;
  std::unordered_set<std::string> strict_;
};

struct GlmParseOptions {
  // The prompt ended inside the reasoning block (GLM-4.7/5.3 generation prompt "<think>").
  bool starts_in_reasoning = true;
  // The request has tools and tool_choice is not "none".
  bool parse_tool_calls = true;
  ToolSchemas schemas;
  // Id of each new call; default "call_" + 24 random hex digits.
  std::function<std::string()> make_call_id;
};

// One OpenAI `delta.tool_calls[]` entry. `id` and `name` are set only in the first fragment of a
// call; concatenating `arguments` over all fragments of an index gives the arguments JSON.
struct ToolCallDelta {
  int index = 0;
  std::string id;
  std::string name;
  std::string arguments;
};

// One piece of a delta in generation order (an API whose output is a sequence of blocks, such as
// Anthropic's text/thinking/tool_use, needs to know what came first within one delta).
struct GlmEvent {
  enum class Kind { Reasoning, Content, ToolCall };
  Kind kind = Kind::Content;
  std::string text;    // Reasoning, Content
  ToolCallDelta call;  // ToolCall
};

struct GlmDelta {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  // The same output as the three fields above, in order (adjacent pieces of one kind merged).
  std::vector<GlmEvent> events;
  bool empty() const { return reasoning_content.empty() && content.empty() && tool_calls.empty(); }
};

class GlmStreamParser {
 public:
  explicit GlmStreamParser(GlmParseOptions opts = {});
  // Text may be cut anywhere, even inside a tag or a UTF-8 sequence: what cannot be decided yet
  // is held back, so no partial tag ever reaches content and no delta splits a character.
  GlmDelta feed(std::string_view text);
  // End of generation: flushes what was held back and closes an unfinished call's arguments.
  GlmDelta finish();

  int tool_call_count() const { return calls_; }
  // Arguments JSON of call `index` with each key once (last value wins); complete once the call
  // closed (or finish() ran). Empty for an unknown index.
  std::string final_arguments(int index) const;
  // Set (and kept) when a strict tool's call repeats an argument key; empty otherwise.
  const std::string& error() const { return error_; }

 private:
  enum class State { Pre, Reasoning, Content, Name, BetweenArgs, Key, AfterKey, Value, AfterCall };
  struct Trim {  // strips leading and trailing whitespace of a stream of text
    bool started = false;
    std::string held;
    std::string push(std::string_view s);
  };
  void process(bool final, GlmDelta& out);
  std::vector<std::string_view> tags() const;
  void on_text(std::string_view s, GlmDelta& out);
  void on_tag(std::string_view tag, GlmDelta& out);
  void emit_args(std::string_view frag, GlmDelta& out);
  void emit_name(GlmDelta& out);
  void begin_value(GlmDelta& out);
  void end_value(GlmDelta& out);
  void close_call(GlmDelta& out);
  void add_reasoning(std::string_view s, GlmDelta& out);
  void add_content(std::string_view s, GlmDelta& out);

  GlmParseOptions opts_;
  State state_;
  std::string buf_;
  Trim reasoning_, content_, value_trim_;
  std::string name_, key_, value_;
  bool name_emitted_ = false, args_started_ = false, value_is_string_ = false;
  int calls_ = 0;
  uint64_t rng_state_;
  // Argument pairs of every call (key, value JSON exactly as streamed), for final_arguments().
  std::vector<std::vector<std::pair<std::string, std::string>>> pairs_;
  std::string value_json_;  // the current value's JSON text so far
  std::string error_;
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON object text, Python json.dumps style: {"city": "Paris", "days": 2}
};

struct GlmMessage {
  std::optional<std::string> reasoning_content;  // nullopt when empty
  std::optional<std::string> content;            // nullopt when empty
  std::vector<ToolCall> tool_calls;
};

GlmMessage parse_glm_output(std::string_view text, const GlmParseOptions& opts = {});

// Accumulates deltas into a message (what a client concatenating the stream ends up with).
void append_delta(GlmMessage& msg, const GlmDelta& d);

}  // namespace ft::text
