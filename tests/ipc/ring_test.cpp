// The request ring between two real processes (tests/ipc/ring_peer.cpp is the server): round
// trips, split batches, rejected batches, futex sleep and wake, dead and restarted servers,
// channel ownership.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "shared/ipc/ring_client.h"
#include "shared/ipc/ring_layout.h"
#include "shared/ipc/ring_server.h"
#include "shared/ipc/shm.h"
#include "tests/ipc/child_process.h"

using namespace ft::ipc;
using ft::test::ChildProcess;
using clk = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

const std::string kPeer = std::string(FLASHTIER_BIN_DIR) + "/flashtier-test-ring-peer";

struct Batch {
  uint32_t n, slots, hidden;
  std::vector<float> x, w;
  std::vector<int32_t> ids;
  Batch(uint32_t n_, uint32_t slots_, uint32_t hidden_, uint32_t seed) : n(n_), slots(slots_), hidden(hidden_) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1, 1);
    x.resize(size_t{n} * hidden);
    for (float& v : x) v = u(rng);
    ids.resize(size_t{n} * slots);
    w.resize(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      ids[i] = (i % 5 == 4) ? -1 : static_cast<int32_t>(rng() % 64);
      w[i] = u(rng);
    }
  }
  ExpertBatch view(uint32_t layer) const {
    return {layer, n, slots, hidden, x.data(), ids.data(), w.data()};
  }
  std::vector<float> expected() const {
    std::vector<float> o(size_t{n} * hidden);
    for (uint32_t t = 0; t < n; ++t)
      for (uint32_t d = 0; d < hidden; ++d) {
        float s = 0;
        for (uint32_t k = 0; k < slots; ++k) {
          const int32_t e = ids[t * slots + k];
          if (e >= 0) s += w[t * slots + k] * (x[t * hidden + d] + static_cast<float>(e));
        }
        o[t * hidden + d] = s;
      }
    return o;
  }
};

class Peer {
 public:
  explicit Peer(const std::string& ring, std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"--ring", ring, "--hidden", "16"};
    args.insert(args.end(), extra.begin(), extra.end());
    proc_ = std::make_unique<ChildProcess>(kPeer, args, "/tmp/" + ring + ".log");
  }
  ChildProcess& proc() { return *proc_; }

 private:
  std::unique_ptr<ChildProcess> proc_;
};

// Connects as soon as the peer serves (it starts in a few ms).
std::unique_ptr<RingClient> connect(const std::string& ring, RingClientOptions o = {}) {
  const auto t0 = clk::now();
  for (;;) {
    try {
      return std::make_unique<RingClient>(ring, o);
    } catch (const PeerLost&) {
      if (clk::now() - t0 > 10s) throw;
      std::this_thread::sleep_for(2ms);
    }
  }
}

class Ring : public ::testing::Test {
 protected:
  void SetUp() override { name = ft::test::unique_name("ring"); }
  void TearDown() override {
    RingServer::remove(name);
    std::remove(("/tmp/" + name + ".log").c_str());
  }
  std::string name;
};

}  // namespace

TEST_F(Ring, RoundTripsAcrossProcesses) {
  Peer peer(name, {"--fingerprint", "fp-123", "--max-tokens", "64"});
  auto c = connect(name);
  EXPECT_EQ(c->info().hidden, 16u);
  EXPECT_EQ(c->info().fingerprint, "fp-123");
  EXPECT_EQ(c->max_tokens(), 64u);
  for (uint32_t n : {1u, 8u, 0u, 64u, 150u}) {  // 150 > 64: sent in three pieces
    Batch b(n, 4, 16, n + 1);
    std::vector<float> out(size_t{n} * 16, -7.0f);
    c->call(b.view(3), out.data());
    EXPECT_EQ(out, b.expected()) << "n=" << n;
  }
}

