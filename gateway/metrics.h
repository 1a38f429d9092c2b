#pragma once
// Gateway metrics in Prometheus text exposition format (hand-written; prometheus-cpp is not
// packaged). Counters and gauges are atomics; histograms take a short lock per observation.
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ft::gateway {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v, uint64_t times = 1);
  void render(std::string& out, std::string_view name, std::string_view help) const;
  uint64_t count() const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();

  void count_request(std::string_view endpoint, int status);
  uint64_t requests(std::string_view endpoint, int status) const;

  std::atomic<uint64_t> prompt_tokens{0};
  std::atomic<uint64_t> generation_tokens{0};
  std::atomic<uint64_t> cached_prompt_tokens{0};
  std::atomic<uint64_t> streams_started{0};
  std::atomic<uint64_t> streams_cancelled{0};     // by the gateway: client gone, stop string, tool_choice
  std::atomic<uint64_t> client_disconnects{0};
  std::atomic<uint64_t> rejected_queue_full{0};
  std::atomic<int64_t> streams_waiting{0};        // sent to a worker, no token yet
  std::atomic<int64_t> streams_running{0};        // producing tokens
  std::atomic<int64_t> http_connections{0};

  Histogram ttft;            // request start -> first token, seconds
  Histogram inter_token;     // gap between consecutive tokens of a stream, seconds
  Histogram e2e;             // request start -> last token, seconds
  Histogram prompt_len;      // tokens
  Histogram completion_len;  // tokens

  // The gateway's own metrics; the caller appends worker gauges.
  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
};

}  // namespace ft::gateway
