// flashtier-cpu-expert-worker: holds every routed expert of a model in a shared-memory segment and
// computes expert batches for gpu-workers (shm ring on this host, gRPC from anywhere).
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "cpu-expert-worker/expert_engine.h"
#include "cpu-expert-worker/fingerprint.h"
#include "cpu-expert-worker/grpc_service.h"
#include "cpu-expert-worker/log.h"
#include "cpu-expert-worker/options.h"
#include "cpu-expert-worker/ring_tier.h"
#include "cpu-expert-worker/segment_builder.h"
#include "shared/core/error.h"
#include "shared/exl3/thread_pool.h"
#include "shared/ipc/liveness.h"
#include "shared/ipc/ring_server.h"
#include "shared/model/config.h"

using namespace ft;
using namespace ft::cew;
using clk = std::chrono::steady_clock;

namespace {

// Signals are taken by one thread with sigwait (blocked everywhere else), so shutdown runs as
// ordinary code instead of inside a handler.
struct StopSignal {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::atomic<bool> cancel{false};
  int signal = 0;

  void start(const sigset_t& set) {
    std::thread([this, set] {
      int sig = 0;
      sigwait(&set, &sig);
      {
        std::lock_guard<std::mutex> lk(mu);
        stop = true;
        signal = sig;
      }
      cancel = true;
      cv.notify_all();
    }).detach();
  }
  void wait() {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [this] { return stop; });
  }
};

void write_ready_file(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << j.dump() << "\n";
    if (!f) throw Error("cannot write " + tmp);
  }
  std::filesystem::rename(tmp, path);
}

