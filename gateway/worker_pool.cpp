#include "gateway/worker_pool.h"

#include <netdb.h>
#include <sys/socket.h>

#include <arpa/inet.h>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <grpcpp/grpcpp.h>

#include "proto/flashtier/generate.grpc.pb.h"

namespace ft::gateway {

namespace v1 = flashtier::v1;

struct WorkerPool::Worker {
  std::string address;
  std::string origin;  // the --worker-dns name it came from; empty for a fixed --worker
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Generation::Stub> stub;
  std::atomic<int> outstanding{0};
  int slow_polls = 0;  // health polls in a row that timed out (the polling thread's own)
  std::atomic<uint64_t> total{0};
  std::atomic<bool> ready{false};
  mutable std::mutex mu;  // guards the fields below
  std::string state = "UNKNOWN";
  std::string detail;
  v1::StatsResponse stats;
  bool have_info = false;
};

namespace {

class GenerateReactor final : public grpc::ClientReadReactor<v1::GenerateResponse>, public GenerateCall {
 public:
  GenerateReactor(WorkerPool* pool, std::shared_ptr<WorkerPool::Worker> w, EventSink sink)
      : pool_(pool), w_(std::move(w)), sink_(std::move(sink)) {}

  void start(std::shared_ptr<GenerateReactor> self, const v1::GenerateRequest& req, std::chrono::seconds deadline) {
    self_ = std::move(self);
    req_ = req;
    // The per-request deadline: the call ends DEADLINE_EXCEEDED and the client gets an error.
    if (deadline.count() > 0) ctx_.set_deadline(std::chrono::system_clock::now() + deadline);
    w_->stub->async()->Generate(&ctx_, &req_, this);
    StartRead(&resp_);
    StartCall();
  }

  void cancel() override { ctx_.TryCancel(); }
  void release() {
    if (!released_.exchange(true)) w_->outstanding.fetch_sub(1);
  }
  const std::string& worker() const override { return w_->address; }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows with the status
    GenerateEvent ev;
    ev.msg.Swap(&resp_);
    // The worker's slot is free once it says `finished`: count it so before the client hears.
    if (ev.msg.finished()) release();
    sink_(std::move(ev));
    StartRead(&resp_);
  }

  void OnDone(const grpc::Status& s) override {
    release();
    GenerateEvent ev;
    ev.ended = true;
    ev.status_code = static_cast<int>(s.error_code());
    ev.status_message = s.error_message();
    if (const std::string* why = pool_->abort_reason(); why && s.error_code() == grpc::StatusCode::CANCELLED) {
      // Ended by abort_all (the drain timeout): the client hears why, as an error event.
      ev.status_code = static_cast<int>(grpc::StatusCode::UNAVAILABLE);
      ev.status_message = *why;
    } else if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
      pool_->mark_unreachable(w_->address, s.error_message());
    }
    sink_(std::move(ev));
    sink_ = nullptr;  // breaks the cycle through the sink's captured state
    auto keep = std::move(self_);  // the reactor may be freed when this returns
  }

 private:
  WorkerPool* pool_;
  std::shared_ptr<WorkerPool::Worker> w_;  // kept alive while the stream runs, even if DNS drops it
  EventSink sink_;
  grpc::ClientContext ctx_;
  v1::GenerateRequest req_;
  v1::GenerateResponse resp_;
  std::shared_ptr<GenerateReactor> self_;
  std::atomic<bool> released_{false};
};

const char* health_name(v1::HealthResponse::Status s) {
  switch (s) {
    case v1::HealthResponse::SERVING: return "SERVING";
    case v1::HealthResponse::LOADING: return "LOADING";
    case v1::HealthResponse::NOT_SERVING: return "NOT_SERVING";
    default: return "UNKNOWN";
  }
}

std::string escape_label(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o.push_back('\\');
    if (c == '\n') { o += "\\n"; continue; }
    o.push_back(c);
  }
  return o;
}

}  // namespace

