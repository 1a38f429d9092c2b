#pragma once
// The public gRPC Generation service (proto/flashtier/generate.proto) over a WorkerCore.
#include <atomic>

#include "gpu-worker/service/worker_core.h"
#include "proto/flashtier/generate.grpc.pb.h"

namespace ft::worker {

class GenerationService final : public flashtier::v1::Generation::Service {
 public:
  explicit GenerationService(WorkerCore& core) : core_(core) {}

  grpc::Status Generate(grpc::ServerContext* ctx, const flashtier::v1::GenerateRequest* req,
                        grpc::ServerWriter<flashtier::v1::GenerateResponse>* writer) override;
  grpc::Status Tokenize(grpc::ServerContext*, const flashtier::v1::TokenizeRequest* req,
                        flashtier::v1::TokenizeResponse* resp) override;
  grpc::Status Detokenize(grpc::ServerContext*, const flashtier::v1::DetokenizeRequest* req,
                          flashtier::v1::DetokenizeResponse* resp) override;
  grpc::Status ModelInfo(grpc::ServerContext*, const flashtier::v1::ModelInfoRequest*,
                         flashtier::v1::ModelInfoResponse* resp) override;
  grpc::Status Health(grpc::ServerContext*, const flashtier::v1::HealthRequest*,
                      flashtier::v1::HealthResponse* resp) override;
  grpc::Status Stats(grpc::ServerContext*, const flashtier::v1::StatsRequest*,
                     flashtier::v1::StatsResponse* resp) override;

  // Draining (SIGTERM): Health says NOT_SERVING "draining" and new Generate calls get UNAVAILABLE
  // (the gateway sends them to another worker); calls already running finish.
  void begin_drain() { draining_.store(true); }
  int active_generations() const { return active_.load(); }

 private:
  grpc::Status not_ready() const;
  WorkerCore& core_;
  std::atomic<bool> draining_{false};
  std::atomic<int> active_{0};  // Generate calls in progress
};

}  // namespace ft::worker
