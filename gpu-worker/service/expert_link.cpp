#include "gpu-worker/service/expert_link.h"

#include "gpu-worker/experts/remote_experts.h"

namespace ft::worker {

std::unique_ptr<ExpertBackend> make_expert_backend(const std::string& address, const ModelConfig& cfg) {
  return RemoteExperts::create(address, RemoteExpertsOptions::for_model(cfg));
}

}  // namespace ft::worker