static std::string read_pem(const std::string& path, const char* flag) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(std::string(flag) + ": cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

WorkerPool::WorkerPool(std::vector<std::string> addresses, std::chrono::milliseconds poll_interval, WorkerPoolOptions opts)
    : opts_(std::move(opts)), interval_(poll_interval) {
  if (opts_.tls_ca.empty()) {
    creds_ = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions so;
    so.pem_root_certs = read_pem(opts_.tls_ca, "--worker-tls-ca");
    if (!opts_.tls_cert.empty()) {
      so.pem_cert_chain = read_pem(opts_.tls_cert, "--worker-tls-cert");
      so.pem_private_key = read_pem(opts_.tls_key, "--worker-tls-key");
    }
    creds_ = grpc::SslCredentials(so);
  }
  for (auto& a : addresses) workers_.push_back(make_worker(a, ""));
  if (!opts_.dns_names.empty()) resolve_dns();
}

std::shared_ptr<WorkerPool::Worker> WorkerPool::make_worker(const std::string& address, const std::string& origin) const {
  auto w = std::make_shared<Worker>();
  w->address = address;
  w->origin = origin;
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 64 << 20);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // A worker found by DNS is dialled by IP; its certificate names the service, not the IP.
  std::string name = opts_.tls_name;
  if (name.empty() && !origin.empty()) name = origin.substr(0, origin.rfind(':'));
  if (!opts_.tls_ca.empty() && !name.empty()) args.SetSslTargetNameOverride(name);
  w->channel = grpc::CreateCustomChannel(address, creds_, args);
  w->stub = v1::Generation::NewStub(w->channel);
  return w;
}

std::vector<std::shared_ptr<WorkerPool::Worker>> WorkerPool::workers() const {
  std::lock_guard lk(list_mu_);
  return workers_;
}

void WorkerPool::resolve_dns() {
  for (const std::string& target : opts_.dns_names) {
    const auto colon = target.rfind(':');
    const std::string host = target.substr(0, colon), port = target.substr(colon + 1);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    // A failed lookup keeps the workers we have: a name that vanishes for a moment (every
    // replica restarting) must not empty the pool; the health polls say who is ready.
    if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || !res) continue;
    std::set<std::string> found;
    for (addrinfo* a = res; a; a = a->ai_next) {
      char ip[INET6_ADDRSTRLEN] = {};
      if (a->ai_family == AF_INET)
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, ip, sizeof ip);
      else if (a->ai_family == AF_INET6)
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, ip, sizeof ip);
      else
        continue;
      std::string addr = ip;  // (appends, not `"[" + string`: GCC 12's -Wrestrict false positive)
      if (a->ai_family == AF_INET6) addr.insert(0, 1, '[').append(1, ']');
      found.insert(addr.append(1, ':').append(port));
    }
    freeaddrinfo(res);
    std::lock_guard lk(list_mu_);
    std::erase_if(workers_, [&](const std::shared_ptr<Worker>& w) { return w->origin == target && !found.count(w->address); });
    for (const auto& addr : found) {
      bool have = false;
      for (const auto& w : workers_) have = have || w->address == addr;
      if (!have) workers_.push_back(make_worker(addr, target));
    }
  }
}

WorkerPool::~WorkerPool() { stop(); }

void WorkerPool::start() {
  std::lock_guard lk(mu_);
  if (poller_.joinable()) return;
  stopping_ = false;
  poller_ = std::thread([this] { poll_loop(); });
}

void WorkerPool::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (poller_.joinable()) poller_.join();
}

void WorkerPool::poll_loop() {
  for (;;) {
    if (!opts_.dns_names.empty() && std::chrono::steady_clock::now() >= next_dns_) {
      resolve_dns();
      next_dns_ = std::chrono::steady_clock::now() + opts_.dns_interval;
    }
    poll_once();
    std::unique_lock lk(mu_);
    if (cv_.wait_for(lk, interval_, [this] { return stopping_; })) return;
  }
}

