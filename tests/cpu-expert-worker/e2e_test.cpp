// End to end: the flashtier-cpu-expert-worker binary serving the reference engine through
// RemoteExperts (shm ring, gRPC, auto): fixture logits and greedy tokens, batch invariance, a worker
// killed mid-stream and restarted (re-attach, no reload), SIGTERM, unreachable or wrong tiers.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "gpu-worker/experts/remote_experts.h"
#include "proto/flashtier/experts.grpc.pb.h"
#include "shared/core/error.h"
#include "shared/engine/reference_engine.h"
#include "shared/ipc/ring_server.h"
#include "shared/ipc/shm.h"
#include "shared/model/config.h"
#include "shared/model/safetensors.h"
#include "shared/model/tensor_convert.h"
#include "tests/cpu-expert-worker/test_models.h"
#include "tests/ipc/child_process.h"

using namespace ft;
using clk = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

const std::string kWorker = std::string(FLASHTIER_BIN_DIR) + "/flashtier-cpu-expert-worker";

const ModelWeights& tiny_chat() {
  static const ModelWeights w = load_model(test::tiny_chat());
  return w;
}

// One worker process on tiny-chat with its own segment, ring and port.
class Worker {
 public:
  Worker(const std::string& segment, const std::string& ring, const std::string& dir, const std::string& model,
         const std::string& listen = "127.0.0.1:0")
      : ready_(dir + "/ready-" + std::to_string(++starts_) + ".json") {
    proc_ = std::make_unique<test::ChildProcess>(
        kWorker,
        std::vector<std::string>{"--model", model, "--listen", listen, "--segment", segment, "--ring", ring,
                                 "--threads", "1", "--ready-file", ready_},
        dir + "/worker.log");
  }
  // The ready file's JSON once the worker serves.
  nlohmann::json wait_ready() {
    const auto t0 = clk::now();
    while (!std::filesystem::exists(ready_)) {
      if (clk::now() - t0 > 30s || proc_->wait(0ms) != -1)
        throw std::runtime_error("worker did not become ready; log:\n" + proc_->log());
      std::this_thread::sleep_for(5ms);
    }
    std::ifstream f(ready_);
    return nlohmann::json::parse(f);
  }
  test::ChildProcess& proc() { return *proc_; }

 private:
  static inline int starts_ = 0;
  std::string ready_;
  std::unique_ptr<test::ChildProcess> proc_;
};

class EndToEnd : public ::testing::Test {
 protected:
  void SetUp() override {
    segment = test::unique_name("e2e-seg");
    ring = segment + "-ring";
    worker = std::make_unique<Worker>(segment, ring, tmp.path(), test::tiny_chat());
    ready = worker->wait_ready();
    grpc = "127.0.0.1:" + std::to_string(ready["grpc_port"].get<int>());
  }
  void TearDown() override {
    worker.reset();
    ipc::ShmMapping::remove(segment);
    ipc::RingServer::remove(ring);
  }

  test::TempDir tmp;
  std::string segment, ring, grpc;
  std::unique_ptr<Worker> worker;
  nlohmann::json ready;
};

int64_t argmax(const float* x, int64_t n) { return std::max_element(x, x + n) - x; }

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Every fixture case: prefill and cached decode of the stored greedy tokens with remote experts;
// logits against LocalExperts, argmax against the fixture's tokens.
void run_fixture(ExpertBackend& remote, const std::string& what, const ModelWeights& w = tiny_chat(),
                 const std::string& fixture = "glm5-tiny-chat") {
  ReferenceEngine local_eng(w), remote_eng(w, &remote);
  const int64_t V = w.cfg.vocab_size;
  const TensorStore ref = TensorStore::open(test::fixture(fixture + "/reference.safetensors"));
  double worst = 0;
  int greedy = 0, total = 0;
  for (int c = 0; ref.find("case" + std::to_string(c) + ".input_ids"); ++c) {
    const std::string p = "case" + std::to_string(c) + ".";
    std::vector<int32_t> ids;
    for (int64_t v : to_i64(ref.get(p + "input_ids"))) ids.push_back(static_cast<int32_t>(v));
    const auto gen = to_i64(ref.get(p + "generated_ids"));
    SequenceState a = local_eng.new_state(), b = remote_eng.new_state();
    auto la = local_eng.prefill(a, ids, false), lb = remote_eng.prefill(b, ids, false);
    for (size_t i = 0; i < gen.size(); ++i) {
      worst = std::max(worst, rel_l2(lb, la));
      ASSERT_EQ(argmax(lb.data(), V), argmax(la.data(), V)) << what << " case " << c << " step " << i;
      greedy += argmax(lb.data(), V) == gen[i];
      ++total;
      la = local_eng.decode(a, static_cast<int32_t>(gen[i]));
      lb = remote_eng.decode(b, static_cast<int32_t>(gen[i]));
    }
  }
  std::printf("%s: %d/%d greedy tokens, logits rel_l2 vs LocalExperts <= %.2e\n", what.c_str(), greedy, total, worst);
  EXPECT_EQ(greedy, total) << what;
  EXPECT_LT(worst, 1e-5) << what;
}

}  // namespace

