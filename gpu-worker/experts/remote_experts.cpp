#include "gpu-worker/experts/remote_experts.h"

#include <algorithm>

#include "gpu-worker/experts/grpc_link.h"
#include "gpu-worker/experts/ring_link.h"
#include "shared/core/error.h"
#include "shared/ipc/liveness.h"
#include "shared/ipc/ring_client.h"

namespace ft {

using clk = std::chrono::steady_clock;

RemoteExpertsOptions RemoteExpertsOptions::for_model(const ModelConfig& cfg) {
  RemoteExpertsOptions o;
  o.hidden = static_cast<uint32_t>(cfg.hidden_size);
  o.n_experts = static_cast<uint32_t>(cfg.n_routed_experts);
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l)
    if (cfg.is_moe(l)) o.moe_layers.push_back(static_cast<uint32_t>(l));
  return o;
}

std::unique_ptr<RemoteExperts> RemoteExperts::create(const std::string& address, const RemoteExpertsOptions& opts) {
  return std::unique_ptr<RemoteExperts>(new RemoteExperts(ExpertAddress::parse(address), opts));
}

RemoteExperts::RemoteExperts(ExpertAddress addr, RemoteExpertsOptions opts)
    : addr_(std::move(addr)), opts_(std::move(opts)) {}

RemoteExperts::~RemoteExperts() = default;

bool RemoteExperts::connected() const {
  std::lock_guard<std::mutex> lk(mu_);
  return link_ != nullptr;
}

std::string RemoteExperts::transport() const {
  std::lock_guard<std::mutex> lk(mu_);
  return link_ ? link_->name() : "";
}

ipc::TierInfo RemoteExperts::info() const {
  std::lock_guard<std::mutex> lk(mu_);
  return link_ ? link_->info() : ipc::TierInfo{};
}

void RemoteExperts::check_model(const ipc::TierInfo& t) const {
  auto mismatch = [&](const std::string& what) {
    throw ipc::PeerLost("the cpu-expert-worker at " + addr_.str() + " serves another model: " + what);
  };
  if (opts_.hidden && t.hidden != opts_.hidden)
    mismatch("hidden size " + std::to_string(t.hidden) + " vs " + std::to_string(opts_.hidden));
  if (opts_.n_experts && t.n_experts != opts_.n_experts)
    mismatch(std::to_string(t.n_experts) + " experts vs " + std::to_string(opts_.n_experts));
  if (!opts_.moe_layers.empty() && t.moe_layers != opts_.moe_layers) mismatch("different MoE layers");
  if (!opts_.fingerprint.empty() && t.fingerprint != opts_.fingerprint)
    mismatch("fingerprint " + t.fingerprint + " vs " + opts_.fingerprint);
}

std::unique_ptr<experts::Link> RemoteExperts::open_link() {
  ipc::RingClientOptions ro;
  ro.timeout = opts_.timeout;
  ro.spin = opts_.ring_spin;
  switch (addr_.kind) {
    case ExpertAddress::Kind::Shm:
      return std::make_unique<experts::RingLink>(addr_.target, ro);
    case ExpertAddress::Kind::Grpc:
      return std::make_unique<experts::GrpcLink>(addr_.target, opts_.connect_timeout, opts_.timeout);
    case ExpertAddress::Kind::Auto: {
      auto g = std::make_unique<experts::GrpcLink>(addr_.target, opts_.connect_timeout, opts_.timeout);
      const auto& r = g->raw_info();
      // Same kernel boot id: same host. The ring must also be visible (a container may have its
      // own /dev/shm) and belong to the worker we asked.
      if (!r.ring_name().empty() && !r.host_id().empty() && r.host_id() == ipc::host_boot_id()) {
        try {
          auto ring = std::make_unique<experts::RingLink>(r.ring_name(), ro);
          if (ring->info().fingerprint == r.model_fingerprint() && ring->info().segment == r.shm_segment())
            return ring;
        } catch (const ipc::PeerLost&) {
        }
      }
      return g;
    }
  }
  throw Error("unreachable");
}

void RemoteExperts::connect_locked() {
  if (link_) return;
  const auto now = clk::now();
  if (!last_error_.empty() && now - last_failure_ < opts_.retry_every) throw Error(last_error_);
  try {
    auto link = open_link();
    check_model(link->info());
    link_ = std::move(link);
    last_error_.clear();
  } catch (const Error& e) {
    last_failure_ = clk::now();
    last_error_ = "expert tier " + addr_.str() + " is unavailable: " + e.what();
    throw Error(last_error_);
  }
}

void RemoteExperts::connect() {
  std::lock_guard<std::mutex> lk(mu_);
  connect_locked();
}

bool RemoteExperts::healthy() {
  std::lock_guard<std::mutex> lk(mu_);
  try {
    connect_locked();
    return true;
  } catch (const Error&) {
    return false;
  }
}

void RemoteExperts::compute(int64_t layer, const float* a, int64_t n, const std::vector<Routing>& routes, float* out,
                            exl3::Operands operands) {
  std::lock_guard<std::mutex> lk(mu_);
  connect_locked();
  if (static_cast<int64_t>(routes.size()) < n)
    throw Error("expert batch of " + std::to_string(n) + " tokens with " + std::to_string(routes.size()) + " routings");
  size_t slots = 1;
  for (int64_t t = 0; t < n; ++t) {
    if (routes[t].weights.size() != routes[t].experts.size())
      throw Error("routing of token " + std::to_string(t) + " has " + std::to_string(routes[t].experts.size()) +
                  " experts but " + std::to_string(routes[t].weights.size()) + " weights");
    slots = std::max(slots, routes[t].experts.size());
  }
  ids_.assign(static_cast<size_t>(n) * slots, -1);
  weights_.assign(ids_.size(), 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    std::copy(routes[t].experts.begin(), routes[t].experts.end(), ids_.begin() + t * slots);
    std::copy(routes[t].weights.begin(), routes[t].weights.end(), weights_.begin() + t * slots);
  }
  ipc::ExpertBatch b;
  b.layer = static_cast<uint32_t>(layer);
  b.n_tokens = static_cast<uint32_t>(n);
  b.slots = static_cast<uint32_t>(slots);
  b.flags = operands == exl3::Operands::F16Rows ? ipc::kBatchF16Operands : 0u;
  b.hidden = link_->info().hidden;
  b.x = a;
  b.expert_ids = ids_.data();
  b.weights = weights_.data();
  try {
    link_->call(b, out);
  } catch (const ipc::PeerLost& e) {
    const std::string name = link_->name();
    link_.reset();
    last_failure_ = clk::now() - opts_.retry_every;  // the next compute() may reconnect at once
    last_error_.clear();
    throw Error("expert tier " + name + " failed: " + e.what());
  }
}

}  // namespace ft
