// flashtier-gpu-worker --model DIR [--listen HOST:PORT] [--experts local|ADDR] [--max-batch-size N]
//                      [--chunk-size N] [--context-size N] [--max-queue N] [--served-model-name NAME]
//                      [--backend cuda|cpu|auto] [--device N|auto] [--vram-budget-gb G]
//                      [--prefix-cache-gb G] [--prefix-snapshot-stride N] [--tier-mode M]
//                      [--expert-cache-gb G] [--admit-per-step N] [--staging-min-rows N] [--staging-slots N]
//                      [--drain-timeout S] [--tls-cert F --tls-key F [--tls-client-ca F]]
// Serves the public Generation API (proto/flashtier/generate.proto) for one model. SIGTERM
// drains: Health goes NOT_SERVING, new calls get UNAVAILABLE, running ones finish (up to
// --drain-timeout), then exit 0.
#include <grpcpp/grpcpp.h>

#include <csignal>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include "gpu-worker/service/generation_service.h"

namespace {

int usage() {
  std::cerr << "usage: flashtier-gpu-worker --model DIR [--listen HOST:PORT] [--experts local|ADDR]\n"
               "         [--max-batch-size N] [--chunk-size N] [--context-size N] [--max-queue N]\n"
               "         [--served-model-name NAME] [--backend cuda|cpu|auto] [--device N|auto] [--vram-budget-gb G]\n"
               "         [--prefix-cache-gb G] [--prefix-snapshot-stride N] [--tier-mode fast|exact|cpu]\n"
               "         [--expert-cache-gb G] [--admit-per-step N] [--precision auto|fp32|fp16]\n"
               "  --backend         cuda: the GPU engine; cpu: the fp32 reference engine; auto (default):\n"
               "                    cuda when a GPU is present, else cpu (the choice is logged at start)\n"
               "  --device N|auto   CUDA device index (default 0); auto: the first GPU no other gpu-worker\n"
               "                    holds (a lock file per GPU in --device-lock-dir, default /dev/shm)\n"
               "  --vram-budget-gb  cap on all VRAM the worker allocates (default: the card's free memory)\n"
               "  --precision P     CUDA backend: fp32 (fp32 activations and caches: the reference engine's\n"
               "                    results), fp16 (tensor-core operands, fp32 accumulation), or auto\n"
               "                    (default): fp32 for bf16/fp32 checkpoints, fp16 for EXL3 ones\n"
               "  --prefix-cache-gb G         memory for prefix-cache snapshots (default 2; 0: off)\n"
               "  --prefix-snapshot-stride N  also snapshot long prefills every N tokens (default 4096; 0: at request ends only)\n"
               "  --tier-mode fast|exact|cpu  CUDA backend, remote EXL3 experts (hot ones cached in VRAM): fast (default)\n"
               "                              = each layer's cache misses split between the GPU reading them zero-copy\n"
               "                              from the cpu-expert-worker's segment and that worker's exact CPU kernels,\n"
               "                              by a cost model calibrated at start; exact = zero-copy only; cpu = the\n"
               "                              CPU tier computes every miss\n"
               "  --expert-cache-gb G         VRAM expert cache (default 0: what the VRAM budget leaves)\n"
               "  --admit-per-step N          expert blocks copied into the cache per step at most (default 32)\n"
               "  --cache-admission A         gated (default): a miss replaces the cache's CLOCK victim only if it was\n"
               "                              used at least as often lately; clock: every miss may replace it\n"
               "  --expert-stats FILE         routing statistics (a line per MoE layer: the layer, then each expert's\n"
               "                              use count; flashtier-tier-sim --write-stats makes one from a trace): the\n"
               "                              cache starts with the most used experts\n"
               "  --expert-stats-out FILE     at shutdown, write the cache's expert use counts there (the same format)\n"
               "  --staging-min-rows N        prefill chunks of at least N rows (default 512, at least 65) copy each\n"
               "                              MoE layer's experts that are not in VRAM into staging slots one layer\n"
               "                              ahead instead of reading them zero-copy per 32-row batch\n"
               "  --staging-slots N           cache slots staging borrows during such chunks (default -1: two MoE\n"
               "                              layers' worth, at most 3/4 of the cache; 0: no staging)\n"
               "  --tier-wait-s S             CUDA backend: wait up to S s at load for the expert tier (default 300)\n"
               "  --experts local   routed experts in this process (no cpu-expert-worker)\n"
               "  --experts ADDR    shm:<ring> | grpc:<host:port> | auto:<host:port> of a cpu-expert-worker\n"
               "  --drain-timeout S SIGTERM: running generations get S seconds to finish (default 30)\n"
               "  --tls-cert F --tls-key F  serve gRPC over TLS (PEM); --tls-client-ca F also requires\n"
               "                    client certificates signed by F (mutual TLS)\n"
               "  --listen defaults to 127.0.0.1:50051 (loopback): name an address to serve other hosts\n";
  return 2;
}

std::atomic<int> g_signals{0};

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
  ft::worker::WorkerOptions o;
  std::string listen = "127.0.0.1:50051";
  std::string tls_cert, tls_key, tls_client_ca;
  int drain_timeout_s = 30;
  std::string cache_admission = "gated";
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "-h" || a == "--help") return usage(), 0;
      if (i + 1 >= argc) return usage();
      const std::string v = argv[++i];
      if (a == "--model") o.model_dir = v;
      else if (a == "--listen") listen = v;
      else if (a == "--experts") o.experts = v;
      else if (a == "--max-batch-size") o.scheduler.max_batch_size = std::stoi(v);
      else if (a == "--chunk-size") o.scheduler.chunk_size = std::stoi(v);
      else if (a == "--context-size") o.context_size = std::stoll(v);
      else if (a == "--max-queue") o.scheduler.max_queue = std::stoi(v);
      else if (a == "--served-model-name") o.served_model_name = v;
      else if (a == "--backend") o.backend = v;
      else if (a == "--device") o.device = v == "auto" ? -1 : std::stoi(v);
      else if (a == "--device-lock-dir") o.device_lock_dir = v;
      else if (a == "--vram-budget-gb") o.vram_budget_gb = std::stod(v);
      else if (a == "--prefix-cache-gb") o.prefix_cache_gb = std::stod(v);
      else if (a == "--prefix-snapshot-stride") o.prefix_snapshot_stride = std::stoll(v);
      else if (a == "--tier-mode") o.tier_mode = v;
      else if (a == "--precision") o.precision = v;
      else if (a == "--expert-cache-gb") o.expert_cache_gb = std::stod(v);
      else if (a == "--admit-per-step") o.admit_per_step = std::stoi(v);
      else if (a == "--cache-admission") cache_admission = v;
      else if (a == "--expert-stats") o.expert_stats = v;
      else if (a == "--expert-stats-out") o.expert_stats_out = v;
      else if (a == "--staging-min-rows") o.staging_min_rows = std::stoll(v);
      else if (a == "--staging-slots") o.staging_slots = std::stoi(v);
      else if (a == "--tier-wait-s") o.tier_wait_s = std::stoi(v);
      else if (a == "--drain-timeout") drain_timeout_s = std::stoi(v);
      else if (a == "--tls-cert") tls_cert = v;
      else if (a == "--tls-key") tls_key = v;
      else if (a == "--tls-client-ca") tls_client_ca = v;
      else return usage();
    }
  } catch (const std::exception& e) {
    std::cerr << "flashtier-gpu-worker: bad number: " << e.what() << "\n";
    return 2;
  }
  if (o.model_dir.empty()) return usage();
  if (o.device < -1) {
    std::cerr << "flashtier-gpu-worker: --device must be a device index or auto\n";
    return 2;
  }
  if (o.precision != "auto" && o.precision != "fp32" && o.precision != "fp16") {
    std::cerr << "flashtier-gpu-worker: --precision must be auto, fp32 or fp16\n";
    return 2;
  }
  if (cache_admission != "gated" && cache_admission != "clock") {
    std::cerr << "flashtier-gpu-worker: --cache-admission must be gated or clock, not '" << cache_admission << "'\n";
    return 2;
  }
  o.expert_cache_gate = cache_admission == "gated";
  if (!o.expert_stats.empty() && !std::ifstream(o.expert_stats)) {
    std::cerr << "flashtier-gpu-worker: --expert-stats " << o.expert_stats << ": cannot open the file\n";
    return 2;
  }
  if (o.tier_mode != "fast" && o.tier_mode != "exact" && o.tier_mode != "cpu") {
    std::cerr << "flashtier-gpu-worker: --tier-mode must be fast, exact or cpu\n";
    return 2;
  }
  if (o.scheduler.max_batch_size < 1 || o.scheduler.chunk_size < 1 || o.scheduler.max_queue < 0) {
    std::cerr << "flashtier-gpu-worker: --max-batch-size and --chunk-size must be >= 1\n";
    return 2;
  }
  if (tls_cert.empty() != tls_key.empty() || (!tls_client_ca.empty() && tls_cert.empty())) {
    std::cerr << "flashtier-gpu-worker: --tls-cert and --tls-key go together (and --tls-client-ca needs them)\n";
    return 2;
  }
  if (o.admit_per_step < 0 || o.staging_min_rows < 0 || o.staging_slots < -1) {
    std::cerr << "flashtier-gpu-worker: --admit-per-step and --staging-min-rows must be >= 0, --staging-slots >= -1\n";
    return 2;
  }
  if (drain_timeout_s < 0) {
    std::cerr << "flashtier-gpu-worker: --drain-timeout must be >= 0\n";
    return 2;
  }
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!tls_cert.empty()) {
    try {
      grpc::SslServerCredentialsOptions so(tls_client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                                                  : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
      so.pem_key_cert_pairs.push_back({read_file(tls_key), read_file(tls_cert)});
      if (!tls_client_ca.empty()) so.pem_root_certs = read_file(tls_client_ca);
      creds = grpc::SslServerCredentials(so);
    } catch (const std::exception& e) {
      std::cerr << "flashtier-gpu-worker: TLS: " << e.what() << "\n";
      return 2;
    }
  }
  ft::worker::WorkerCore core(o);
  ft::worker::GenerationService service(core);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, creds, &port);
  builder.RegisterService(&service);
  grpc::ResourceQuota quota("gpu-worker");
  quota.SetMaxThreads(512);  // one per open stream in the sync API
  builder.SetResourceQuota(quota);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::cerr << "flashtier-gpu-worker: cannot listen on " << listen << "\n";
    return 1;
  }
  // The handlers before the line that says the worker is up: whoever waits for that line may
  // signal at once (a signal between the two used to kill the worker instead of draining it).
  std::signal(SIGTERM, [](int) { g_signals.fetch_add(1); });
  std::signal(SIGINT, [](int) { g_signals.fetch_add(1); });
  // One write (std::cerr is unbuffered: each << would be its own).
  std::cerr << ("gpu-worker: listening on port " + std::to_string(port) + (tls_cert.empty() ? "" : " (TLS)") + "\n")
            << std::flush;
  while (g_signals.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Drain: the running generations finish (a second signal or the timeout cuts them short).
  service.begin_drain();
  std::cerr << "gpu-worker: draining (" << service.active_generations() << " generation(s) running, up to "
            << drain_timeout_s << " s)" << std::endl;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(drain_timeout_s);
  while (service.active_generations() > 0 && g_signals.load() < 2 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::cerr << "gpu-worker: drained (" << service.active_generations() << " still running); exiting" << std::endl;
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}
