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

// The name of the expert segment the tier behind `backend` serves from, when it runs on this host
// and answers now ("" otherwise: the GPU then cannot read the experts itself).
std::string expert_segment_of(ExpertBackend& backend);

}  // namespace ft::worker
