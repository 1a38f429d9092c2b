#pragma once
// Runs one generation request: one Generate stream per choice on the worker pool, their token
// messages funnelled onto the connection's strand, SSE keep-alive comments while nothing
// arrives, and cancellation of every stream the moment the client goes away (a concurrent read
// on the socket fires it; the token path never waits on a check).
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gateway/api_error.h"
#include "gateway/app.h"
#include "gateway/choice_output.h"
#include "gateway/http_exchange.h"
#include "proto/flashtier/generate.pb.h"

namespace ft::gateway {

struct ChoiceFinish {
  std::string reason;  // "stop" or "length"
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
  uint32_t cached_tokens = 0;
};

class GenerationListener {
 public:
  virtual ~GenerationListener() = default;
  // Streaming: events right after the headers (role chunks).
  virtual void on_start(std::string& out) {}
  // New output of a choice. Return an error to abort the whole request (every stream is cancelled).
  virtual std::optional<ApiError> on_step(int choice, ChoiceStep& step, ChoiceOutput& co, std::string& out) = 0;
  virtual std::optional<ApiError> on_finish(int choice, const ChoiceFinish& f, ChoiceOutput& co, std::string& out) = 0;
  // Streaming: all choices done; final events (usage, [DONE]).
  virtual void on_end(std::string& out) {}
  // Streaming: the request failed after the headers went out (error event, then [DONE]).
  virtual void on_error(const ApiError& e, std::string& out);
};

struct GenerationPlan {
  std::vector<flashtier::v1::GenerateRequest> requests;  // one per choice
  std::vector<ChoiceOutput::Options> outputs;            // one per choice
  bool stream = false;
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
};

struct GenerationOutcome {
  enum Kind { Completed, ClientGone, Failed } kind = Completed;
  std::optional<ApiError> error;  // Failed: answer it (when !responded) — already sent when streaming
};

asio::awaitable<GenerationOutcome> run_generation(App& app, HttpExchange& ex, GenerationPlan plan,
                                                  GenerationListener& listener);

// gRPC status code of a worker call → the error a client gets.
ApiError worker_error(int grpc_code, const std::string& message);

}  // namespace ft::gateway

#include <set>

#include "gateway/openai_schema.h"

namespace ft::gateway {

// One GenerateRequest per (prompt, n) pair, in that order, with the request's sampling and stop
// settings. `keep_special` lists special ids the output parser needs to see.
GenerationPlan make_plan(const App& app, const CommonFields& c, const std::vector<std::vector<int32_t>>& prompts,
                         const std::string& request_id, const std::set<int32_t>& keep_special = {});

// Prompt and max_tokens against the workers' context length; `prompt_param` names the field.
std::optional<ApiError> check_context(const App& app, const std::vector<std::vector<int32_t>>& prompts,
                                      std::optional<uint32_t> max_tokens, const std::string& prompt_param,
                                      const std::string& max_tokens_param);

}  // namespace ft::gateway
