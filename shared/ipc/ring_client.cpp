#include "shared/ipc/ring_client.h"

#include <unistd.h>

#include <cstring>
#include <random>

#include "shared/core/cpu_relax.h"
#include "shared/ipc/futex.h"
#include "shared/ipc/liveness.h"
#include "shared/ipc/ring_layout.h"

namespace ft::ipc {

using namespace ring;

namespace {

RingHeader& header(const ShmMapping& m) { return *reinterpret_cast<RingHeader*>(m.data()); }
ChannelCtl& channel_at(const ShmMapping& m, uint32_t i) {
  return *reinterpret_cast<ChannelCtl*>(m.data() + kPage + uint64_t{i} * header(m).channel_stride);
}
uint8_t* payload(const ShmMapping& m, uint32_t i) { return reinterpret_cast<uint8_t*>(&channel_at(m, i)) + kPage; }

std::string cstr(const char* s, size_t cap) { return std::string(s, strnlen(s, cap)); }

uint64_t make_token() {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^ static_cast<uint64_t>(getpid()) ^ monotonic_ns());
  uint32_t r = 0;
  while (r == 0) r = static_cast<uint32_t>(rng());
  return (static_cast<uint64_t>(getpid()) << 32) | r;
}

// A channel whose owner died (same pid namespace only: other pids cannot be probed).
bool owner_dead(const ChannelCtl& c, uint64_t owner) {
  const uint64_t ns = c.owner_pid_ns.load();
  if (ns == 0 || ns != pid_namespace_id()) return false;
  return !process_alive(static_cast<pid_t>(owner >> 32));
}

}  // namespace

RingClient::RingClient(const std::string& name, const RingClientOptions& opts) : opts_(opts) {
  auto m = ShmMapping::open(name, true);
  if (!m) throw PeerLost("no expert ring '" + name + "' on this host: is the cpu-expert-worker running?");
  shm_ = std::move(*m);
  if (shm_.size() < kPage || std::memcmp(header(shm_).magic, kMagic, 8) != 0 ||
      header(shm_).layout_version != kLayoutVersion || shm_.size() < header(shm_).total_bytes)
    throw PeerLost("shared memory '" + name + "' is not an expert ring of layout version " +
                   std::to_string(kLayoutVersion));
  const RingHeader& h = header(shm_);
  // Read a consistent description: the epoch must not move while we copy it.
  for (int attempt = 0;; ++attempt) {
    const uint32_t e = h.epoch.load();
    if (!h.ready.load() || h.server_pid.load() == 0)
      throw PeerLost("expert ring '" + name + "' has no running server (worker stopped or still loading)");
    epoch_ = e;
    check_peer();
    info_.hidden = h.hidden;
    info_.intermediate = h.intermediate;
    info_.n_layers = h.n_layers;
    info_.n_experts = h.n_experts;
    info_.top_k = h.top_k;
    info_.moe_layers.assign(h.moe_layers, h.moe_layers + std::min(h.n_moe_layers, kMaxMoeLayers));
    info_.fingerprint = cstr(h.fingerprint, sizeof h.fingerprint);
    info_.segment = cstr(h.segment, sizeof h.segment);
    max_tokens_ = h.max_tokens;
    max_slots_ = h.max_slots;
    if (h.epoch.load() == e) break;
    if (attempt > 100) throw PeerLost("expert ring '" + name + "' keeps restarting");
  }
  const uint64_t token = make_token();
  for (uint32_t i = 0; i < h.channels; ++i) {
    ChannelCtl& c = channel_at(shm_, i);
    uint64_t cur = c.owner.load();
    const uint32_t st = c.state.load();
    if (st == Request || st == Working) continue;  // a previous owner's request is still being served
    if ((cur == 0 || owner_dead(c, cur)) && c.owner.compare_exchange_strong(cur, token)) {
      c.owner_pid_ns.store(pid_namespace_id());
      c.state.store(Idle);
      c.client_waiting.store(0);
      index_ = i;
      token_ = token;
      break;
    }
  }
  if (token_ == 0)
    throw PeerLost("expert ring '" + name + "': all " + std::to_string(h.channels) +
                   " channels are taken (raise the worker's --ring-channels)");
}

RingClient::~RingClient() { release(); }

void RingClient::release() {
  if (token_ == 0) return;
  ChannelCtl& c = channel_at(shm_, index_);
  // After a timeout the server may still be writing into this channel: keep it claimed (it is
  // freed when this process exits or the worker restarts) rather than hand it to someone else.
  const uint32_t st = c.state.load();
  if (st != Request && st != Working) {
    uint64_t mine = token_;
    c.owner_pid_ns.store(0);
    c.owner.compare_exchange_strong(mine, 0);
  }
  token_ = 0;
}

