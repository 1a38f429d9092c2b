#pragma once
// The gRPC transport: one Compute stream kept open per link, one request in flight. A watchdog
// cancels the stream when an answer is late, so a hung or unreachable worker costs at most the
// timeout.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "gpu-worker/experts/link.h"
#include "proto/flashtier/experts.grpc.pb.h"

namespace ft::experts {

// Info of the worker at `target` over a fresh channel; throws ipc::PeerLost when unreachable.
flashtier::experts::v1::InfoResponse fetch_info(const std::string& target, std::chrono::milliseconds timeout);
ipc::TierInfo to_tier_info(const flashtier::experts::v1::InfoResponse& r);

class GrpcLink : public Link {
 public:
  // Connects, asks Info (the tier must be ready) and opens the stream. Throws ipc::PeerLost.
  GrpcLink(const std::string& target, std::chrono::milliseconds connect_timeout, std::chrono::milliseconds timeout);
  ~GrpcLink() override;

  void call(const ipc::ExpertBatch& b, float* out) override;
  const ipc::TierInfo& info() const override { return info_; }
  std::string name() const override { return "grpc:" + target_; }
  const flashtier::experts::v1::InfoResponse& raw_info() const { return raw_info_; }

 private:
  [[noreturn]] void fail(const std::string& what);
  void watchdog();

  std::string target_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<flashtier::experts::v1::ExpertTier::Stub> stub_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<flashtier::experts::v1::ExpertRequest, flashtier::experts::v1::ExpertResponse>>
      stream_;
  flashtier::experts::v1::InfoResponse raw_info_;
  ipc::TierInfo info_;
  uint64_t next_id_ = 1;
  bool dead_ = false;
  flashtier::experts::v1::ExpertRequest req_;
  flashtier::experts::v1::ExpertResponse resp_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool busy_ = false, stop_ = false, timed_out_ = false;
  std::chrono::steady_clock::time_point deadline_;
  std::thread watchdog_;
};

}  // namespace ft::experts
