// flashtier-test-ring-peer --ring NAME --hidden D [--channels N] [--max-tokens N] [--fingerprint S]
// A ring server with a known handler, for the ring tests:
//   out[t][d] = Σ_k w[t,k]·(x[t][d] + ids[t,k])   (ids −1 skipped)
// layer 99: rejected with "no such layer 99"; layer 7: sleeps 10 s first (a request in flight);
// layer 66: the process kills itself mid-request. SIGTERM stops the server cleanly (exit 0).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "shared/core/error.h"
#include "shared/ipc/ring_server.h"

int main(int argc, char** argv) {
  std::string ring;
  ft::ipc::RingConfig cfg;
  ft::ipc::TierInfo info;
  info.hidden = 16;
  info.fingerprint = "peer";
  info.n_layers = 100;
  info.n_experts = 64;
  info.top_k = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--ring") ring = v;
    else if (a == "--hidden") info.hidden = static_cast<uint32_t>(std::stoul(v));
    else if (a == "--channels") cfg.channels = static_cast<uint32_t>(std::stoul(v));
    else if (a == "--max-tokens") cfg.max_tokens = static_cast<uint32_t>(std::stoul(v));
    else if (a == "--fingerprint") info.fingerprint = v;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  try {
    ft::ipc::RingServer server(ring, cfg, info, [](const ft::ipc::ExpertBatch& b, float* out) {
      if (b.layer == 99) throw ft::Error("no such layer 99");
      if (b.layer == 7) std::this_thread::sleep_for(std::chrono::seconds(10));
      if (b.layer == 66) raise(SIGKILL);
      for (uint32_t t = 0; t < b.n_tokens; ++t)
        for (uint32_t d = 0; d < b.hidden; ++d) {
          float s = 0;
          for (uint32_t k = 0; k < b.slots; ++k) {
            const int32_t e = b.expert_ids[t * b.slots + k];
            if (e >= 0) s += b.weights[t * b.slots + k] * (b.x[t * b.hidden + d] + static_cast<float>(e));
          }
          out[t * b.hidden + d] = s;
        }
    });
    std::printf("serving ring %s\n", ring.c_str());
    std::fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    server.stop();
    std::printf("stopped after %llu requests\n", static_cast<unsigned long long>(server.requests()));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ring peer: %s\n", e.what());
    return 2;
  }
}
