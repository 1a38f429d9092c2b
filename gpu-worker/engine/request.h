#pragma once
// One generation request as the scheduler sees it, and the thread-safe stream of events it
// sends back to whoever waits on it (the gRPC handler).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shared/sampling/sampler.h"
#include "shared/sampling/token_constraint.h"

namespace ft::worker {

struct GenerationParams {
  SamplingConfig sampling;
  uint32_t max_new_tokens = 0;  // 0: up to the context limit
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool logprobs = false;
  uint32_t top_logprobs = 0;
  // Constraints (the scheduler combines them into the sequence's TokenConstraint).
  std::shared_ptr<TokenMatcher> grammar;  // null: none
  uint32_t min_tokens = 0;
  std::vector<std::pair<int32_t, float>> logit_bias;
  bool constrained() const { return grammar || min_tokens > 0 || !logit_bias.empty(); }
};

struct TokenEvent {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
};

enum class Finish { Stop, Length };

struct Outcome {
  Finish reason = Finish::Stop;
  int32_t stop_token = -1;
  uint32_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  std::string error;  // non-empty: the request failed (e.g. the expert tier went away)
};

class RequestStream {
 public:
  void push(TokenEvent e) {
    {
      std::lock_guard<std::mutex> l(m_);
      tokens_.push_back(std::move(e));
    }
    cv_.notify_all();
  }
  void finish(Outcome o) {
    {
      std::lock_guard<std::mutex> l(m_);
      outcome_ = std::move(o);
    }
    cv_.notify_all();
  }
  // Waits up to `timeout` for news; moves new tokens into `out`; returns the outcome once the
  // request is finished and every token before it has been taken.
  std::optional<Outcome> wait(std::vector<TokenEvent>& out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> l(m_);
    cv_.wait_for(l, timeout, [&] { return !tokens_.empty() || outcome_.has_value(); });
    for (auto& t : tokens_) out.push_back(std::move(t));
    tokens_.clear();
    return outcome_;
  }
  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<TokenEvent> tokens_;
  std::optional<Outcome> outcome_;
  std::atomic<bool> cancelled_{false};
};

struct Request {
  std::string id;
  std::vector<int32_t> prompt;
  GenerationParams params;
  std::shared_ptr<RequestStream> stream = std::make_shared<RequestStream>();
};

}  // namespace ft::worker
