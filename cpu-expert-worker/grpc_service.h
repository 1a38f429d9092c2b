#pragma once
// The ExpertTier gRPC service (proto/flashtier/experts.proto): Info, and the bidirectional Compute
// stream for gpu-workers on other hosts. It answers Info while the segment is still loading and
// rejects Compute requests until the engine is there.
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "cpu-expert-worker/expert_engine.h"
#include "cpu-expert-worker/segment_builder.h"
#include "proto/flashtier/experts.grpc.pb.h"
#include "shared/ipc/ring_server.h"

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
  // The ring server while it runs (Stats reads its per-channel figures); set and cleared under
  // ring_mu, so Stats never reads a ring that is being closed.
  std::mutex ring_mu;
  const ipc::RingServer* ring = nullptr;
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

  grpc::Status Stats(grpc::ServerContext*, const flashtier::experts::v1::StatsRequest*,
                     flashtier::experts::v1::StatsResponse* resp) override;
  // One request → one response (error text in `error`, never an exception). Public for tests.
  void answer(const flashtier::experts::v1::ExpertRequest& req, flashtier::experts::v1::ExpertResponse& resp);

 private:
  struct StreamStats {
    std::string peer;
    uint64_t requests = 0, failed = 0, tokens = 0;
    uint64_t busy_ns = 0;
  };
  WorkerState& st_;
  std::mutex streams_mu_;
  std::map<uint64_t, StreamStats> streams_;  // open Compute streams
  uint64_t next_stream_ = 0;
};

}  // namespace ft::cew
