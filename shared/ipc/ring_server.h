#pragma once
// Server side of the co-located expert transport (layout and protocol: ring_layout.h). One
// dispatcher thread polls the channels, spinning for `spin` after the last request and then
// sleeping on the doorbell futex; a heartbeat thread publishes liveness for clients in other pid
// namespaces.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shared/core/cpu_relax.h"
#include "shared/ipc/expert_batch.h"
#include "shared/ipc/shm.h"

namespace ft::ipc {

struct RingConfig {
  uint32_t channels = 8;      // concurrent clients (gpu-workers on this host)
  uint32_t max_tokens = 256;  // per request; clients split larger batches (results are per token)
  uint32_t max_slots = 16;    // experts per token
};

// What one channel's client got from this server (since the server started).
struct ChannelStats {
  uint32_t channel = 0;
  uint32_t owner_pid = 0;   // 0: free (pid in the client's namespace)
  uint64_t requests = 0, failed = 0, tokens = 0;
  uint64_t busy_ns = 0;     // computing its requests
  uint64_t wait_ns = 0;     // posted → picked up (behind other clients' requests or a sleeping server)
};

struct RingServerOptions {
  std::chrono::microseconds spin = kTierSpin;     // busy-poll after the last request before sleeping
  std::chrono::milliseconds heartbeat_period{5};
};

class RingServer {
 public:
  // handler(batch, out[n_tokens·hidden]) throws ft::Error (or any std::exception) to reject a batch;
  // the message goes back to the client.
  using Handler = std::function<void(const ExpertBatch&, float*)>;

  // Creates ring `name` or takes over one left by a server that is gone (same geometry: reused in
  // place, so clients only need to re-claim a channel; else recreated). Throws ft::Error when a
  // live server owns it.
  RingServer(const std::string& name, const RingConfig& cfg, const TierInfo& info, Handler handler,
             const RingServerOptions& opts = {});
  ~RingServer();
  RingServer(const RingServer&) = delete;
  RingServer& operator=(const RingServer&) = delete;

  // Marks the ring stopped (waiting clients fail at once), finishes the request in progress and
  // joins the threads. The segment stays, so a restarted server takes it over.
  void stop();

  const std::string& name() const { return shm_.name(); }
  uint64_t requests() const { return requests_.load(std::memory_order_relaxed); }
  uint32_t epoch() const;
  // Per channel, in channel order.
  std::vector<ChannelStats> channel_stats() const;

  static bool remove(const std::string& name) { return ShmMapping::remove(name); }

 private:
  void dispatch_loop();
  void heartbeat_loop();
  bool serve_pending();

  ShmMapping shm_;
  RingConfig cfg_;
  RingServerOptions opts_;
  Handler handler_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> requests_{0};
  uint32_t next_ = 0;  // the channel a pass starts at: the one after the last served
  mutable std::mutex stats_mu_;
  std::vector<ChannelStats> stats_;
  std::thread dispatcher_, heartbeat_;
};

}  // namespace ft::ipc
