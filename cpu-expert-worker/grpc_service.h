#pragma once
// The ExpertTier gRPC service (proto/flashtier/experts.proto): Info, and the bidirectional Compute
// stream for gpu-workers on other hosts. It answers Info while the segment is still loading and
// rejects Compute requests until the engine is there.
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "cpu-expert-worker/expert_engine.h"
#include "cpu-expert-worker/segment_builder.h"
#include "proto/flashtier/experts.grpc.pb.h"

namespace ft::cew {

// What the service reports and serves with; the worker fills it in as it starts.
struct WorkerState {
  std::atomic<ExpertEngine*> engine{nullptr};  // null until the segment is ready
  std::atomic<bool> stopping{false};
  LoadProgress progress;
  ipc::TierInfo info;  // model description (known from config.json before the load)
  std::string ring_name;
  std::string host_id;
  uint32_t threads = 0;
  uint32_t layout_version = 0;
};

class ExpertTierService final : public flashtier::experts::v1::ExpertTier::Service {
 public:
  explicit ExpertTierService(WorkerState& st) : st_(st) {}

  grpc::Status Info(grpc::ServerContext*, const flashtier::experts::v1::InfoRequest*,
                    flashtier::experts::v1::InfoResponse* resp) override;
  grpc::Status Compute(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<flashtier::experts::v1::ExpertResponse, flashtier::experts::v1::ExpertRequest>* stream)
      override;

  // One request → one response (error text in `error`, never an exception). Public for tests.
  void answer(const flashtier::experts::v1::ExpertRequest& req, flashtier::experts::v1::ExpertResponse& resp);

 private:
  WorkerState& st_;
};

}  // namespace ft::cew