TEST_F(EndToEnd, FixtureTokensThroughEveryTransport) {
  EXPECT_FALSE(ready["reattached"].get<bool>());
  for (const std::string& addr : {"shm:" + ring, "grpc:" + grpc, "auto:" + grpc}) {
    auto remote = RemoteExperts::create(addr, RemoteExpertsOptions::for_model(tiny_chat().cfg));
    remote->connect();
    EXPECT_EQ(remote->transport(), addr[0] == 'g' ? addr : "shm:" + ring) << addr;
    run_fixture(*remote, addr);
  }
}

TEST(EndToEndExl3, Exl3ExpertsThroughTheRing) {
  test::TempDir tmp;
  const std::string segment = test::unique_name("e2e-exl3"), ring = segment + "-ring";
  Worker worker(segment, ring, tmp.path(), test::tiny_exl3());
  worker.wait_ready();
  const ModelWeights w = load_model(test::tiny_exl3());  // dense equivalents of the EXL3 linears
  auto remote = RemoteExperts::create("shm:" + ring, RemoteExpertsOptions::for_model(w.cfg));
  run_fixture(*remote, "exl3 shm:" + ring, w, "glm5-tiny-exl3");
  ipc::ShmMapping::remove(segment);
  ipc::RingServer::remove(ring);
}

// The GPU's operand rounding (exl3/operands.h F16Rows), asked for by the tier split, reaches the
// worker over both transports: the same bits over shm and gRPC, and not the fp32 result.
TEST(EndToEndExl3, F16OperandsReachTheWorkerOverRingAndGrpc) {
  test::TempDir tmp;
  const std::string segment = test::unique_name("e2e-f16"), ring = segment + "-ring";
  Worker worker(segment, ring, tmp.path(), test::tiny_exl3());
  const nlohmann::json ready = worker.wait_ready();
  const std::string grpc = "127.0.0.1:" + std::to_string(ready["grpc_port"].get<int>());
  const ModelConfig cfg = load_config(test::tiny_exl3());
  int64_t layer = 0;
  while (!cfg.is_moe(layer)) ++layer;
  const int64_t D = cfg.hidden_size, n = 3;
  std::vector<float> x(static_cast<size_t>(n * D));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 2.0f;
  std::vector<Routing> routes(static_cast<size_t>(n), Routing{{0, 3, 5, 7}, {0.5f, 0.25f, 0.75f, 1.0f}});
  routes[1] = Routing{{1, 2, 6, 7}, {1.0f, 0.5f, 0.5f, 0.25f}};
  std::vector<std::vector<float>> got;
  for (const std::string& addr : {"shm:" + ring, "grpc:" + grpc})
    for (exl3::Operands op : {exl3::Operands::F16Rows, exl3::Operands::F32}) {
      auto remote = RemoteExperts::create(addr, RemoteExpertsOptions::for_model(cfg));
      got.emplace_back(x.size());
      remote->compute(layer, x.data(), n, routes, got.back().data(), op);
    }
  EXPECT_EQ(got[0], got[2]) << "fp16 operands: shm and gRPC differ";
  EXPECT_EQ(got[1], got[3]) << "fp32 operands: shm and gRPC differ";
  const double e = rel_l2(got[0], got[1]);
  EXPECT_GT(e, 1e-5) << "the flag did not change the result";
  EXPECT_LT(e, 1e-2);
  ipc::ShmMapping::remove(segment);
  ipc::RingServer::remove(ring);
}