TEST_F(Ring, RejectedBatchReportsTheReasonAndKeepsTheChannel) {
  Peer peer(name);
  auto c = connect(name);
  Batch b(2, 4, 16, 5);
  std::vector<float> out(32);
  try {
    c->call(b.view(99), out.data());
    FAIL() << "no error";
  } catch (const PeerLost& e) {
    FAIL() << "a rejected batch is not a lost peer: " << e.what();
  } catch (const ft::Error& e) {
    EXPECT_STREQ(e.what(), "no such layer 99");
  }
  c->call(b.view(1), out.data());
  EXPECT_EQ(out, b.expected());
  Batch wrong(1, 4, 8, 1);  // hidden 8 against a ring of 16
  EXPECT_THROW(c->call(wrong.view(1), out.data()), ft::Error);
}

// After each answer the server spins (2 ms by default), then sleeps on the doorbell; the client sleeps on its
// channel's state. Requests 20 ms apart therefore go through both futex wakes. A lost wake would
// cost the server's 50 ms safety timeout, so the median must stay far below that.
TEST_F(Ring, SleepingServerIsWokenByTheDoorbell) {
  Peer peer(name);
  RingClientOptions o;
  o.spin = std::chrono::microseconds(0);
  auto c = connect(name, o);
  Batch b(8, 4, 16, 9);
  std::vector<float> out(8 * 16);
  std::vector<double> ms;
  for (int i = 0; i < 15; ++i) {
    std::this_thread::sleep_for(20ms);
    const auto t0 = clk::now();
    c->call(b.view(1), out.data());
    ms.push_back(std::chrono::duration<double, std::milli>(clk::now() - t0).count());
    ASSERT_EQ(out, b.expected());
  }
  std::sort(ms.begin(), ms.end());
  EXPECT_LT(ms[ms.size() / 2], 10.0) << "median round trip after an idle gap";
}

TEST_F(Ring, DeadServerFailsTheWaitingClientQuickly) {
  Peer peer(name);
  auto c = connect(name);
  Batch b(2, 4, 16, 3);
  std::vector<float> out(32);
  std::atomic<bool> failed{false};
  clk::time_point failed_at;
  std::string what;
  std::thread t([&] {
    try {
      c->call(b.view(7), out.data());  // the peer sleeps 10 s on layer 7
    } catch (const PeerLost& e) {
      failed_at = clk::now();
      what = e.what();
      failed = true;
    }
  });
  std::this_thread::sleep_for(100ms);
  const auto killed_at = clk::now();
  peer.proc().kill(SIGKILL);
  t.join();
  ASSERT_TRUE(failed);
  const double ms = std::chrono::duration<double, std::milli>(failed_at - killed_at).count();
  std::printf("dead worker detected after %.1f ms: %s\n", ms, what.c_str());
  EXPECT_LT(ms, 300.0);
  EXPECT_NE(what.find("died"), std::string::npos) << what;
  EXPECT_THROW(c->call(b.view(1), out.data()), PeerLost);  // the connection stays broken
}

TEST_F(Ring, ServerDyingMidRequestAndRestartedIsRejoinable) {
  auto peer = std::make_unique<Peer>(name, std::vector<std::string>{"--channels", "1"});
  auto c = connect(name);
  Batch b(3, 4, 16, 4);
  std::vector<float> out(48);
  EXPECT_THROW(c->call(b.view(66), out.data()), PeerLost);  // the peer kills itself
  EXPECT_EQ(peer->proc().wait(5s), 128 + SIGKILL);
  EXPECT_THROW(RingClient{name}, PeerLost) << "no server: connect must fail, not hang";
  peer = std::make_unique<Peer>(name, std::vector<std::string>{"--channels", "1"});
  // The only channel was claimed by `c`; the new server frees it for whoever connects.
  auto c2 = connect(name);
  c2->call(b.view(1), out.data());
  EXPECT_EQ(out, b.expected());
  EXPECT_THROW(c->call(b.view(1), out.data()), PeerLost);
}

