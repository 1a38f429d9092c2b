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

// Answers an ApiError (unless headers already went out); returns its status.
asio::awaitable<int> respond_error(HttpExchange& ex, const ApiError& e);
std::string new_request_id(App& app, const char* prefix);

}  // namespace ft::gateway
