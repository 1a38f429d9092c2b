#pragma once
// Anthropic Messages API (POST /v1/messages) requests, validated and mapped onto the chat
// pipeline's ChatSpec: system prompt, text/thinking/tool_use/tool_result blocks and tools become
// the OpenAI-shaped messages and tools the chat template renders. Errors in Anthropic's shape
// {"type": "error", "error": {"type", "message"}}; the message names the field.
#include <string>
#include <string_view>

#include "gateway/api_error.h"
#include "gateway/openai_schema.h"

namespace ft::gateway {

struct AnthropicSpec {
  ChatSpec chat;  // n = 1; template_request holds OpenAI-shaped messages
  // thinking.type "enabled" (or "adaptive"): the model reasons and the reply carries thinking
  // blocks. Off by default, as in Anthropic's API (the prompt then closes GLM's <think>).
  bool thinking = false;
};

// /v1/messages. `for_count` (count_tokens): max_tokens is not required.
AnthropicSpec parse_anthropic_request(std::string_view body, const SchemaLimits& lim, bool for_count = false);

bool is_anthropic_path(std::string_view path);
// Anthropic's error type for an HTTP status (invalid_request_error, authentication_error, ...).
const char* anthropic_error_type(int status);
std::string anthropic_error_json(const ApiError& e);

}  // namespace ft::gateway
