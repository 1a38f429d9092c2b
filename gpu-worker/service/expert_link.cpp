#include "gpu-worker/service/expert_link.h"

#include "gpu-worker/experts/remote_experts.h"

namespace ft::worker {

std::unique_ptr<ExpertBackend> make_expert_backend(const std::string& address, const ModelConfig& cfg) {
  return RemoteExperts::create(address, RemoteExpertsOptions::for_model(cfg));
}

std::string expert_segment_of(ExpertBackend& backend) {
  auto* remote = dynamic_cast<RemoteExperts*>(&backend);
  if (!remote || !remote->healthy()) return "";
  // Only a worker reached over the shared-memory ring is on this host (a gRPC one may be anywhere).
  if (remote->transport().rfind("shm:", 0) != 0) return "";
  return remote->info().segment;
}

}  // namespace ft::worker
