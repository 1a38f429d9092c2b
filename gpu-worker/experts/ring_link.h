#pragma once
#include <chrono>
#include <memory>

#include "gpu-worker/experts/link.h"
#include "shared/ipc/ring_client.h"

namespace ft::experts {

class RingLink : public Link {
 public:
  RingLink(const std::string& ring, const ipc::RingClientOptions& opts) : client_(ring, opts), ring_(ring) {}
  void call(const ipc::ExpertBatch& b, float* out) override { client_.call(b, out); }
  const ipc::TierInfo& info() const override { return client_.info(); }
  std::string name() const override { return "shm:" + ring_; }

 private:
  ipc::RingClient client_;
  std::string ring_;
};

}  // namespace ft::experts
