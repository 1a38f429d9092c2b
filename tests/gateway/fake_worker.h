#pragma once
// A real gRPC server implementing flashtier.v1.Generation with scripted tokens, for gateway tests
// and the gateway benchmark: per-request scripts, delays, errors, health states, and a record of
// requests and cancellations (with timestamps, to time cancellation).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "proto/flashtier/generate.pb.h"

namespace ft::test {

struct FakeScript {
  std::vector<int32_t> tokens;                  // the continuation to stream
  int tokens_per_message = 1;
  std::chrono::microseconds first_delay{0};     // before the first message (prefill)
  std::chrono::microseconds delay{0};           // between messages
  int grpc_error = 0;                           // nonzero: fail with this status...
  int error_after = 0;                          // ...after this many tokens
  bool finish_without_reason = false;           // end the stream without a `finished` message
};

class FakeWorker {
 public:
  using Clock = std::chrono::steady_clock;
  // Listens on HOST:PORT (port 0 picks one; several fakes on one port need distinct 127.x hosts).
  explicit FakeWorker(std::string model_name = "fake-model", std::string host = "127.0.0.1", int port = 0);
  ~FakeWorker();

  std::string address() const;  // HOST:PORT
  int port() const;
  void set_script(std::function<FakeScript(const flashtier::v1::GenerateRequest&)> f);
  void set_script(FakeScript s);
  void set_health(int status);  // flashtier::v1::HealthResponse::Status
  void set_context_length(uint32_t n);
  void set_eos(std::vector<int32_t> eos);
  void set_cached_tokens(uint32_t n);
  void shutdown();  // stop serving (a worker that went down)

  std::vector<flashtier::v1::GenerateRequest> requests() const;
  int generate_calls() const { return calls_.load(); }
  int active() const { return active_.load(); }
  int cancelled() const { return cancelled_.load(); }
  std::vector<Clock::time_point> cancel_times() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  std::atomic<int> calls_{0}, active_{0}, cancelled_{0};
  friend struct Impl;
};

}  // namespace ft::test
