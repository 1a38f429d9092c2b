#pragma once
// Connects the engine to the expert tier named on the command line.
#include <memory>
#include <string>

#include "shared/engine/expert_backend.h"
#include "shared/model/config.h"

namespace ft::worker {

// `address`: an expert-tier address understood by the expert client (shm:<ring>,
// grpc:<host:port>, auto:<host:port>). Throws ft::Error when it is malformed.
std::unique_ptr<ExpertBackend> make_expert_backend(const std::string& address, const ModelConfig& cfg);

}  // namespace ft::worker
