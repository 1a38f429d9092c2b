#pragma once
// The gpu-worker's ExpertBackend for a cpu-expert-worker:
//
//   auto experts = ft::RemoteExperts::create("auto:10.0.0.5:50071",
//                                            ft::RemoteExpertsOptions::for_model(cfg));
//   ReferenceEngine eng(weights, experts.get());
//
// Addresses: shm:<ring> (worker on this host, shared-memory ring), grpc:<host:port> (anywhere),
// auto:<host:port> (asks Info; takes the worker's ring when it runs on this host and the ring is
// reachable, gRPC otherwise).
//
// The connection is made at the first compute(). When the worker is down, dies or does not answer
// in time, compute() throws ft::Error saying so; the next compute() reconnects (at most one attempt
// per `retry_every`, failing fast in between), so the caller fails the requests in flight and keeps
// serving until the worker is back.
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu-worker/experts/address.h"
#include "shared/core/cpu_relax.h"
#include "shared/engine/expert_backend.h"
#include "shared/ipc/expert_batch.h"
#include "shared/model/config.h"

namespace ft {

namespace experts {
class Link;
}

struct RemoteExpertsOptions {
  std::chrono::milliseconds timeout{30000};          // one compute() call
  std::chrono::milliseconds connect_timeout{2000};   // reaching a gRPC worker
  std::chrono::milliseconds retry_every{200};        // reconnect attempts while the worker is down
  std::chrono::microseconds ring_spin = kTierSpin;  // busy-wait on the ring before sleeping
  // What the worker must serve (0 / empty: not checked). A mismatch fails the connection, so a
  // worker started on another model can never feed wrong experts into this one.
  uint32_t hidden = 0, n_experts = 0;
  std::vector<uint32_t> moe_layers;
  std::string fingerprint;

  static RemoteExpertsOptions for_model(const ModelConfig& cfg);
};

class RemoteExperts : public ExpertBackend {
 public:
  // Throws ft::Error for a malformed address; does not connect yet.
  static std::unique_ptr<RemoteExperts> create(const std::string& address, const RemoteExpertsOptions& opts = {});
  ~RemoteExperts() override;

  // a: [n, hidden]; out: [n, hidden] ← Σ_k w_k·Expert_k(a_t). Throws ft::Error when the tier is
  // unavailable, times out, or rejects the batch.
  void compute(int64_t layer, const float* a, int64_t n, const std::vector<Routing>& routes, float* out,
               exl3::Operands operands) override;

  // Connects if not connected; throws ft::Error with the reason when the tier is unavailable.
  void connect();
  // Connected, or connects now; false (no exception) when the tier is unavailable.
  bool healthy() override;
  bool connected() const;
  // "shm:<ring>" or "grpc:<host:port>" of the live connection, "" when none.
  std::string transport() const;
  ipc::TierInfo info() const;  // of the live connection (empty when none)
  const ExpertAddress& address() const { return addr_; }

 private:
  RemoteExperts(ExpertAddress addr, RemoteExpertsOptions opts);
  void connect_locked();
  std::unique_ptr<experts::Link> open_link();
  void check_model(const ipc::TierInfo& info) const;

  ExpertAddress addr_;
  RemoteExpertsOptions opts_;
  mutable std::mutex mu_;
  std::unique_ptr<experts::Link> link_;
  std::chrono::steady_clock::time_point last_failure_{};
  std::string last_error_;
  std::vector<int32_t> ids_;
  std::vector<float> weights_;
};

}  // namespace ft
