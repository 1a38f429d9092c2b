#include "gateway/metrics.h"

#include <algorithm>
#include <cstdio>

namespace ft::gateway {
namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void header(std::string& out, std::string_view name, std::string_view help, std::string_view type) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void scalar(std::string& out, std::string_view name, std::string_view help, std::string_view type, double v) {
  header(out, name, help, type);
  out.append(name).append(" ").append(num(v)).append("\n");
}

std::vector<double> latency_buckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5,
          0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0};
}
std::vector<double> length_buckets() {
  return {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144};
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v, uint64_t times) {
  if (times == 0) return;
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  std::lock_guard lk(mu_);
  counts_[i] += times;
  sum_ += v * static_cast<double>(times);
  count_ += times;
}

uint64_t Histogram::count() const {
  std::lock_guard lk(mu_);
  return count_;
}

void Histogram::render(std::string& out, std::string_view name, std::string_view help) const {
  std::lock_guard lk(mu_);
  header(out, name, help, "histogram");
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out.append(name).append("_bucket{le=\"").append(num(bounds_[i])).append("\"} ").append(std::to_string(cum)).append("\n");
  }
  cum += counts_.back();
  out.append(name).append("_bucket{le=\"+Inf\"} ").append(std::to_string(cum)).append("\n");
  out.append(name).append("_sum ").append(num(sum_)).append("\n");
  out.append(name).append("_count ").append(std::to_string(count_)).append("\n");
}

Metrics::Metrics()
    : ttft(latency_buckets()), inter_token(latency_buckets()), e2e(latency_buckets()),
      prompt_len(length_buckets()), completion_len(length_buckets()) {}

void Metrics::count_request(std::string_view endpoint, int status) {
  std::lock_guard lk(mu_);
  ++requests_[{std::string(endpoint), status}];
}

uint64_t Metrics::requests(std::string_view endpoint, int status) const {
  std::lock_guard lk(mu_);
  auto it = requests_.find({std::string(endpoint), status});
  return it == requests_.end() ? 0 : it->second;
}

std::string Metrics::render() const {
  std::string out;
  out.reserve(8192);
  {
    std::lock_guard lk(mu_);
    header(out, "flashtier_gateway_requests_total", "HTTP requests by endpoint and status code.", "counter");
    for (const auto& [k, v] : requests_)
      out.append("flashtier_gateway_requests_total{endpoint=\"").append(k.first).append("\",status=\"")
          .append(std::to_string(k.second)).append("\"} ").append(std::to_string(v)).append("\n");
  }
  scalar(out, "flashtier_gateway_prompt_tokens_total", "Prompt tokens sent to workers.", "counter", double(prompt_tokens.load()));
  scalar(out, "flashtier_gateway_generation_tokens_total", "Tokens received from workers.", "counter", double(generation_tokens.load()));
  scalar(out, "flashtier_gateway_cached_prompt_tokens_total", "Prompt tokens served from a worker prefix cache.", "counter",
         double(cached_prompt_tokens.load()));
  scalar(out, "flashtier_gateway_streams_started_total", "Generate streams opened to workers.", "counter", double(streams_started.load()));
  scalar(out, "flashtier_gateway_streams_cancelled_total",
         "Generate streams cancelled by the gateway (client gone, stop string, tool_choice).", "counter",
         double(streams_cancelled.load()));
  scalar(out, "flashtier_gateway_client_disconnects_total", "Clients that went away before their response ended.", "counter",
         double(client_disconnects.load()));
  scalar(out, "flashtier_gateway_rejected_queue_full_total", "Requests answered 429 because the queue was full.", "counter",
         double(rejected_queue_full.load()));
  scalar(out, "flashtier_gateway_queue_depth", "Generate streams sent to a worker that have no token yet.", "gauge",
         double(streams_waiting.load()));
  scalar(out, "flashtier_gateway_running", "Generate streams producing tokens.", "gauge", double(streams_running.load()));
  scalar(out, "flashtier_gateway_http_connections", "Open HTTP connections.", "gauge", double(http_connections.load()));
  ttft.render(out, "flashtier_gateway_time_to_first_token_seconds", "Request arrival to first token, per stream.");
  inter_token.render(out, "flashtier_gateway_inter_token_latency_seconds", "Time between consecutive tokens of a stream.");
  e2e.render(out, "flashtier_gateway_e2e_request_latency_seconds", "Request arrival to last token, per stream.");
  prompt_len.render(out, "flashtier_gateway_prompt_length_tokens", "Prompt length per stream.");
  completion_len.render(out, "flashtier_gateway_completion_length_tokens", "Generated tokens per stream.");
  return out;
}

}  // namespace ft::gateway