// Stats names every client: two gpu-workers on ring channels (their pids, requests, tokens,
// time computing and queued) and one on a gRPC stream, while they are connected.
TEST_F(EndToEnd, StatsNamesEveryClientWithItsRequests) {
  const ModelConfig& cfg = tiny_chat().cfg;
  int64_t layer = 0;
  while (!cfg.is_moe(layer)) ++layer;
  const int64_t D = cfg.hidden_size, n = 2;
  std::vector<float> x(static_cast<size_t>(n * D), 0.5f), out(x.size());
  const std::vector<Routing> routes(static_cast<size_t>(n), Routing{{0, 1}, {0.5f, 0.5f}});
  auto ring_a = RemoteExperts::create("shm:" + ring, RemoteExpertsOptions::for_model(cfg));
  auto ring_b = RemoteExperts::create("shm:" + ring, RemoteExpertsOptions::for_model(cfg));
  auto stream = RemoteExperts::create("grpc:" + grpc, RemoteExpertsOptions::for_model(cfg));
  for (int i = 0; i < 3; ++i) ring_a->compute(layer, x.data(), n, routes, out.data(), exl3::Operands::F32);
  ring_b->compute(layer, x.data(), n, routes, out.data(), exl3::Operands::F32);
  for (int i = 0; i < 2; ++i) stream->compute(layer, x.data(), n, routes, out.data(), exl3::Operands::F32);

  auto stub = flashtier::experts::v1::ExpertTier::NewStub(grpc::CreateChannel(grpc, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  flashtier::experts::v1::StatsResponse st;
  ASSERT_TRUE(stub->Stats(&ctx, {}, &st).ok());
  EXPECT_EQ(st.threads(), 1u);
  std::vector<uint64_t> ring_requests;
  int streams = 0;
  for (const auto& c : st.clients()) {
    if (c.client().rfind("ring channel ", 0) == 0) {
      if (c.pid() == 0) {
        EXPECT_EQ(c.requests(), 0u) << c.client();
        continue;
      }
      EXPECT_EQ(c.pid(), static_cast<uint32_t>(getpid())) << c.client();
      EXPECT_EQ(c.tokens(), c.requests() * n) << c.client();
      EXPECT_GT(c.busy_ms(), 0.0) << c.client();
      ring_requests.push_back(c.requests());
    } else {
      ++streams;
      EXPECT_EQ(c.requests(), 2u) << c.client();
      EXPECT_EQ(c.tokens(), 2u * n) << c.client();
      EXPECT_EQ(c.failed(), 0u) << c.client();
    }
  }
  std::sort(ring_requests.begin(), ring_requests.end());
  EXPECT_EQ(ring_requests, (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ(streams, 1);
}

// Eight sequences decoded together give each one the same logits, bit for bit, as alone.
TEST_F(EndToEnd, ResultsDoNotDependOnTheBatch) {
  auto remote = RemoteExperts::create("shm:" + ring);
  const ModelWeights& w = tiny_chat();
  ReferenceEngine eng(w, remote.get());
  std::vector<std::vector<int32_t>> prompts;
  for (int s = 0; s < 8; ++s) {
    std::vector<int32_t> p;
    for (int i = 0; i < 5 + 3 * s; ++i) p.push_back((i * 31 + s * 97 + 5) % 3000);
    prompts.push_back(p);
  }
  std::vector<std::vector<float>> alone;
  std::vector<int32_t> next(8);
  for (int s = 0; s < 8; ++s) {
    SequenceState st = eng.new_state();
    const auto l = eng.prefill(st, prompts[s], false);
    next[s] = static_cast<int32_t>(argmax(l.data(), w.cfg.vocab_size));
    alone.push_back(eng.decode(st, next[s]));
  }
  std::vector<SequenceState> states;
  for (int s = 0; s < 8; ++s) states.push_back(eng.new_state());
  std::vector<ForwardItem> items;
  for (int s = 0; s < 8; ++s) items.push_back({&states[s], prompts[s], false, {}});
  eng.forward(items);  // eight prefills in one batch
  items.clear();
  for (int s = 0; s < 8; ++s) items.push_back({&states[s], {&next[s], 1}, false, {}});
  eng.forward(items);  // eight decodes in one batch
  for (int s = 0; s < 8; ++s) EXPECT_EQ(items[s].logits, alone[s]) << "sequence " << s;
}

TEST_F(EndToEnd, KilledWorkerFailsTheStreamAndItsRestartReattaches) {
  const std::string build_id = ready["build_id"];
  const ModelWeights& w = tiny_chat();
  std::vector<float> x(4 * 64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * static_cast<float>(i));
  std::vector<Routing> routes(4, Routing{{1, 5, 9, 12}, {0.5f, 0.25f, 0.75f, 1.0f}});
  std::vector<float> before(x.size()), after(x.size());
  for (const std::string& addr : {"grpc:" + grpc, "shm:" + ring}) {
    auto remote = RemoteExperts::create(addr, RemoteExpertsOptions::for_model(w.cfg));
    remote->compute(3, x.data(), 4, routes, before.data(), exl3::Operands::F32);
    // Requests keep flowing while the worker is killed: one of them fails, none hangs.
    std::atomic<bool> failed{false};
    std::string error;
    std::thread t([&] {
      const auto t0 = clk::now();
      std::vector<float> out(x.size());
      while (!failed && clk::now() - t0 < 10s) {
        try {
          remote->compute(3, x.data(), 4, routes, out.data(), exl3::Operands::F32);
        } catch (const Error& e) {
          error = e.what();
          failed = true;
        }
      }
    });
    std::this_thread::sleep_for(50ms);
    const auto killed = clk::now();
    worker->proc().kill(SIGKILL);
    t.join();
    ASSERT_TRUE(failed) << addr;
    std::printf("%s: killed worker reported after %.1f ms: %s\n", addr.c_str(),
                std::chrono::duration<double, std::milli>(clk::now() - killed).count(), error.c_str());
    EXPECT_EQ(worker->proc().wait(5s), 128 + SIGKILL);  // a launcher restarts once it has reaped the old one
    EXPECT_FALSE(remote->connected());
    EXPECT_THROW(remote->compute(3, x.data(), 4, routes, after.data(), exl3::Operands::F32), Error) << "worker is down";

    // Restarted on the same address, as a launcher does.
    worker = std::make_unique<Worker>(segment, ring, tmp.path(), test::tiny_chat(), grpc);
    const auto again = worker->wait_ready();
    EXPECT_TRUE(again["reattached"].get<bool>());
    EXPECT_EQ(again["build_id"], build_id) << "the restarted worker rebuilt the segment";
    EXPECT_LT(again["seconds"].get<double>(), 1.0);
    // The same client object reconnects by itself.
    const auto t0 = clk::now();
    for (;;) {
      try {
        remote->compute(3, x.data(), 4, routes, after.data(), exl3::Operands::F32);
        break;
      } catch (const Error& e) {
        ASSERT_LT(clk::now() - t0, 5s) << "no reconnect: " << e.what();
        std::this_thread::sleep_for(20ms);
      }
    }
    EXPECT_EQ(after, before);
    EXPECT_EQ(remote->transport(), addr);
  }
}

TEST_F(EndToEnd, SigtermKeepsTheSegmentAndRemovesTheRing) {
  ASSERT_TRUE(ipc::ShmMapping::exists(ring));
  worker->proc().kill(SIGTERM);
  EXPECT_EQ(worker->proc().wait(10s), 0);
  EXPECT_NE(worker->proc().log().find("stopped; ring " + ring + " removed; segment " + segment + " kept"), std::string::npos)
      << worker->proc().log();
  EXPECT_TRUE(ipc::ShmMapping::exists(segment));
  EXPECT_FALSE(ipc::ShmMapping::exists(ring));  // a clean stop leaves no ring behind
  worker = std::make_unique<Worker>(segment, ring, tmp.path(), test::tiny_chat());
  EXPECT_TRUE(worker->wait_ready()["reattached"].get<bool>());
  EXPECT_NE(worker->proc().log().find("re-attached to segment"), std::string::npos);
}

TEST_F(EndToEnd, WorkerOnAnotherModelIsRefused) {
  const ModelConfig other = load_config(test::tiny_exl3());
  auto remote = RemoteExperts::create("auto:" + grpc, RemoteExpertsOptions::for_model(other));
  try {
    remote->connect();
    FAIL() << "connected to a worker serving another model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("serves another model"), std::string::npos) << e.what();
  }
}

TEST(RemoteExpertsStandalone, UnreachableTiersFailFast) {
  EXPECT_THROW(RemoteExperts::create("tcp:1.2.3.4:5"), Error);
  EXPECT_THROW(RemoteExperts::create("grpc:"), Error);
  EXPECT_THROW(RemoteExperts::create("grpc:localhost"), Error);
  EXPECT_THROW(RemoteExperts::create("shm:a/b"), Error);
  std::vector<float> x(64), out(64);
  std::vector<Routing> routes(1, Routing{{0}, {1.0f}});
  for (const char* addr : {"shm:ft-test-no-such-ring", "grpc:127.0.0.1:1", "auto:127.0.0.1:1"}) {
    auto remote = RemoteExperts::create(addr);
    const auto t0 = clk::now();
    try {
      remote->compute(3, x.data(), 1, routes, out.data(), exl3::Operands::F32);
      ADD_FAILURE() << addr << " answered";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("unavailable"), std::string::npos) << e.what();
    }
    EXPECT_LT(clk::now() - t0, 2500ms) << addr;
    EXPECT_FALSE(remote->healthy());
  }
}

TEST(WorkerBinary, BadFlagsAndModelsExitWithAMessage) {
  test::TempDir tmp;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--threads", "x", "--model", "m"}, {"--listen"}, {"--model", tmp / "nothing"},
        {"--model", test::tiny_chat(), "--segment", "bad/name", "--listen", "none", "--ring", "none"}}) {
    test::ChildProcess p(kWorker, args, tmp / "log");
    EXPECT_EQ(p.wait(20s), 1) << args[0];
    EXPECT_NE(p.log().find("error:"), std::string::npos) << p.log();
  }
}
