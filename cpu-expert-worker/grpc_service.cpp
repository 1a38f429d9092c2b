#include "cpu-expert-worker/grpc_service.h"

#include <chrono>
#include <exception>

#include "shared/core/error.h"

namespace ft::cew {

namespace pb = flashtier::experts::v1;

grpc::Status ExpertTierService::Info(grpc::ServerContext*, const pb::InfoRequest*, pb::InfoResponse* r) {
  const ExpertEngine* eng = st_.engine.load();
  const ipc::TierInfo& info = eng ? eng->info() : st_.info;
  r->set_ready(eng != nullptr);
  r->set_model_fingerprint(info.fingerprint);
  r->set_layout_version(st_.layout_version);
  r->set_hidden_size(info.hidden);
  r->set_n_layers(info.n_layers);
  for (uint32_t l : info.moe_layers) r->add_moe_layers(l);
  r->set_n_experts(info.n_experts);
  r->set_top_k(info.top_k);
  r->set_shm_segment(info.segment);
  r->set_ring_name(eng ? st_.ring_name : "");
  r->set_bytes_loaded(st_.progress.done.load());
  r->set_bytes_total(st_.progress.total.load());
  r->set_threads(eng ? static_cast<uint32_t>(eng->threads()) : st_.threads);
  r->set_host_id(st_.host_id);
  return grpc::Status::OK;
}

void ExpertTierService::answer(const pb::ExpertRequest& req, pb::ExpertResponse& resp) {
  resp.set_id(req.id());
  ExpertEngine* eng = st_.engine.load();
  try {
    if (!eng && st_.stopping.load()) throw Error("the expert tier is shutting down");
    if (!eng) {
      const double total = static_cast<double>(st_.progress.total.load());
      const double pct = total > 0 ? 100.0 * static_cast<double>(st_.progress.done.load()) / total : 0.0;
      throw Error("the expert tier is still loading (" + std::to_string(static_cast<int>(pct)) + "%)");
    }
    const uint32_t D = eng->info().hidden;
    const uint64_t n = req.n_tokens(), slots = req.slots();
    if (req.hidden().size() != n * D * 4)
      throw Error("hidden has " + std::to_string(req.hidden().size()) + " bytes; " + std::to_string(n) +
                  " tokens × hidden " + std::to_string(D) + " need " + std::to_string(n * D * 4));
    if (static_cast<uint64_t>(req.expert_ids_size()) != n * slots ||
        static_cast<uint64_t>(req.weights_size()) != n * slots)
      throw Error("expert_ids/weights have " + std::to_string(req.expert_ids_size()) + "/" +
                  std::to_string(req.weights_size()) + " entries; " + std::to_string(n) + " tokens × " +
                  std::to_string(slots) + " slots need " + std::to_string(n * slots));
    ipc::ExpertBatch b;
    b.layer = req.layer();
    b.n_tokens = static_cast<uint32_t>(n);
    b.slots = static_cast<uint32_t>(slots);
    b.flags = req.flags();
    b.hidden = D;
    b.x = reinterpret_cast<const float*>(req.hidden().data());  // protobuf strings are malloc-aligned
    b.expert_ids = req.expert_ids().data();
    b.weights = req.weights().data();
    std::string* out = resp.mutable_out();
    out->resize(n * D * 4);
    eng->compute(b, reinterpret_cast<float*>(out->data()));
  } catch (const std::exception& e) {
    resp.clear_out();
    resp.set_error(e.what());
  }
}

grpc::Status ExpertTierService::Compute(grpc::ServerContext* ctx,
                                        grpc::ServerReaderWriter<pb::ExpertResponse, pb::ExpertRequest>* stream) {
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> l(streams_mu_);
    id = next_stream_++;
    streams_[id].peer = ctx->peer();
  }
  pb::ExpertRequest req;
  pb::ExpertResponse resp;
  while (stream->Read(&req)) {
    resp.Clear();
    const auto t0 = std::chrono::steady_clock::now();
    answer(req, resp);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    {
      std::lock_guard<std::mutex> l(streams_mu_);
      StreamStats& s = streams_[id];
      ++s.requests;
      s.failed += !resp.error().empty();
      s.tokens += req.n_tokens();
      s.busy_ns += static_cast<uint64_t>(ns);
    }
    if (!stream->Write(resp)) break;
    if (ctx->IsCancelled()) break;
  }
  std::lock_guard<std::mutex> l(streams_mu_);
  streams_.erase(id);
  return grpc::Status::OK;
}

grpc::Status ExpertTierService::Stats(grpc::ServerContext*, const pb::StatsRequest*, pb::StatsResponse* r) {
  auto add = [r](const std::string& client, uint32_t pid, uint64_t requests, uint64_t failed, uint64_t tokens,
                 uint64_t busy_ns, uint64_t wait_ns) {
    pb::ClientStats* s = r->add_clients();
    s->set_client(client);
    s->set_pid(pid);
    s->set_requests(requests);
    s->set_failed(failed);
    s->set_tokens(tokens);
    s->set_busy_ms(static_cast<double>(busy_ns) / 1e6);
    s->set_wait_ms(static_cast<double>(wait_ns) / 1e6);
  };
  {
    std::lock_guard<std::mutex> l(st_.ring_mu);
    if (st_.ring)
      for (const ipc::ChannelStats& c : st_.ring->channel_stats())
        add("ring channel " + std::to_string(c.channel), c.owner_pid, c.requests, c.failed, c.tokens, c.busy_ns,
            c.wait_ns);
  }
  {
    std::lock_guard<std::mutex> l(streams_mu_);
    for (const auto& [id, st] : streams_) add(st.peer, 0, st.requests, st.failed, st.tokens, st.busy_ns, 0);
  }
  const ExpertEngine* eng = st_.engine.load();
  r->set_threads(eng ? static_cast<uint32_t>(eng->threads()) : st_.threads);
  return grpc::Status::OK;
}

}  // namespace ft::cew
