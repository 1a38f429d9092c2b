#pragma once
// A GenerateRequest's constraint fields (constraint, logit_bias, min_tokens) into the request's
// GenerationParams: the grammar compiled and bound to the worker's vocabulary here, on the gRPC
// thread, so a bad constraint is INVALID_ARGUMENT before the request is queued.
#include <grpcpp/grpcpp.h>

#include "gpu-worker/engine/request.h"
#include "gpu-worker/service/worker_core.h"
#include "proto/flashtier/generate.pb.h"

namespace ft::worker {

grpc::Status read_constraints(const flashtier::v1::GenerateRequest& req, const WorkerCore& core, GenerationParams& p);

}  // namespace ft::worker