TEST_F(Ring, StoppedServerFailsClientsAtOnce) {
  Peer peer(name);
  auto c = connect(name);
  Batch b(1, 2, 16, 8);
  std::vector<float> out(16);
  c->call(b.view(1), out.data());
  peer.proc().kill(SIGTERM);
  EXPECT_EQ(peer.proc().wait(5s), 0);
  const auto t0 = clk::now();
  try {
    c->call(b.view(1), out.data());
    FAIL() << "no error";
  } catch (const PeerLost& e) {
    EXPECT_NE(std::string(e.what()).find("stopped"), std::string::npos) << e.what();
  }
  EXPECT_LT(clk::now() - t0, 100ms);
}

TEST_F(Ring, ChannelsBelongToOneClientEach) {
  Peer peer(name, {"--channels", "2"});
  auto a = connect(name);
  auto b = connect(name);
  EXPECT_NE(a->channel(), b->channel());
  try {
    RingClient third(name);
    FAIL() << "a third client got a channel";
  } catch (const PeerLost& e) {
    EXPECT_NE(std::string(e.what()).find("channels are taken"), std::string::npos) << e.what();
  }
  a.reset();
  auto c = connect(name);
  // Concurrent clients get their own answers.
  std::vector<std::thread> ts;
  std::atomic<int> bad{0};
  for (RingClient* cl : {b.get(), c.get()})
    ts.emplace_back([cl, &bad] {
      for (uint32_t i = 0; i < 200; ++i) {
        Batch x(1 + i % 9, 4, 16, i * 7 + cl->channel());
        std::vector<float> out(size_t{x.n} * 16);
        cl->call(x.view(1), out.data());
        bad += out != x.expected();
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_F(Ring, ChannelOfADeadClientIsReclaimed) {
  Peer peer(name, {"--channels", "1"});
  connect(name).reset();  // the peer is up
  const pid_t pid = fork();
  if (pid == 0) {
    RingClient* leaked = new RingClient(name);  // claims the only channel and never releases it
    (void)leaked;
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  auto c = connect(name);
  Batch b(1, 2, 16, 2);
  std::vector<float> out(16);
  c->call(b.view(1), out.data());
  EXPECT_EQ(out, b.expected());
}

// A worker in another pid namespace (a container) cannot be probed by pid: its heartbeat decides.
// The test pretends so by rewriting the namespace id the server published, then freezes the peer.
TEST_F(Ring, FrozenServerInAnotherPidNamespaceIsDetectedByItsHeartbeat) {
  Peer peer(name);
  auto c = connect(name);
  {
    auto m = ShmMapping::open(name, true);
    ASSERT_TRUE(m.has_value());
    reinterpret_cast<ring::RingHeader*>(m->data())->server_pid_ns.store(12345);
  }
  Batch b(1, 2, 16, 4);
  std::vector<float> out(16);
  c->call(b.view(1), out.data());  // a beating server is fine
  EXPECT_EQ(out, b.expected());
  peer.proc().kill(SIGSTOP);
  // kill() returns before the peer has actually stopped; wait for /proc to say 'T'.
  for (int i = 0; i < 1000; ++i) {
    std::ifstream f("/proc/" + std::to_string(peer.proc().pid()) + "/stat");
    std::string st;
    std::getline(f, st);
    if (st.size() > st.rfind(')') + 2 && st[st.rfind(')') + 2] == 'T') break;
    std::this_thread::sleep_for(1ms);
  }
  const auto t0 = clk::now();
  try {
    c->call(b.view(1), out.data());
    FAIL() << "a frozen server answered";
  } catch (const PeerLost& e) {
    EXPECT_NE(std::string(e.what()).find("stopped beating"), std::string::npos) << e.what();
  }
  const double ms = std::chrono::duration<double, std::milli>(clk::now() - t0).count();
  std::printf("frozen worker detected by heartbeat after %.1f ms\n", ms);
  EXPECT_LT(ms, 400.0);
  peer.proc().kill(SIGKILL);
}

// Two clients of one server (in this process, so the handler can look at the ring) keep
// requests coming: whenever the other client's request is waiting as one finishes, the other is
// served next — no client is served twice while another waits — and the per-channel figures
// name both clients.
TEST_F(Ring, BusyClientsAreServedInTurnAndCountedPerChannel) {
  TierInfo info;
  info.hidden = 16;
  info.n_layers = 3;
  info.n_experts = 64;
  info.top_k = 4;
  info.moe_layers = {1, 2};
  RingConfig cfg;
  cfg.channels = 4;
  std::atomic<int> inside{0}, overlap{0};
  std::optional<ShmMapping> view;  // the ring as the server lays it out, read-only
  std::mutex seq_mu;
  std::vector<std::pair<uint32_t, bool>> served;  // (client's layer, the other's request was waiting)
  uint32_t channel_of[3] = {0, 0, 0};             // by layer
  std::atomic<bool> ready{false};
  RingServer server(name, cfg, info, [&](const ExpertBatch& b, float* out) {
    overlap += inside.fetch_add(1) != 0;
    std::this_thread::sleep_for(1ms);
    std::fill(out, out + size_t{b.n_tokens} * b.hidden, 0.0f);
    if (ready) {
      const auto& h = *reinterpret_cast<const ring::RingHeader*>(view->data());
      const uint32_t other = channel_of[b.layer == 1 ? 2 : 1];
      const auto& c = *reinterpret_cast<const ring::ChannelCtl*>(view->data() + ring::kPage + uint64_t{other} * h.channel_stride);
      std::lock_guard<std::mutex> l(seq_mu);
      served.emplace_back(b.layer, c.state.load() == ring::Request);
    }
    inside.fetch_sub(1);
  });
  auto a = connect(name), c = connect(name);
  view = ShmMapping::open(name, false);
  ASSERT_TRUE(view.has_value());
  channel_of[1] = a->channel(), channel_of[2] = c->channel();
  ready = true;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> done[2] = {0, 0};
  std::vector<std::thread> ts;
  for (int k = 0; k < 2; ++k)
    ts.emplace_back([&, k] {
      RingClient* cl = k == 0 ? a.get() : c.get();
      Batch x(3, 4, 16, 11 + k);
      std::vector<float> out(3 * 16);
      while (!stop) {
        cl->call(x.view(static_cast<uint32_t>(k + 1)), out.data());
        ++done[k];
      }
    });
  std::this_thread::sleep_for(400ms);
  stop = true;
  for (auto& t : ts) t.join();
  EXPECT_EQ(overlap.load(), 0) << "the handler ran two requests at once";
  EXPECT_GT(done[0].load(), 20u);
  EXPECT_GT(done[1].load(), 20u);
  int waited = 0, jumped = 0;
  for (size_t i = 0; i + 1 < served.size(); ++i)
    if (served[i].second) ++waited, jumped += served[i + 1].first == served[i].first;
  EXPECT_GT(waited, 0) << "the clients never both had a request waiting";
  EXPECT_EQ(jumped, 0) << "a client was served again while the other's request waited (" << waited << " times it waited)";
  const std::vector<ChannelStats> st = server.channel_stats();
  ASSERT_EQ(st.size(), 4u);
  for (const auto& [cl, k] : {std::pair<RingClient*, int>{a.get(), 0}, {c.get(), 1}}) {
    const ChannelStats& s = st[cl->channel()];
    EXPECT_EQ(s.owner_pid, static_cast<uint32_t>(getpid()));
    EXPECT_EQ(s.requests, done[k].load());
    EXPECT_EQ(s.tokens, 3 * done[k].load());
    EXPECT_EQ(s.failed, 0u);
    EXPECT_GE(s.busy_ns, s.requests * 1'000'000) << "each request slept 1 ms";
    EXPECT_GT(s.wait_ns, 0u) << "each waited for the other's request";
  }
  uint64_t idle = 0;
  for (const ChannelStats& s : st) idle += s.owner_pid == 0 && s.requests == 0;
  EXPECT_EQ(idle, 2u);
  server.stop();
}
