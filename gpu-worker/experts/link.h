#pragma once
// One live connection to a cpu-expert-worker, whatever carries it.
#include <string>

#include "shared/ipc/expert_batch.h"

namespace ft::experts {

class Link {
 public:
  virtual ~Link() = default;
  // Throws ipc::PeerLost when the connection is gone (the link is then dead), ft::Error when the
  // worker rejected the batch (the link stays usable).
  virtual void call(const ipc::ExpertBatch& b, float* out) = 0;
  virtual const ipc::TierInfo& info() const = 0;
  virtual std::string name() const = 0;  // "shm:<ring>" / "grpc:<host:port>"
};

}  // namespace ft::experts