int run(const WorkerOptions& o, StopSignal& stop) {
  if (o.remove_segment) {
    const bool seg = ipc::ShmMapping::remove(o.segment);
    std::string msg = "segment " + o.segment + (seg ? " removed" : " did not exist");
    if (o.ring != "none") msg += "; ring " + o.ring + (ipc::RingServer::remove(o.ring) ? " removed" : " did not exist");
    log_line(msg);
    return 0;
  }
  const ModelConfig cfg = load_config(o.model);
  auto t0 = clk::now();
  const std::string fp = model_fingerprint(o.model);
  const double fp_ms = std::chrono::duration<double, std::milli>(clk::now() - t0).count();

  WorkerState st;
  st.info.hidden = static_cast<uint32_t>(cfg.hidden_size);
  st.info.intermediate = static_cast<uint32_t>(cfg.moe_intermediate_size);
  st.info.n_layers = static_cast<uint32_t>(cfg.num_hidden_layers);
  st.info.n_experts = static_cast<uint32_t>(cfg.n_routed_experts);
  st.info.top_k = static_cast<uint32_t>(cfg.num_experts_per_tok);
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l)
    if (cfg.is_moe(l)) st.info.moe_layers.push_back(static_cast<uint32_t>(l));
  st.info.fingerprint = fp;
  st.info.segment = o.segment;
  st.ring_name = o.ring == "none" ? "" : o.ring;
  st.host_id = ipc::host_boot_id();
  st.layout_version = ipc::kSegmentLayoutVersion;
  const int threads = o.threads > 0 ? o.threads : exl3::default_threads(1);
  st.threads = static_cast<uint32_t>(threads);

  ExpertTierService service(st);
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  if (o.listen != "none") {
    grpc::ServerBuilder b;
    b.AddListeningPort(o.listen, grpc::InsecureServerCredentials(), &port);
    b.SetMaxReceiveMessageSize(INT_MAX);
    b.SetMaxSendMessageSize(INT_MAX);
    b.RegisterService(&service);
    server = b.BuildAndStart();
    if (!server || port == 0) throw Error("cannot listen on " + o.listen + " (address in use or malformed?)");
    log_line("gRPC ExpertTier listening on " + o.listen + " (port " + std::to_string(port) + ")");
  }

  SegmentOptions so;
  so.name = o.segment;
  so.threads = threads;
  so.force_rebuild = o.rebuild;
  so.cancel = &stop.cancel;
  OpenedSegment seg;
  try {
    seg = open_or_build_segment(o.model, cfg, fp, so, &st.progress);
  } catch (const Error&) {
    if (stop.cancel) {
      log_line("stopped while loading (the partial segment was removed)");
      if (server) server->Shutdown();
      return 0;
    }
    throw;
  }
  const auto& h = seg.segment.header();
  char idbuf[32];
  std::snprintf(idbuf, sizeof idbuf, "%016llx", static_cast<unsigned long long>(h.build_id));
  if (seg.reattached) {
    char line[256];
    std::snprintf(line, sizeof line, "re-attached to segment %s in %.3f ms (fingerprint %.1f ms), %s, build %s; no reload",
                  o.segment.c_str(), seg.seconds * 1e3, fp_ms, fmt_bytes(static_cast<double>(h.total_bytes)).c_str(),
                  idbuf);
    log_line(line);
  }

  ipc::RingConfig rc;
  rc.channels = o.ring_channels;
  rc.max_tokens = o.ring_max_tokens;
  rc.max_slots = std::max<uint32_t>(16, static_cast<uint32_t>(cfg.num_experts_per_tok));
  ipc::RingServerOptions ro;
  ro.spin = std::chrono::microseconds(o.spin_us);
  RingTier tier(seg.segment, static_cast<float>(cfg.swiglu_limit), threads, o.ring, rc, ro);
  SegmentExperts& engine = tier.engine();
  {
    char pf[96];
    std::snprintf(pf, sizeof pf, "segment pages mapped for the CPU kernels in %.2f s", tier.prefault_seconds());
    log_line(pf);
  }
  st.engine = &engine;
  {
    std::lock_guard<std::mutex> l(st.ring_mu);
    st.ring = tier.ring();
  }
  log_line("ready: " + std::to_string(h.n_moe_layers) + " MoE layers x " + std::to_string(h.n_experts) +
           " experts, " + std::to_string(engine.threads()) + " threads (" + engine.kernels() + ")" +
           (tier.has_ring() ? ", ring " + o.ring : std::string()) + (server ? ", gRPC port " + std::to_string(port) : std::string()));
  if (!o.ready_file.empty()) {
    nlohmann::json j;
    j["pid"] = getpid();
    j["grpc_port"] = port;
    j["ring"] = st.ring_name;
    j["segment"] = o.segment;
    j["reattached"] = seg.reattached;
    j["seconds"] = seg.seconds;
    j["fingerprint_ms"] = fp_ms;
    j["build_id"] = idbuf;
    j["fingerprint"] = fp;
    j["rebuild_reason"] = seg.rebuild_reason;
    write_ready_file(o.ready_file, j);
  }

  stop.wait();
  log_line(std::string("signal ") + std::to_string(stop.signal) + ": stopping");
  st.stopping = true;
  st.engine = nullptr;
  {
    std::lock_guard<std::mutex> l(st.ring_mu);
    st.ring = nullptr;
  }
  tier.stop();
  if (server) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  // A clean stop leaves no ring behind (clients that still map it see the server gone and
  // re-open by name); the segment stays on purpose: the next start re-attaches to it.
  if (tier.has_ring()) {
    tier.close_ring();
    ipc::RingServer::remove(o.ring);
  }
  log_line("stopped; ring " + (o.ring == "none" ? std::string("none") : o.ring + " removed") + "; segment " + o.segment +
           " kept for the next start (list and remove segments with flashtier-shm)");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before any thread starts: all inherit the mask
  StopSignal stop;
  stop.start(set);
  try {
    bool help = false;
    const WorkerOptions o = parse_options(argc, argv, &help);
    if (help) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    return run(o, stop);
  } catch (const Error& e) {
    log_line(std::string("error: ") + e.what());
    return 1;
  } catch (const std::exception& e) {
    log_line(std::string("error: ") + e.what());
    return 1;
  }
}
