#include "gpu-worker/experts/grpc_link.h"

#include <climits>
#include <cstring>

#include "shared/core/error.h"
#include "shared/ipc/ring_client.h"

namespace ft::experts {

namespace pb = flashtier::experts::v1;
using clk = std::chrono::steady_clock;

namespace {

// A fresh channel per connection attempt (no inherited reconnect backoff), no message size caps
// (a prefill chunk of 512 tokens × 4096 fp32 is 8 MB each way).
std::shared_ptr<grpc::Channel> open_channel(const std::string& target, std::chrono::milliseconds timeout) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(INT_MAX);
  args.SetMaxSendMessageSize(INT_MAX);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  auto ch = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  // Wait for READY, but give up at the first failed attempt: a refused connection should fail the
  // step now, not after the whole timeout.
  const auto deadline = std::chrono::system_clock::now() + timeout;
  for (;;) {
    const grpc_connectivity_state s = ch->GetState(true);
    if (s == GRPC_CHANNEL_READY) return ch;
    if (s == GRPC_CHANNEL_TRANSIENT_FAILURE || s == GRPC_CHANNEL_SHUTDOWN)
      throw ipc::PeerLost("cannot connect to the cpu-expert-worker at " + target);
    if (!ch->WaitForStateChange(s, deadline))
      throw ipc::PeerLost("cannot connect to the cpu-expert-worker at " + target + " within " +
                          std::to_string(timeout.count()) + " ms");
  }
}

pb::InfoResponse info_on(pb::ExpertTier::Stub& stub, const std::string& target, std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  pb::InfoResponse r;
  const grpc::Status s = stub.Info(&ctx, {}, &r);
  if (!s.ok()) throw ipc::PeerLost("Info from the cpu-expert-worker at " + target + " failed: " + s.error_message());
  return r;
}

}  // namespace

ipc::TierInfo to_tier_info(const pb::InfoResponse& r) {
  ipc::TierInfo t;
  t.hidden = r.hidden_size();
  t.n_layers = r.n_layers();
  t.n_experts = r.n_experts();
  t.top_k = r.top_k();
  t.moe_layers.assign(r.moe_layers().begin(), r.moe_layers().end());
  t.fingerprint = r.model_fingerprint();
  t.segment = r.shm_segment();
  return t;
}

pb::InfoResponse fetch_info(const std::string& target, std::chrono::milliseconds timeout) {
  auto ch = open_channel(target, timeout);
  auto stub = pb::ExpertTier::NewStub(ch);
  return info_on(*stub, target, timeout);
}

GrpcLink::GrpcLink(const std::string& target, std::chrono::milliseconds connect_timeout,
                   std::chrono::milliseconds timeout)
    : target_(target), timeout_(timeout) {
  channel_ = open_channel(target, connect_timeout);
  stub_ = pb::ExpertTier::NewStub(channel_);
  raw_info_ = info_on(*stub_, target, connect_timeout);
  if (!raw_info_.ready()) {
    const double pct = raw_info_.bytes_total() ? 100.0 * raw_info_.bytes_loaded() / raw_info_.bytes_total() : 0.0;
    throw ipc::PeerLost("the cpu-expert-worker at " + target + " is still loading its experts (" +
                        std::to_string(static_cast<int>(pct)) + "%)");
  }
  info_ = to_tier_info(raw_info_);
  ctx_ = std::make_unique<grpc::ClientContext>();
  stream_ = stub_->Compute(ctx_.get());
  watchdog_ = std::thread([this] { watchdog(); });
}

GrpcLink::~GrpcLink() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  watchdog_.join();
  if (stream_) {
    ctx_->TryCancel();
    stream_->Finish();
  }
}

void GrpcLink::watchdog() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    if (!busy_) {
      cv_.wait(lk);
      continue;
    }
    if (cv_.wait_until(lk, deadline_) == std::cv_status::timeout && busy_ && clk::now() >= deadline_) {
      timed_out_ = true;
      ctx_->TryCancel();
      busy_ = false;
    }
  }
}

void GrpcLink::fail(const std::string& what) {
  dead_ = true;
  grpc::Status s = stream_->Finish();
  stream_.reset();
  bool late = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    late = timed_out_;
    busy_ = false;
  }
  if (late)
    throw ipc::PeerLost("the cpu-expert-worker at " + target_ + " did not answer within " +
                        std::to_string(timeout_.count()) + " ms");
  throw ipc::PeerLost("expert stream to " + target_ + " ended (" + what + "): " +
                      (s.ok() ? std::string("closed by the worker") : s.error_message()));
}

void GrpcLink::call(const ipc::ExpertBatch& b, float* out) {
  if (dead_ || !stream_) throw ipc::PeerLost("expert stream to " + target_ + " is closed");
  req_.Clear();
  const uint64_t id = next_id_++;
  req_.set_id(id);
  req_.set_layer(b.layer);
  req_.set_n_tokens(b.n_tokens);
  req_.set_slots(b.slots);
  req_.set_flags(b.flags);
  const uint64_t act = uint64_t{b.n_tokens} * b.hidden, route = uint64_t{b.n_tokens} * b.slots;
  req_.set_hidden(reinterpret_cast<const char*>(b.x), act * 4);
  req_.mutable_expert_ids()->Add(b.expert_ids, b.expert_ids + route);
  req_.mutable_weights()->Add(b.weights, b.weights + route);
  {
    std::lock_guard<std::mutex> lk(mu_);
    busy_ = true;
    deadline_ = clk::now() + timeout_;
  }
  cv_.notify_all();
  if (!stream_->Write(req_)) fail("write");
  if (!stream_->Read(&resp_)) fail("read");
  {
    std::lock_guard<std::mutex> lk(mu_);
    busy_ = false;
  }
  if (resp_.id() != id) {
    dead_ = true;
    throw ipc::PeerLost("expert stream to " + target_ + ": answer " + std::to_string(resp_.id()) + " to request " +
                        std::to_string(id));
  }
  if (!resp_.error().empty()) throw Error(resp_.error());
  if (resp_.out().size() != act * 4) {
    dead_ = true;
    throw ipc::PeerLost("expert stream to " + target_ + ": answer of " + std::to_string(resp_.out().size()) +
                        " bytes, expected " + std::to_string(act * 4));
  }
  std::memcpy(out, resp_.out().data(), act * 4);
}

}  // namespace ft::experts