void RingClient::check_peer() const {
  const RingHeader& h = header(shm_);
  if (h.epoch.load() != epoch_) throw PeerLost("the cpu-expert-worker restarted (ring " + shm_.name() + ")");
  const uint32_t pid = h.server_pid.load();
  if (pid == 0 || !h.ready.load()) throw PeerLost("the cpu-expert-worker stopped (ring " + shm_.name() + ")");
  if (h.server_pid_ns.load() == pid_namespace_id() && pid_namespace_id() != 0) {
    if (!process_alive(static_cast<pid_t>(pid)))
      throw PeerLost("the cpu-expert-worker (pid " + std::to_string(pid) + ") died (ring " + shm_.name() + ")");
    return;
  }
  const uint64_t age = monotonic_ns() - h.heartbeat_ns.load();
  if (age > static_cast<uint64_t>(std::chrono::nanoseconds(opts_.stale_after).count()))
    throw PeerLost("the cpu-expert-worker stopped beating for " + std::to_string(age / 1000000) + " ms (ring " +
                   shm_.name() + ")");
}

void RingClient::call(const ExpertBatch& b, float* out) {
  if (broken_ || token_ == 0) throw PeerLost("ring connection " + shm_.name() + " is closed");
  if (b.hidden != info_.hidden)
    throw Error("batch hidden size " + std::to_string(b.hidden) + " does not match the worker's " +
                std::to_string(info_.hidden));
  if (b.slots > max_slots_)
    throw Error("batch has " + std::to_string(b.slots) + " experts per token; the ring carries at most " +
                std::to_string(max_slots_));
  if (channel_at(shm_, index_).owner.load() != token_) {
    broken_ = true;
    throw PeerLost("lost the ring channel (the cpu-expert-worker restarted)");
  }
  for (uint32_t t0 = 0; t0 < b.n_tokens || (t0 == 0 && b.n_tokens == 0); t0 += max_tokens_) {
    ExpertBatch piece = b;
    piece.n_tokens = std::min(max_tokens_, b.n_tokens - t0);
    piece.x = b.x + uint64_t{t0} * b.hidden;
    piece.expert_ids = b.expert_ids + uint64_t{t0} * b.slots;
    piece.weights = b.weights + uint64_t{t0} * b.slots;
    call_piece(piece, out + uint64_t{t0} * b.hidden);
    if (b.n_tokens == 0) break;
  }
}

void RingClient::call_piece(const ExpertBatch& b, float* out) {
  try {
    check_peer();
  } catch (const PeerLost&) {
    broken_ = true;
    throw;
  }
  RingHeader& h = header(shm_);
  ChannelCtl& c = channel_at(shm_, index_);
  const PayloadLayout pl(h.hidden, h.max_tokens, h.max_slots);
  uint8_t* p = payload(shm_, index_);
  const uint64_t act = uint64_t{b.n_tokens} * b.hidden, route = uint64_t{b.n_tokens} * b.slots;
  if (act) std::memcpy(p + pl.x, b.x, act * 4);
  if (route) {
    std::memcpy(p + pl.ids, b.expert_ids, route * 4);
    std::memcpy(p + pl.w, b.weights, route * 4);
  }
  c.layer = b.layer;
  c.n_tokens = b.n_tokens;
  c.slots = b.slots;
  c.flags = b.flags;
  c.seq = ++seq_;
  c.error_len = 0;
  c.posted_ns = monotonic_ns();
  c.state.store(Request, std::memory_order_seq_cst);
  h.doorbell.fetch_add(1, std::memory_order_seq_cst);
  if (h.server_sleeping.load(std::memory_order_seq_cst)) futex_wake(&h.doorbell, 1);

  const auto is_done = [](uint32_t s) { return s == Done || s == Failed; };
  const uint64_t t0 = monotonic_ns();
  const uint64_t spin_until = t0 + static_cast<uint64_t>(std::chrono::nanoseconds(opts_.spin).count());
  const uint64_t deadline = t0 + static_cast<uint64_t>(std::chrono::nanoseconds(opts_.timeout).count());
  uint32_t s = c.state.load(std::memory_order_acquire);
  while (!is_done(s) && monotonic_ns() < spin_until) {
    cpu_relax();
    s = c.state.load(std::memory_order_acquire);
  }
  while (!is_done(s)) {
    c.client_waiting.store(1, std::memory_order_seq_cst);
    s = c.state.load(std::memory_order_seq_cst);
    if (is_done(s)) break;
    futex_wait(&c.state, s, opts_.check_every);
    s = c.state.load(std::memory_order_acquire);
    if (is_done(s)) break;
    try {
      check_peer();
    } catch (const PeerLost&) {
      broken_ = true;
      throw;
    }
    if (monotonic_ns() > deadline) {
      broken_ = true;
      throw PeerLost("the cpu-expert-worker did not answer within " + std::to_string(opts_.timeout.count()) +
                     " ms (ring " + shm_.name() + ")");
    }
  }
  c.client_waiting.store(0, std::memory_order_relaxed);
  if (c.done_seq != seq_) {
    broken_ = true;
    throw PeerLost("ring " + shm_.name() + ": answer to request " + std::to_string(c.done_seq) + " instead of " +
                   std::to_string(seq_));
  }
  if (s == Failed) {
    std::string msg(c.error, std::min<uint32_t>(c.error_len, kErrorBytes));
    c.state.store(Idle, std::memory_order_relaxed);
    throw Error(msg);
  }
  if (act) std::memcpy(out, p + pl.out, act * 4);
  c.state.store(Idle, std::memory_order_relaxed);
}

}  // namespace ft::ipc