void WorkerPool::poll_once() {
  auto timeout = std::max<std::chrono::milliseconds>(interval_, std::chrono::milliseconds(500));
  for (auto& w : workers()) {
    grpc::ClientContext hctx;
    hctx.set_deadline(std::chrono::system_clock::now() + timeout);
    v1::HealthResponse hr;
    grpc::Status s = w->stub->Health(&hctx, v1::HealthRequest(), &hr);
    bool serving = s.ok() && hr.status() == v1::HealthResponse::SERVING;
    // A poll that merely timed out says the worker is slow (a saturated host), not gone: a ready
    // worker stays ready until kSlowPollsToDown of them in a row. Refused connections and any
    // answer other than SERVING count at once.
    constexpr int kSlowPollsToDown = 3;
    if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && w->ready.load() && ++w->slow_polls < kSlowPollsToDown) {
      std::lock_guard lk(w->mu);
      w->detail = "health poll timed out (" + std::to_string(w->slow_polls) + " in a row)";
      continue;
    }
    w->slow_polls = 0;
    v1::StatsResponse st;
    bool have_stats = false;
    if (s.ok()) {
      grpc::ClientContext sctx;
      sctx.set_deadline(std::chrono::system_clock::now() + timeout);
      have_stats = w->stub->Stats(&sctx, v1::StatsRequest(), &st).ok();
    }
    bool need_info;
    {
      std::lock_guard lk(w->mu);
      need_info = !w->have_info;
    }
    if (serving && need_info) {
      grpc::ClientContext ictx;
      ictx.set_deadline(std::chrono::system_clock::now() + timeout);
      v1::ModelInfoResponse info;
      if (w->stub->ModelInfo(&ictx, v1::ModelInfoRequest(), &info).ok()) {
        {
          std::lock_guard lk(w->mu);
          w->have_info = true;
        }
        std::lock_guard lk(mu_);
        if (!info_) info_ = info;
      } else {
        serving = false;
      }
    }
    {
      std::lock_guard lk(w->mu);
      w->state = s.ok() ? health_name(hr.status()) : "UNREACHABLE";
      w->detail = s.ok() ? hr.detail() : s.error_message();
      if (have_stats) w->stats = st;
    }
    w->ready.store(serving);
  }
}

void WorkerPool::mark_unreachable(const std::string& address, const std::string& detail) {
  for (auto& w : workers()) {
    if (w->address != address) continue;
    w->ready.store(false);
    std::lock_guard lk(w->mu);
    w->state = "UNREACHABLE";
    w->detail = detail;
  }
  cv_.notify_all();  // no-op for the sleeping poller; the next poll brings it back
}

void WorkerPool::abort_all(const std::string& why) {
  std::vector<std::weak_ptr<GenerateCall>> live;
  {
    std::lock_guard lk(live_mu_);
    if (!aborting_) abort_reason_ = why;
    aborting_ = true;
    live.swap(live_);
  }
  for (auto& w : live)
    if (auto c = w.lock()) c->cancel();
}

const std::string* WorkerPool::abort_reason() const {
  std::lock_guard lk(live_mu_);
  return aborting_ ? &abort_reason_ : nullptr;  // (never changes once set)
}

std::shared_ptr<GenerateCall> WorkerPool::generate(const v1::GenerateRequest& req, EventSink sink, std::string* why) {
  if (const std::string* reason = abort_reason()) {
    if (why) *why = *reason;
    return nullptr;
  }
  const auto all = workers();
  std::shared_ptr<Worker> best;
  size_t n = all.size();
  size_t start = static_cast<size_t>(rr_.fetch_add(1) % (n ? n : 1));
  for (size_t k = 0; k < n; ++k) {
    const std::shared_ptr<Worker>& w = all[(start + k) % n];
    if (!w->ready.load()) continue;
    if (!best || w->outstanding.load() < best->outstanding.load()) best = w;
  }
  if (!best) {
    if (why) *why = "no gpu-worker is ready (loading or down)";
    return nullptr;
  }
  best->outstanding.fetch_add(1);
  best->total.fetch_add(1);
  auto r = std::make_shared<GenerateReactor>(this, best, std::move(sink));
  {
    std::lock_guard lk(live_mu_);
    std::erase_if(live_, [](const std::weak_ptr<GenerateCall>& w) { return w.expired(); });
    live_.push_back(r);
  }
  r->start(r, req, opts_.request_deadline);
  return r;
}

bool WorkerPool::any_ready() const {
  for (const auto& w : workers())
    if (w->ready.load()) return true;
  return false;
}

int WorkerPool::outstanding() const {
  int n = 0;
  for (const auto& w : workers()) n += w->outstanding.load();
  return n;
}

std::optional<v1::ModelInfoResponse> WorkerPool::model_info() const {
  std::lock_guard lk(mu_);
  return info_;
}

