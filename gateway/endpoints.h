#pragma once
// HTTP endpoints. Each returns the status code it answered with (for metrics).
#include "gateway/api_error.h"
#include "gateway/app.h"
#include "gateway/http_exchange.h"

namespace ft::gateway {

// routes.cpp: authentication, routing, the small endpoints.
asio::awaitable<int> handle_request(App& app, HttpExchange& ex);
// openai_endpoints.cpp
asio::awaitable<int> handle_completions(App& app, HttpExchange& ex);
asio::awaitable<int> handle_chat_completions(App& app, HttpExchange& ex);
// sglang_endpoints.cpp
asio::awaitable<int> handle_sglang_generate(App& app, HttpExchange& ex);
// anthropic_endpoints.cpp: POST /v1/messages, POST /v1/messages/count_tokens
asio::awaitable<int> handle_anthropic_messages(App& app, HttpExchange& ex);
asio::awaitable<int> handle_anthropic_count_tokens(App& app, HttpExchange& ex);
struct GenerationOutcome;
// Answers a finished generation: `body` (the non-streaming response) when it completed, the error
// when it failed before the headers went out; returns the status (499: client gone).
asio::awaitable<int> finish_outcome(HttpExchange& ex, const GenerationOutcome& o, std::string body);

// Answers an ApiError (unless headers already went out), shaped for the endpoint's protocol
// (Anthropic's under /v1/messages, OpenAI's elsewhere); returns its status.
asio::awaitable<int> respond_error(HttpExchange& ex, const ApiError& e);
std::string new_request_id(App& app, const char* prefix);

}  // namespace ft::gateway
