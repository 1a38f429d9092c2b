// flashtier-local --model DIR --port N [options]
// Starts cpu-expert-worker, gpu-worker(s) and gateway on this host (loopback gRPC between them,
// the shared-memory ring between the workers), prints "ready" once the gateway's /health answers
// 200, restarts a child that dies, and stops them all on SIGTERM/SIGINT: one at a time, gateway
// first, each draining (in-flight requests finish, up to --drain-timeout) before the next.
// --gpus 0,1 | all: one gpu-worker per GPU (each `--device N`, its own sequences and expert
// cache), all on the one cpu-expert-worker's segment and ring; the gateway balances over them.
// --workers N: N gpu-workers without a device each (the CPU backend, or one GPU shared by budget).
#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>
#include <thread>

#include "deploy/local/free_port.h"
#include "deploy/local/gpu_list.h"
#include "deploy/local/http_probe.h"
#include "deploy/local/supervisor.h"
#include "shared/core/error.h"

namespace fs = std::filesystem;

namespace {

std::atomic<int> g_signal{0};

int usage() {
  std::cerr << "usage: flashtier-local --model DIR --port N [--host ADDR] [--max-batch-size N] [--chunk-size N]\n"
               "         [--context-size N] [--threads N] [--api-key KEY] [--served-model-name NAME]\n"
               "         [--segment NAME] [--ring NAME] [--experts-in-process]\n"
               "         [--backend cuda|cpu|auto] [--device N] [--vram-budget-gb G] [--prefix-cache-gb G]\n"
               "         [--prefix-snapshot-stride N] [--tier-mode fast|exact|cpu] [--expert-cache-gb G]\n"
               "         [--admit-per-step N] [--cache-admission gated|clock] [--expert-stats FILE] [--expert-stats-out FILE] [--staging-min-rows N] [--staging-slots N] [--precision auto|fp32|fp16]\n"
               "         [--drain-timeout S] [--api-key-file FILE]\n"
               "         [--gpus 0,1|all] [--workers N]\n"
               "  --gpus: one gpu-worker per listed CUDA device; --workers N: N gpu-workers (no device each).\n"
               "  --api-key KEY / --api-key-file FILE / $FLASHTIER_API_KEY: the gateway gets the key through its\n"
               "  environment, never on its command line.\n"
               "  Starts the three flashtier services for DIR and serves the OpenAI API on ADDR:N\n"
               "  (default 127.0.0.1). Prints 'ready' when the gateway's /health answers 200.\n";
  return 2;
}

std::string self_dir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  buf[n] = 0;
  return fs::path(buf).parent_path().string();
}

void log(const std::string& m) { std::cerr << "flashtier-local: " << m << std::endl; }

}  // namespace

