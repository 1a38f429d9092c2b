#pragma once
// Enforced tool calls in GLM's text format (glm-chat-format.md §3):
//   <tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n…</tool_call>
// where the tags are the tokenizer's added tokens and each value follows its parameter's schema
// (json_schema.h: raw text for "type": "string", JSON otherwise). tool_choice "required" allows
// any of the tools, a named choice only that one; parallel_tool_calls false means exactly one call.
#include <string>
#include <string_view>

#include "shared/grammar/grammar.h"

namespace ft::grammar {

struct ToolCallOptions {
  std::string tools_json;  // the OpenAI `tools` array
  std::string function;    // empty: any of the tools
  bool single_call = false;
};

// Adds the rules and returns the rule matching one or more calls.
int32_t tool_calls_rule(Grammar& g, const ToolCallOptions& o);

}  // namespace ft::grammar
