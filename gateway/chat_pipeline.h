#pragma once
// The chat pipeline every chat-shaped endpoint shares (OpenAI /v1/chat/completions, Anthropic
// /v1/messages): a validated ChatSpec in, the rendered and tokenized prompt, the output parser's
// options and the worker plan out. Each endpoint only maps its own request and response shapes.
#include <functional>
#include <memory>
#include <string>

#include "gateway/app.h"
#include "gateway/generation.h"
#include "gateway/openai_schema.h"
#include "shared/text/glm_parser.h"

namespace ft::gateway {

struct PreparedChat {
  ChatSpec spec;
  std::string id;
  text::GlmParseOptions parse;
  GenerationPlan plan;
  size_t prompt_tokens = 0;
};

// Renders spec.template_request with the model's chat template, tokenizes it, checks the
// context, and plans the generation. Throws ApiError; `max_tokens_param` names the field a
// context overflow is blamed on. `id_prefix` starts the request id ("chatcmpl-", "msg_").
std::unique_ptr<PreparedChat> prepare_chat_spec(App& app, ChatSpec spec, const std::string& max_tokens_param,
                                                const char* id_prefix);

// The rendered prompt's token ids (what prepare_chat_spec generates from), for token counting.
std::vector<int32_t> chat_prompt_ids(const App& app, const ChatSpec& spec);

}  // namespace ft::gateway
