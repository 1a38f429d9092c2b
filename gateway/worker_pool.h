#pragma once
// The gpu-workers behind this gateway: one gRPC channel each, a polling thread that keeps their
// health, model info and scheduler stats fresh, and Generate streams through the callback API
// (no thread per stream). New streams go to the ready worker with the fewest outstanding streams.
// Workers are fixed addresses and/or every address a DNS name resolves to (re-resolved by the
// polling thread: compose `--scale gpu-worker=N`, a Kubernetes headless Service).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "proto/flashtier/generate.pb.h"

namespace grpc {
class ChannelCredentials;
}

namespace ft::gateway {

// One message of a Generate stream, or its end.
struct GenerateEvent {
  flashtier::v1::GenerateResponse msg;  // valid when !ended
  bool ended = false;                   // the call is over; status_code says how (0 = OK)
  int status_code = 0;                  // grpc::StatusCode
  std::string status_message;
};
// Called on gRPC threads, in stream order, ending with exactly one `ended` event.
using EventSink = std::function<void(GenerateEvent&&)>;

class GenerateCall {
 public:
  virtual ~GenerateCall() = default;
  // Thread-safe and idempotent; the worker sees CANCELLED and frees the slot.
  virtual void cancel() = 0;
  virtual const std::string& worker() const = 0;
};

struct WorkerSnapshot {
  std::string address;
  bool ready = false;
  std::string state;   // SERVING, LOADING, NOT_SERVING, UNREACHABLE, UNKNOWN
  std::string detail;
  int outstanding = 0;
  uint64_t streams_total = 0;
  uint32_t running = 0;  // from the worker's Stats
  uint32_t waiting = 0;
  uint64_t worker_cancelled = 0;
  std::vector<std::pair<std::string, uint64_t>> memory;  // per category (VRAM on the CUDA backend)
  std::vector<std::pair<std::string, uint64_t>> counters;  // the worker's backend counters
  uint64_t prefix_hits = 0, prefix_misses = 0, prefix_tokens_saved = 0, prefix_bytes = 0, prefix_evictions = 0;
};

struct WorkerPoolOptions {
  std::vector<std::string> dns_names;        // HOST:PORT: one worker per address HOST resolves to
  std::chrono::milliseconds dns_interval{2000};
  std::chrono::seconds request_deadline{0};  // deadline of each Generate call (0: none)
  // TLS to the workers: PEM file paths; empty ca = plaintext. cert+key = mutual TLS.
  std::string tls_ca, tls_cert, tls_key, tls_name;
};

class WorkerPool {
 public:
  // Throws std::runtime_error when a TLS file cannot be read.
  WorkerPool(std::vector<std::string> addresses, std::chrono::milliseconds poll_interval, WorkerPoolOptions opts = {});
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void start();  // polling thread (first poll happens at once)
  void stop();

  // Ends every running stream now, each with an UNAVAILABLE `why` (the client gets an error event
  // and [DONE]), and refuses new ones with `why`: the drain timeout's last step.
  void abort_all(const std::string& why);
  const std::string* abort_reason() const;  // set once abort_all ran

  // Opens a Generate stream on the least-loaded ready worker. nullptr (with *why set) when no
  // worker is ready.
  std::shared_ptr<GenerateCall> generate(const flashtier::v1::GenerateRequest& req, EventSink sink, std::string* why);

  bool any_ready() const;
  int outstanding() const;
  // Model info of a ready worker (the first one that answered).
  std::optional<flashtier::v1::ModelInfoResponse> model_info() const;
  std::vector<WorkerSnapshot> snapshot() const;
  std::string render_metrics() const;
  // A stream failed with UNAVAILABLE: take the worker out until the next good poll.
  void mark_unreachable(const std::string& address, const std::string& detail);
  // Polls now (synchronously); for tests and startup.
  void poll_once();

  struct Worker;

 private:
  void poll_loop();
  std::shared_ptr<Worker> make_worker(const std::string& address, const std::string& origin) const;
  void resolve_dns();  // adds workers for new addresses of dns_names, drops vanished ones
  std::vector<std::shared_ptr<Worker>> workers() const;  // a snapshot of the current set

  WorkerPoolOptions opts_;
  std::shared_ptr<grpc::ChannelCredentials> creds_;
  mutable std::mutex list_mu_;  // guards workers_ (the set changes when DNS answers change)
  std::vector<std::shared_ptr<Worker>> workers_;
  std::chrono::steady_clock::time_point next_dns_{};
  mutable std::mutex live_mu_;  // guards live_, aborting_, abort_reason_
  std::vector<std::weak_ptr<GenerateCall>> live_;  // running streams, for abort_all
  bool aborting_ = false;
  std::string abort_reason_;
  std::chrono::milliseconds interval_;
  std::atomic<uint64_t> rr_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread poller_;
  std::optional<flashtier::v1::ModelInfoResponse> info_;
};

}  // namespace ft::gateway
