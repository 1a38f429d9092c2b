#include "gpu-worker/service/expert_link.h"

#include "shared/core/error.h"

namespace ft::worker {

std::unique_ptr<ExpertBackend> make_expert_backend(const std::string& address, const ModelConfig&) {
  throw Error("expert address '" + address + "' is not supported by this build (use --experts local)");
}

bool expert_backend_healthy(const ExpertBackend&) { return true; }

}  // namespace ft::worker
