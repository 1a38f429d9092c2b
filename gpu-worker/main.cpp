// flashtier-gpu-worker --model DIR [--listen HOST:PORT] [--experts local|ADDR] [--max-batch-size N]
//                      [--chunk-size N] [--context-size N] [--max-queue N] [--served-model-name NAME]
//                      [--backend cuda|cpu|auto] [--device N] [--vram-budget-gb G]
//                      [--prefix-cache-gb G] [--prefix-snapshot-stride N] [--tier-mode M]
//                      [--expert-cache-gb G] [--admit-per-step N]
// Serves the public Generation API (proto/flashtier/generate.proto) for one model.
#include <grpcpp/grpcpp.h>

#include <csignal>
#include <iostream>
#include <string>
#include <thread>

#include "gpu-worker/service/generation_service.h"

namespace {

int usage() {
  std::cerr << "usage: flashtier-gpu-worker --model DIR [--listen HOST:PORT] [--experts local|ADDR]\n"
               "         [--max-batch-size N] [--chunk-size N] [--context-size N] [--max-queue N]\n"
               "         [--served-model-name NAME] [--backend cuda|cpu|auto] [--device N] [--vram-budget-gb G]\n"
               "         [--prefix-cache-gb G] [--prefix-snapshot-stride N] [--tier-mode fast|exact|cpu]\n"
               "         [--expert-cache-gb G] [--admit-per-step N]\n"
               "  --backend         cuda: the GPU engine; cpu: the fp32 reference engine; auto (default):\n"
               "                    cuda when a GPU is present, else cpu (the choice is logged at start)\n"
               "  --device N        CUDA device index (default 0)\n"
               "  --vram-budget-gb  cap on all VRAM the worker allocates (default: the card's free memory)\n"
               "  --prefix-cache-gb G         memory for prefix-cache snapshots (default 2; 0: off)\n"
               "  --prefix-snapshot-stride N  also snapshot long prefills every N tokens (default 4096; 0: at request ends only)\n"
               "  --tier-mode fast|exact|cpu  CUDA backend, remote EXL3 experts: exact = the GPU reads cache misses\n"
               "                              zero-copy from the cpu-expert-worker's segment (fast: the same for now);\n"
               "                              cpu = every MoE layer computed by the cpu-expert-worker\n"
               "  --expert-cache-gb G         VRAM expert cache (default 0: what the VRAM budget leaves)\n"
               "  --admit-per-step N          expert blocks copied into the cache per step at most (default 16)\n"
               "  --tier-wait-s S             CUDA backend: wait up to S s at load for the expert tier (default 300)\n"
               "  --experts local   routed experts in this process (no cpu-expert-worker)\n"
               "  --experts ADDR    shm:<ring> | grpc:<host:port> | auto:<host:port> of a cpu-expert-worker\n";
  return 2;
}

std::atomic<bool> g_stop{false};

}  // namespace

int main(int argc, char** argv) {
  ft::worker::WorkerOptions o;
  std::string listen = "127.0.0.1:50051";
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
      else if (a == "--device") o.device = std::stoi(v);
      else if (a == "--vram-budget-gb") o.vram_budget_gb = std::stod(v);
      else if (a == "--prefix-cache-gb") o.prefix_cache_gb = std::stod(v);
      else if (a == "--prefix-snapshot-stride") o.prefix_snapshot_stride = std::stoll(v);
      else if (a == "--tier-mode") o.tier_mode = v;
      else if (a == "--expert-cache-gb") o.expert_cache_gb = std::stod(v);
      else if (a == "--admit-per-step") o.admit_per_step = std::stoi(v);
      else if (a == "--tier-wait-s") o.tier_wait_s = std::stoi(v);
      else return usage();
    }
  } catch (const std::exception& e) {
    std::cerr << "flashtier-gpu-worker: bad number: " << e.what() << "\n";
    return 2;
  }
  if (o.model_dir.empty()) return usage();
  if (o.tier_mode != "fast" && o.tier_mode != "exact" && o.tier_mode != "cpu") {
    std::cerr << "flashtier-gpu-worker: --tier-mode must be fast, exact or cpu\n";
    return 2;
  }
  if (o.scheduler.max_batch_size < 1 || o.scheduler.chunk_size < 1 || o.scheduler.max_queue < 0) {
    std::cerr << "flashtier-gpu-worker: --max-batch-size and --chunk-size must be >= 1\n";
    return 2;
  }
  ft::worker::WorkerCore core(o);
  ft::worker::GenerationService service(core);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  grpc::ResourceQuota quota("gpu-worker");
  quota.SetMaxThreads(512);  // one per open stream in the sync API
  builder.SetResourceQuota(quota);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::cerr << "flashtier-gpu-worker: cannot listen on " << listen << "\n";
    return 1;
  }
  std::cerr << "gpu-worker: listening on port " << port << std::endl;
  std::signal(SIGTERM, [](int) { g_stop = true; });
  std::signal(SIGINT, [](int) { g_stop = true; });
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}
