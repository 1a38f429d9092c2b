#include "gpu-worker/service/expert_link.h"

#include "gpu-worker/experts/remote_experts.h"

namespace ft::worker {

std::unique_ptr<ExpertBackend> make_expert_backend(const std::string& address, const ModelConfig& cfg) {
  return RemoteExperts::create(address, RemoteExpertsOptions::for_model(cfg));
}

bool expert_backend_healthy(ExpertBackend& b) {
  auto* remote = dynamic_cast<RemoteExperts*>(&b);
  return !remote || remote->healthy();
}

}  // namespace ft::worker