std::vector<WorkerSnapshot> WorkerPool::snapshot() const {
  std::vector<WorkerSnapshot> out;
  for (const auto& w : workers()) {
    WorkerSnapshot s;
    s.address = w->address;
    s.ready = w->ready.load();
    s.outstanding = w->outstanding.load();
    s.streams_total = w->total.load();
    std::lock_guard lk(w->mu);
    s.state = w->state;
    s.detail = w->detail;
    s.running = w->stats.running();
    s.waiting = w->stats.waiting();
    s.worker_cancelled = w->stats.cancelled();
    for (const auto& m : w->stats.memory()) s.memory.emplace_back(m.category(), m.bytes());
    for (const auto& c : w->stats.counters()) s.counters.emplace_back(c.name(), c.value());
    const auto& pc = w->stats.prefix_cache();
    s.prefix_hits = pc.hits();
    s.prefix_misses = pc.misses();
    s.prefix_tokens_saved = pc.tokens_saved();
    s.prefix_bytes = pc.bytes();
    s.prefix_evictions = pc.evictions();
    out.push_back(std::move(s));
  }
  return out;
}

std::string WorkerPool::render_metrics() const {
  auto snap = snapshot();
  std::string out;
  auto family = [&](const char* name, const char* help, const char* type, auto value) {
    out.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ").append(name).append(" ").append(type).append("\n");
    for (const auto& s : snap)
      out.append(name).append("{worker=\"").append(escape_label(s.address)).append("\"} ").append(std::to_string(value(s))).append("\n");
  };
  family("flashtier_worker_up", "1 when the gpu-worker is SERVING.", "gauge", [](const WorkerSnapshot& s) { return s.ready ? 1 : 0; });
  family("flashtier_worker_outstanding", "Generate streams this gateway has open on the worker.", "gauge",
         [](const WorkerSnapshot& s) { return s.outstanding; });
  family("flashtier_worker_streams_total", "Generate streams this gateway sent to the worker.", "counter",
         [](const WorkerSnapshot& s) { return s.streams_total; });
  family("flashtier_worker_running", "Sequences in the worker's batch (last poll).", "gauge",
         [](const WorkerSnapshot& s) { return s.running; });
  family("flashtier_worker_queue_depth", "Sequences queued in the worker (last poll).", "gauge",
         [](const WorkerSnapshot& s) { return s.waiting; });
  family("flashtier_worker_cancelled_total", "Sequences the worker saw cancelled (last poll).", "counter",
         [](const WorkerSnapshot& s) { return s.worker_cancelled; });
  family("flashtier_worker_prefix_cache_hits_total", "Requests that restored a cached prefix (last poll).", "counter",
         [](const WorkerSnapshot& s) { return s.prefix_hits; });
  family("flashtier_worker_prefix_cache_misses_total", "Requests that found no cached prefix (last poll).", "counter",
         [](const WorkerSnapshot& s) { return s.prefix_misses; });
  family("flashtier_worker_prefix_cache_tokens_saved_total", "Prompt tokens restored instead of prefilled.", "counter",
         [](const WorkerSnapshot& s) { return s.prefix_tokens_saved; });
  family("flashtier_worker_prefix_cache_bytes", "Memory the prefix cache holds.", "gauge",
         [](const WorkerSnapshot& s) { return s.prefix_bytes; });
  family("flashtier_worker_prefix_cache_evictions_total", "Snapshots evicted from the prefix cache.", "counter",
         [](const WorkerSnapshot& s) { return s.prefix_evictions; });
  out.append("# HELP flashtier_worker_memory_bytes Memory the worker holds per category (VRAM on the CUDA backend).\n"
             "# TYPE flashtier_worker_memory_bytes gauge\n");
  for (const auto& s : snap)
    for (const auto& [cat, bytes] : s.memory)
      out.append("flashtier_worker_memory_bytes{worker=\"")
          .append(escape_label(s.address))
          .append("\",category=\"")
          .append(escape_label(cat))
          .append("\"} ")
          .append(std::to_string(bytes))
          .append("\n");
  out.append("# HELP flashtier_worker_engine_counter Counters of the worker's engine (expert cache, graphs).\n"
             "# TYPE flashtier_worker_engine_counter counter\n");
  for (const auto& s : snap)
    for (const auto& [name, value] : s.counters)
      out.append("flashtier_worker_engine_counter{worker=\"")
          .append(escape_label(s.address))
          .append("\",name=\"")
          .append(escape_label(name))
          .append("\"} ")
          .append(std::to_string(value))
          .append("\n");
  return out;
}

}  // namespace ft::gateway
