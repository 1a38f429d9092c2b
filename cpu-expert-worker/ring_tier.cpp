#include "cpu-expert-worker/ring_tier.h"

#include "shared/ipc/shm.h"

namespace ft::cew {

RingTier::RingTier(const ipc::ExpertSegment& seg, float swiglu_limit, int threads, const std::string& ring,
                   const ipc::RingConfig& rc, const ipc::RingServerOptions& ro)
    : engine_(seg, swiglu_limit, threads) {
  prefault_s_ = ipc::prefault_read(seg.data(), seg.size(), threads);
  if (ring == "none") return;
  ring_ = std::make_unique<ipc::RingServer>(
      ring, rc, engine_.info(), [this](const ipc::ExpertBatch& b, float* out) { engine_.compute(b, out); }, ro);
}

RingTier::~RingTier() { stop(); }

void RingTier::stop() {
  if (ring_) ring_->stop();
}

}  // namespace ft::cew