int main(int argc, char** argv) {
  std::string model, host = "127.0.0.1", api_key, api_key_file, served_name, segment, ring;
  std::string gpus;
  int port = 0, drain_timeout_s = 30, workers = 0;
  bool device_flag = false;
  std::vector<std::string> worker_flags, expert_flags;
  bool in_process = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") return usage(), 0;
    if (a == "--experts-in-process") {
      in_process = true;
      continue;
    }
    if (i + 1 >= argc) return usage();
    const std::string v = argv[++i];
    if (a == "--model") model = v;
    else if (a == "--port") port = std::atoi(v.c_str());
    else if (a == "--host") host = v;
    else if (a == "--api-key") api_key = v;
    else if (a == "--api-key-file") api_key_file = v;
    else if (a == "--drain-timeout") drain_timeout_s = std::atoi(v.c_str());
    else if (a == "--served-model-name") served_name = v;
    else if (a == "--segment") segment = v;
    else if (a == "--ring") ring = v;
    else if (a == "--gpus") gpus = v;
    else if (a == "--workers") workers = std::atoi(v.c_str());
    else if (a == "--max-batch-size" || a == "--chunk-size" || a == "--context-size" || a == "--backend" ||
             a == "--device" || a == "--vram-budget-gb" || a == "--prefix-cache-gb" || a == "--prefix-snapshot-stride" || a == "--tier-mode" ||
             a == "--expert-cache-gb" || a == "--admit-per-step" || a == "--staging-min-rows" || a == "--staging-slots" ||
             a == "--cache-admission" || a == "--expert-stats" || a == "--expert-stats-out" || a == "--precision") {
      worker_flags.insert(worker_flags.end(), {a, v});
      device_flag = device_flag || a == "--device";
    }
    else if (a == "--threads") expert_flags.insert(expert_flags.end(), {a, v});
    else return usage();
  }
  if (model.empty() || port <= 0 || port > 65535 || drain_timeout_s < 0 || workers < 0 || workers > 64) return usage();
  // One entry per gpu-worker: its --device, or −1 for none.
  std::vector<int> devices;
  try {
    if (!gpus.empty()) {
      if (workers > 0 || device_flag) {
        log("--gpus names the devices itself: leave out --workers and --device");
        return 2;
      }
      devices = ft::local::parse_gpu_list(gpus, std::getenv("CUDA_VISIBLE_DEVICES"));
    } else {
      devices.assign(static_cast<size_t>(std::max(workers, 1)), -1);
    }
  } catch (const ft::Error& e) {
    log(e.what());
    return 2;
  }
  std::error_code ec;
  const std::string model_abs = fs::canonical(model, ec).string();
  if (ec || !fs::exists(fs::path(model_abs) / "config.json")) {
    log(model + ": not a model folder (no config.json)");
    return 2;
  }
  const std::string bin = self_dir();
  try {
    const int expert_port = ft::local::free_loopback_port();
    std::vector<int> worker_ports;
    for (size_t i = 0; i < devices.size(); ++i) worker_ports.push_back(ft::local::free_loopback_port());
    // Names derived from the model path and port, so a restarted launcher re-attaches to the
    // expert segment it built before and two launchers never share a ring.
    const std::string tag = std::to_string(std::hash<std::string>{}(model_abs) % 1000000007ULL);
    if (segment.empty()) segment = "flashtier-experts-" + tag;
    if (ring.empty()) ring = "flashtier-ring-" + std::to_string(port);

    ft::local::Supervisor sup(log);
    if (!in_process) {
      ft::local::ChildSpec experts{"cpu-expert-worker",
                                   {bin + "/flashtier-cpu-expert-worker", "--model", model_abs, "--listen",
                                    "127.0.0.1:" + std::to_string(expert_port), "--segment", segment, "--ring", ring}};
      experts.argv.insert(experts.argv.end(), expert_flags.begin(), expert_flags.end());
      sup.start(experts);
    }
    ft::local::ChildSpec gateway{"gateway",
                                 {bin + "/flashtier-gateway", "--model-dir", model_abs, "--port", std::to_string(port),
                                  "--host", host}};
    for (size_t i = 0; i < devices.size(); ++i) {
      const std::string name = devices.size() == 1 ? "gpu-worker" : "gpu-worker-" + std::to_string(i);
      ft::local::ChildSpec worker{name,
                                  {bin + "/flashtier-gpu-worker", "--model", model_abs, "--listen",
                                   "127.0.0.1:" + std::to_string(worker_ports[i]), "--experts",
                                   in_process ? std::string("local") : "auto:127.0.0.1:" + std::to_string(expert_port)}};
      worker.argv.insert(worker.argv.end(), worker_flags.begin(), worker_flags.end());
      if (devices[i] >= 0) worker.argv.insert(worker.argv.end(), {"--device", std::to_string(devices[i])});
      worker.argv.insert(worker.argv.end(), {"--drain-timeout", std::to_string(drain_timeout_s)});
      worker.stop_grace = std::chrono::seconds(drain_timeout_s + 5);
      if (!served_name.empty()) worker.argv.insert(worker.argv.end(), {"--served-model-name", served_name});
      sup.start(worker);
      gateway.argv.insert(gateway.argv.end(), {"--worker", "127.0.0.1:" + std::to_string(worker_ports[i])});
    }
    gateway.argv.insert(gateway.argv.end(), {"--drain-timeout", std::to_string(drain_timeout_s)});
    gateway.stop_grace = std::chrono::seconds(drain_timeout_s + 5);
    if (!api_key_file.empty()) gateway.argv.insert(gateway.argv.end(), {"--api-key-file", api_key_file});
    else if (!api_key.empty()) gateway.env.push_back("FLASHTIER_API_KEY=" + api_key);
    if (!served_name.empty()) gateway.argv.insert(gateway.argv.end(), {"--served-model-name", served_name});
    sup.start(gateway);

    signal(SIGTERM, [](int s) { g_signal = s; });
    signal(SIGINT, [](int s) { g_signal = s; });
    const std::string probe_host = host == "0.0.0.0" ? "127.0.0.1" : host;
    bool ready = false;
    while (g_signal == 0) {
      sup.poll();
      const bool healthy = ft::local::http_get_status(probe_host, port, "/health", std::chrono::milliseconds(500)) == 200;
      if (healthy && !ready) {
        std::cout << "ready" << std::endl;
        log("serving http://" + host + ":" + std::to_string(port) + "/v1 (model " + model_abs + ")");
      } else if (!healthy && ready) {
        log("/health is not 200; waiting for the services to come back");
      }
      ready = healthy;
      std::this_thread::sleep_for(std::chrono::milliseconds(ready ? 200 : 50));
    }
    log("signal " + std::to_string(g_signal.load()) + ": stopping the services (gateway, gpu-worker" +
        (devices.size() > 1 ? "s" : "") + ", cpu-expert-worker; each drains)");
    sup.stop_all(std::chrono::milliseconds(5000));
    return 0;
  } catch (const ft::Error& e) {
    log(e.what());
    return 1;
  }
}
