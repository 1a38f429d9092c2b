#pragma once
// The CPU expert tier on one host: the exact kernels (SegmentExperts) on an attached segment,
// answering the shared-memory ring. flashtier-cpu-expert-worker runs one (beside its gRPC
// service); the GPU tests and the expert-tier benchmark run one in-process on a segment of their
// own, so the gpu-worker side talks to the real ring and the real kernels.
#include <memory>
#include <string>

#include "cpu-expert-worker/expert_engine.h"
#include "shared/ipc/expert_segment.h"
#include "shared/ipc/ring_server.h"

namespace ft::cew {

class RingTier {
 public:
  // `ring` "none": kernels only (the gRPC service's). Maps the whole segment into this process's
  // page tables first (ipc::prefault_read), so no expert pays first-touch faults while serving.
  // Throws ft::Error when the ring is owned by a live server.
  RingTier(const ipc::ExpertSegment& seg, float swiglu_limit, int threads, const std::string& ring,
           const ipc::RingConfig& rc, const ipc::RingServerOptions& ro = {});
  ~RingTier();
  RingTier(const RingTier&) = delete;
  RingTier& operator=(const RingTier&) = delete;

  SegmentExperts& engine() { return engine_; }
  bool has_ring() const { return ring_ != nullptr; }
  const ipc::RingServer* ring() const { return ring_.get(); }
  double prefault_seconds() const { return prefault_s_; }
  // Stops answering (clients waiting fail at once); the ring stays for a restarted server.
  void stop();
  // Stops and unmaps the ring (the caller may then remove it by name).
  void close_ring() { ring_.reset(); }

 private:
  SegmentExperts engine_;
  std::unique_ptr<ipc::RingServer> ring_;
  double prefault_s_ = 0;
};

}  // namespace ft::cew
