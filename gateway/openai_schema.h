#pragma once
// Request bodies of the OpenAI and SGLang endpoints, validated: every bad field becomes an
// ApiError (400, OpenAI error JSON naming the field). Parsing only; no tokenization here.
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/api_error.h"
#include "gateway/constraint_fields.h"

namespace ft::gateway {

struct SchemaLimits {
  int max_n = 16;
  size_t vocab_size = 0;
  std::string served_name;
};

struct SamplingFields {
  float temperature = 1.0f;
  float top_p = 1.0f;
  int top_k = 0;
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  std::optional<uint64_t> seed;
};

struct CommonFields {
  SamplingFields sampling;
  std::optional<uint32_t> max_tokens;  // absent: endpoint default
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool include_stop_str = false;
  bool skip_special_tokens = true;
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  int top_logprobs = 0;
  bool tokens_as_ids = false;  // vLLM's return_tokens_as_token_ids
  std::string user;
  ConstraintFields constraint;  // response_format / tool_choice / SGLang grammars, logit_bias, min_tokens
};

struct CompletionSpec : CommonFields {
  // Exactly one of the two is filled; several entries = several prompts.
  std::vector<std::string> prompt_texts;
  std::vector<std::vector<int32_t>> prompt_ids;
  bool echo = false;
};

enum class ToolChoice { None, Auto, Required, Named };

struct ChatSpec : CommonFields {
  std::string template_request;  // JSON handed to the chat-template renderer
  bool has_tools = false;        // tools given and tool_choice != none
  ToolChoice tool_choice = ToolChoice::Auto;
  std::string tool_name;         // ToolChoice::Named
  std::set<std::string> tool_names;
  std::string tools_json;        // the request's tools (JSON array) when has_tools
  bool enable_thinking = true;
  bool parallel_tool_calls = true;
  // tool_choice "required" / a named function (Anthropic: "any" / "tool") with tools given.
  bool requires_tool_call() const {
    return has_tools && (tool_choice == ToolChoice::Required || tool_choice == ToolChoice::Named);
  }
};

// A required or named tool choice becomes the tool-call constraint (a grammar over GLM's
// tool-call format), for the OpenAI and the Anthropic surface alike; needs tools_json set.
void constrain_tool_choice(ChatSpec& s);

struct SglangSpec : CommonFields {
  std::optional<std::string> text;
  std::vector<int32_t> input_ids;
  bool return_logprob = false;
};

struct TokenizeSpec {
  std::optional<std::string> prompt;
  std::optional<std::string> chat_request;  // a "messages" body, rendered with the chat template
};

CompletionSpec parse_completion_request(std::string_view body, const SchemaLimits& lim);
ChatSpec parse_chat_request(std::string_view body, const SchemaLimits& lim);
SglangSpec parse_sglang_generate(std::string_view body, const SchemaLimits& lim);
TokenizeSpec parse_tokenize_request(std::string_view body);
std::vector<int32_t> parse_detokenize_request(std::string_view body, const SchemaLimits& lim);

}  // namespace ft::gateway
