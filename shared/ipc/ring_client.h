#pragma once
// Client side of the co-located expert transport (layout and protocol: ring_layout.h): claims a
// channel of ring `name` and exchanges one batch at a time with the cpu-expert-worker.
#include <chrono>
#include <cstdint>
#include <string>

#include "shared/core/cpu_relax.h"
#include "shared/core/error.h"
#include "shared/ipc/expert_batch.h"
#include "shared/ipc/shm.h"

namespace ft::ipc {

// The connection is gone (worker died, stopped, restarted, or did not answer in time). The client
// object is unusable afterwards; connect again.
class PeerLost : public Error {
 public:
  using Error::Error;
};

struct RingClientOptions {
  std::chrono::microseconds spin = kTierSpin;  // busy-wait for the answer before sleeping on the futex
  std::chrono::milliseconds timeout{30000};  // whole request
  std::chrono::milliseconds check_every{10}; // futex sleep slice between liveness checks
  // A worker in another pid namespace is judged by its heartbeat (it beats every 5 ms). 100 ms
  // proved too short on a loaded 2-core host: CI's compose test once saw a live worker's
  // heartbeat thread descheduled for 101 ms and answered a user 503 (session 16). 250 ms still
  // finds a frozen worker well inside the 400 ms the ring test allows.
  std::chrono::milliseconds stale_after{250};
};

class RingClient {
 public:
  // Opens the ring and claims a free channel. Throws PeerLost when there is no ring, no live server
  // or no free channel.
  explicit RingClient(const std::string& name, const RingClientOptions& opts = {});
  ~RingClient();
  RingClient(const RingClient&) = delete;
  RingClient& operator=(const RingClient&) = delete;

  const TierInfo& info() const { return info_; }
  uint32_t channel() const { return index_; }
  uint32_t max_tokens() const { return max_tokens_; }

  // out: [n_tokens, hidden]. Batches above max_tokens are sent in pieces (results are per token).
  // Throws PeerLost for a transport failure and ft::Error when the worker rejected the batch (the
  // connection stays usable then).
  void call(const ExpertBatch& b, float* out);

  // Throws PeerLost unless the server is alive and still the one this client joined.
  void check_peer() const;

 private:
  void call_piece(const ExpertBatch& b, float* out);
  void release();

  ShmMapping shm_;
  RingClientOptions opts_;
  TierInfo info_;
  uint32_t index_ = 0, epoch_ = 0, max_tokens_ = 0, max_slots_ = 0;
  uint64_t token_ = 0, seq_ = 0;
  bool broken_ = false;
};

}  // namespace ft::ipc
