#pragma once
// Everything the endpoints share.
#include <atomic>
#include <memory>

#include "gateway/metrics.h"
#include "gateway/model_context.h"
#include "gateway/options.h"
#include "gateway/worker_pool.h"

namespace ft::gateway {

struct App {
  GatewayOptions opts;
  std::shared_ptr<ModelContext> model;
  std::unique_ptr<WorkerPool> pool;
  Metrics metrics;
  std::atomic<int> admitted_streams{0};  // generation streams admitted by this gateway (queue limit)
  std::atomic<uint64_t> next_id{1};
};

}  // namespace ft::gateway
