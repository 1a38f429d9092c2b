// Round trips of the two transports against a server process whose engine does nothing (it zeroes
// the output), so the numbers are transport cost only: request in, answer out.
#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cpu-expert-worker/bench/bench.h"
#include "cpu-expert-worker/expert_engine.h"
#include "cpu-expert-worker/grpc_service.h"
#include "gpu-worker/experts/remote_experts.h"
#include "shared/ipc/ring_server.h"

namespace ft::cew::bench {

namespace {

using clk = std::chrono::steady_clock;

class NullEngine : public ExpertEngine {
 public:
  explicit NullEngine(uint32_t hidden) {
    info_.hidden = hidden;
    info_.n_layers = 1;
    info_.n_experts = 288;
    info_.top_k = 8;
    info_.moe_layers = {0};
    info_.fingerprint = "bench";
  }
  const ipc::TierInfo& info() const override { return info_; }
  void compute(const ipc::ExpertBatch& b, float* out) override {
    std::memset(out, 0, uint64_t{b.n_tokens} * b.hidden * 4);
  }
  int threads() const override { return 1; }

 private:
  ipc::TierInfo info_;
};

[[noreturn]] void serve(const std::string& ring, uint32_t hidden, int port_fd) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  NullEngine eng(hidden);
  ipc::RingConfig rc;
  rc.channels = 2;
  rc.max_tokens = 64;
  ipc::RingServer rs(ring, rc, eng.info(), [&eng](const ipc::ExpertBatch& b, float* out) { eng.compute(b, out); });
  WorkerState st;
  st.engine = &eng;
  st.info = eng.info();
  ExpertTierService svc(st);
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.SetMaxReceiveMessageSize(INT_MAX);
  b.RegisterService(&svc);
  auto server = b.BuildAndStart();
  if (write(port_fd, &port, sizeof port) != sizeof port) _exit(3);
  int sig = 0;
  sigwait(&set, &sig);
  rs.stop();
  server->Shutdown();
  _exit(0);
}

struct Row {
  std::string transport, payload;
  Percentiles p;
};

Row measure(RemoteExperts& r, const std::string& transport, uint32_t hidden, int tokens, int iters,
            std::chrono::microseconds gap) {
  std::vector<float> x(static_cast<size_t>(tokens) * hidden, 0.5f), out(x.size());
  std::vector<Routing> routes(static_cast<size_t>(tokens), Routing{{0, 1, 2, 3, 4, 5, 6, 7}, std::vector<float>(8, 1.0f)});
  for (int i = 0; i < 200; ++i) r.compute(0, x.data(), tokens, routes, out.data(), ft::exl3::Operands::F32);
  std::vector<double> us;
  us.reserve(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    if (gap.count()) std::this_thread::sleep_for(gap);
    const auto t0 = clk::now();
    r.compute(0, x.data(), tokens, routes, out.data(), ft::exl3::Operands::F32);
    us.push_back(std::chrono::duration<double, std::micro>(clk::now() - t0).count());
  }
  char payload[96];
  if (tokens == 0) std::snprintf(payload, sizeof payload, "empty");
  else std::snprintf(payload, sizeof payload, "%d x %u fp32 in + out", tokens, hidden);
  std::string t = transport;
  if (gap.count()) t += " (idle " + std::to_string(gap.count() / 1000) + " ms before each)";
  return {t, payload, percentiles(std::move(us))};
}

}  // namespace

int transport_main(int argc, char** argv) {
  int iters = 20000, tokens = 8;
  uint32_t hidden = 4096;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--iters") iters = std::stoi(argv[i + 1]);
    else if (a == "--hidden") hidden = static_cast<uint32_t>(std::stoul(argv[i + 1]));
    else if (a == "--tokens") tokens = std::stoi(argv[i + 1]);
  }
  const std::string ring = "ft-bench-ring-" + std::to_string(getpid());
  int fds[2];
  if (pipe(fds) != 0) return 1;
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    serve(ring, hidden, fds[1]);
  }
  close(fds[1]);
  int port = 0;
  pollfd pfd{fds[0], POLLIN, 0};
  if (poll(&pfd, 1, 10000) != 1 || read(fds[0], &port, sizeof port) != sizeof port || port == 0) {
    std::fprintf(stderr, "bench server did not start\n");
    kill(child, SIGKILL);
    return 1;
  }
  auto shm = RemoteExperts::create("shm:" + ring);
  auto grpc = RemoteExperts::create("grpc:127.0.0.1:" + std::to_string(port));
  const auto idle = std::chrono::microseconds(1000);
  const int slow = std::max(100, iters / 40);
  std::vector<Row> rows;
  rows.push_back(measure(*shm, "shm ring", hidden, 0, iters, {}));
  rows.push_back(measure(*shm, "shm ring", hidden, tokens, iters, {}));
  rows.push_back(measure(*shm, "shm ring", hidden, tokens, slow, idle));
  rows.push_back(measure(*grpc, "gRPC stream (loopback)", hidden, 0, iters / 4, {}));
  rows.push_back(measure(*grpc, "gRPC stream (loopback)", hidden, tokens, iters / 4, {}));
  rows.push_back(measure(*grpc, "gRPC stream (loopback)", hidden, tokens, slow, idle));
  std::printf("%-46s %-26s %9s %9s %9s %8s\n", "transport", "payload", "p50 us", "p99 us", "mean us", "iters");
  for (const Row& r : rows)
    std::printf("%-46s %-26s %9.1f %9.1f %9.1f %8zu\n", r.transport.c_str(), r.payload.c_str(), r.p.p50, r.p.p99,
                r.p.mean, r.p.n);
  shm.reset();
  grpc.reset();
  kill(child, SIGTERM);
  int st = 0;
  waitpid(child, &st, 0);
  ipc::RingServer::remove(ring);
  return 0;
}

}  // namespace ft::cew::bench
