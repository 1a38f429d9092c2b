#include "shared/ipc/ring_server.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <new>

#include "shared/core/cpu_relax.h"
#include "shared/core/error.h"
#include "shared/ipc/futex.h"
#include "shared/ipc/liveness.h"
#include "shared/ipc/ring_layout.h"

namespace ft::ipc {

using namespace ring;

namespace {

RingHeader& header(const ShmMapping& m) { return *reinterpret_cast<RingHeader*>(m.data()); }
ChannelCtl& channel(const ShmMapping& m, uint32_t i) {
  return *reinterpret_cast<ChannelCtl*>(m.data() + kPage + uint64_t{i} * header(m).channel_stride);
}
uint8_t* payload(const ShmMapping& m, uint32_t i) { return reinterpret_cast<uint8_t*>(&channel(m, i)) + kPage; }

bool same_geometry(const RingHeader& h, const RingConfig& c, uint32_t hidden, uint64_t total) {
  return std::memcmp(h.magic, kMagic, 8) == 0 && h.layout_version == kLayoutVersion && h.channels == c.channels &&
         h.hidden == hidden && h.max_tokens == c.max_tokens && h.max_slots == c.max_slots && h.total_bytes == total;
}

// A server that still owns the ring: pid alive (when we can tell) or a fresh heartbeat.
bool live_server(const RingHeader& h) {
  const uint32_t pid = h.server_pid.load();
  if (pid == 0 || !h.ready.load()) return false;
  if (h.server_pid_ns.load() == pid_namespace_id() && pid_namespace_id() != 0)
    return static_cast<pid_t>(pid) != getpid() && process_alive(static_cast<pid_t>(pid));
  return monotonic_ns() - h.heartbeat_ns.load() < 500'000'000ull;
}

void copy_str(char* dst, size_t cap, const std::string& s) {
  const size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = 0;
}

}  // namespace

RingServer::RingServer(const std::string& name, const RingConfig& cfg, const TierInfo& info, Handler handler,
                       const RingServerOptions& opts)
    : cfg_(cfg), opts_(opts), handler_(std::move(handler)) {
  if (cfg.channels == 0 || cfg.max_tokens == 0 || cfg.max_slots == 0 || info.hidden == 0)
    throw Error("ring " + name + ": channels, max_tokens, max_slots and hidden must be positive");
  if (info.moe_layers.size() > kMaxMoeLayers) throw Error("ring " + name + ": too many MoE layers");
  const uint64_t stride = channel_stride(info.hidden, cfg.max_tokens, cfg.max_slots);
  const uint64_t total = kPage + stride * cfg.channels;

  bool reuse = false;
  if (auto old = ShmMapping::open(name, true)) {
    if (old->size() >= sizeof(RingHeader)) {
      const RingHeader& h = header(*old);
      // A restart may race the exit of the server it replaces: give that one a moment to go.
      for (int i = 0; i < 200 && std::memcmp(h.magic, kMagic, 8) == 0 && live_server(h); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (std::memcmp(h.magic, kMagic, 8) == 0 && live_server(h))
        throw Error("ring " + name + " is served by a live cpu-expert-worker (pid " +
                    std::to_string(h.server_pid.load()) + "); stop it first or pick another --ring");
      reuse = old->size() == total && same_geometry(h, cfg, info.hidden, total);
    }
    if (reuse) shm_ = std::move(*old);
    else ShmMapping::remove(name);
  }
  if (!reuse) {
    shm_ = ShmMapping::create(name, total, false);
    std::memset(shm_.data(), 0, kPage);
    RingHeader& h = *new (shm_.data()) RingHeader{};
    std::memcpy(h.magic, kMagic, 8);
    h.layout_version = kLayoutVersion;
    h.channels = cfg.channels;
    h.hidden = info.hidden;
    h.max_tokens = cfg.max_tokens;
    h.max_slots = cfg.max_slots;
    h.channel_stride = stride;
    h.total_bytes = total;
    for (uint32_t i = 0; i < cfg.channels; ++i) new (&channel(shm_, i)) ChannelCtl{};
  }
  RingHeader& h = header(shm_);
  h.ready.store(0);
  // Clients of a previous server see the epoch move and give up their requests; then every channel
  // is free again for them to re-claim.
  h.epoch.fetch_add(1);
  for (uint32_t i = 0; i < cfg.channels; ++i) {
    ChannelCtl& c = channel(shm_, i);
    c.owner_pid_ns.store(0);
    c.owner.store(0);
    c.state.store(Idle);
    c.client_waiting.store(0);
    futex_wake(&c.state);
  }
  h.intermediate = info.intermediate;
  h.n_layers = info.n_layers;
  h.n_experts = info.n_experts;
  h.top_k = info.top_k;
  h.n_moe_layers = static_cast<uint32_t>(info.moe_layers.size());
  std::fill(std::begin(h.moe_layers), std::end(h.moe_layers), 0u);
  std::copy(info.moe_layers.begin(), info.moe_layers.end(), h.moe_layers);
  copy_str(h.fingerprint, sizeof h.fingerprint, info.fingerprint);
  copy_str(h.segment, sizeof h.segment, info.segment);
  h.server_pid_ns.store(pid_namespace_id());
  h.server_pid.store(static_cast<uint32_t>(getpid()));
  h.heartbeat_ns.store(monotonic_ns());
  h.server_sleeping.store(0);
  h.ready.store(1);

  stats_.resize(cfg_.channels);
  for (uint32_t i = 0; i < cfg_.channels; ++i) stats_[i].channel = i;
  heartbeat_ = std::thread([this] { heartbeat_loop(); });
  dispatcher_ = std::thread([this] { dispatch_loop(); });
}

RingServer::~RingServer() { stop(); }

uint32_t RingServer::epoch() const { return header(shm_).epoch.load(); }

void RingServer::stop() {
  if (stop_.exchange(true)) return;
  RingHeader& h = header(shm_);
  h.doorbell.fetch_add(1);
  futex_wake(&h.doorbell);
  if (dispatcher_.joinable()) dispatcher_.join();
  if (heartbeat_.joinable()) heartbeat_.join();
  h.ready.store(0);
  h.server_pid.store(0);
  // Wake waiting clients so they notice at once instead of at their next timed check.
  for (uint32_t i = 0; i < cfg_.channels; ++i) futex_wake(&channel(shm_, i).state);
}

void RingServer::heartbeat_loop() {
  RingHeader& h = header(shm_);
  while (!stop_.load(std::memory_order_relaxed)) {
    h.heartbeat_ns.store(monotonic_ns(), std::memory_order_relaxed);
    std::this_thread::sleep_for(opts_.heartbeat_period);
  }
}

std::vector<ChannelStats> RingServer::channel_stats() const {
  std::vector<ChannelStats> out;
  {
    std::lock_guard<std::mutex> l(stats_mu_);
    out = stats_;
  }
  for (ChannelStats& s : out) {
    const uint64_t owner = channel(shm_, s.channel).owner.load();
    s.owner_pid = static_cast<uint32_t>(owner >> 32);
  }
  return out;
}

bool RingServer::serve_pending() {
  const RingHeader& h = header(shm_);
  bool any = false;
  const uint32_t start = next_;
  for (uint32_t k = 0; k < cfg_.channels; ++k) {
    const uint32_t i = (start + k) % cfg_.channels;
    ChannelCtl& c = channel(shm_, i);
    if (c.state.load(std::memory_order_acquire) != Request) continue;
    any = true;
    next_ = (i + 1) % cfg_.channels;
    c.state.store(Working, std::memory_order_relaxed);
    const uint64_t t_start = monotonic_ns();
    const uint64_t posted = c.posted_ns;
    const PayloadLayout pl(h.hidden, h.max_tokens, h.max_slots);
    uint8_t* p = payload(shm_, i);
    ExpertBatch b;
    b.layer = c.layer;
    b.n_tokens = c.n_tokens;
    b.slots = c.slots;
    b.flags = c.flags;
    b.hidden = h.hidden;
    b.x = reinterpret_cast<const float*>(p + pl.x);
    b.expert_ids = reinterpret_cast<const int32_t*>(p + pl.ids);
    b.weights = reinterpret_cast<const float*>(p + pl.w);
    uint32_t result = Done;
    std::string err;
    try {
      if (b.n_tokens > h.max_tokens || b.slots > h.max_slots)
        throw Error("batch of " + std::to_string(b.n_tokens) + " tokens × " + std::to_string(b.slots) +
                    " slots exceeds the ring's " + std::to_string(h.max_tokens) + " × " +
                    std::to_string(h.max_slots));
      handler_(b, reinterpret_cast<float*>(p + pl.out));
    } catch (const std::exception& e) {
      err = e.what();
      result = Failed;
    } catch (...) {
      err = "unknown error in the expert handler";
      result = Failed;
    }
    if (result == Failed) {
      c.error_len = static_cast<uint32_t>(std::min<size_t>(err.size(), kErrorBytes));
      std::memcpy(c.error, err.data(), c.error_len);
    }
    const uint64_t t_end = monotonic_ns();
    {
      std::lock_guard<std::mutex> l(stats_mu_);
      ChannelStats& s = stats_[i];
      ++s.requests;
      s.failed += result == Failed;
      s.tokens += b.n_tokens;
      s.busy_ns += t_end - t_start;
      if (posted > 0 && posted <= t_start) s.wait_ns += t_start - posted;
    }
    c.done_seq = c.seq;
    c.state.store(result, std::memory_order_seq_cst);
    if (c.client_waiting.load(std::memory_order_seq_cst)) futex_wake(&c.state);
    requests_.fetch_add(1, std::memory_order_relaxed);
  }
  return any;
}

void RingServer::dispatch_loop() {
  RingHeader& h = header(shm_);
  const uint64_t spin_ns = static_cast<uint64_t>(std::chrono::nanoseconds(opts_.spin).count());
  uint64_t last = monotonic_ns();
  while (!stop_.load(std::memory_order_relaxed)) {
    if (serve_pending()) {
      last = monotonic_ns();
      continue;
    }
    if (monotonic_ns() - last < spin_ns) {
      for (int i = 0; i < 64; ++i) cpu_relax();
      continue;
    }
    h.server_sleeping.store(1, std::memory_order_seq_cst);
    const uint32_t bell = h.doorbell.load(std::memory_order_seq_cst);
    if (!serve_pending() && !stop_.load()) {
      // Timed so that a lost wake (there should be none) costs at most this much.
      const FutexWait r = futex_wait(&h.doorbell, bell, std::chrono::milliseconds(50));
      if (r != FutexWait::TimedOut) last = monotonic_ns();
    } else {
      last = monotonic_ns();
    }
    h.server_sleeping.store(0, std::memory_order_relaxed);
  }
}

}  // namespace ft::ipc
