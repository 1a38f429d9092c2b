// A live fuzz client against the real gateway binary (a fake gpu-worker behind it): mutated and
// random request bodies on every JSON endpoint, clients that dribble headers, clients that vanish
// mid-stream, oversized headers and bodies. Every request must get a well-formed HTTP answer
// (an OpenAI error JSON for every 4xx/5xx), the gateway must never crash or hang, every vanished
// stream must be cancelled on the worker, and its resident memory must come back near where it
// started. FLASHTIER_LIVE_FUZZ_BODIES sets the number of bodies (CI: 20000; docs/reliability.md
// has a run with 10^5).
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "deploy/local/http_exchange.h"
#include "deploy/local/proc_info.h"
#include "tests/gateway/gateway_test_util.h"

namespace ft::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::vector<std::string> seed_bodies() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(std::string(FLASHTIER_SOURCE_DIR) + "/fuzz/corpus/fuzz_openai_request")) {
    std::ifstream f(e.path());
    std::stringstream ss;
    ss << f.rdbuf();
    out.push_back(ss.str());
  }
  return out;
}

// One mutation of a seed (or, one time in ten, random bytes): the kinds of damage a JSON body
// meets in the wild, plus values at the edges of every type.
std::string mutate(const std::vector<std::string>& seeds, std::mt19937& rng) {
  static const char* const tokens[] = {"{", "}", "[", "]", ",", ":", "\"", "null", "true", "1e999", "-1", "0",
                                       "18446744073709551616", "\"\\u0000\"", "\"\\ud800\"", "[[[[[[[[", "{\"a\":",
                                       "\"messages\"", "\"stream\":true", "\"n\":100000", "\"max_tokens\":-5", "\xff\xfe"};
  auto pick = [&](size_t n) { return n ? static_cast<size_t>(rng() % n) : 0; };
  std::string s;
  if (rng() % 10 == 0) {
    s.resize(pick(512));
    for (char& c : s) c = static_cast<char>(rng());
    return s;
  }
  s = seeds[pick(seeds.size())];
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int k = 0; k < edits && !s.empty(); ++k) {
    const size_t at = pick(s.size());
    switch (rng() % 6) {
      case 0: s[at] = static_cast<char>(rng()); break;
      case 1: s.erase(at, 1 + pick(16)); break;
      case 2: s.insert(at, tokens[pick(std::size(tokens))]); break;
      case 3: s.insert(at, s.substr(pick(s.size()), pick(64))); break;
      case 4: s.resize(at); break;
      default: s.insert(at, std::string(1 + pick(8), static_cast<char>(rng()))); break;
    }
  }
  return s;
}

struct Tally {
  std::mutex mu;
  std::map<int, long> by_status;
  long bad = 0;
  std::vector<std::string> examples;
  void add(int status, const std::string& problem, const std::string& body) {
    std::lock_guard lk(mu);
    ++by_status[status];
    if (problem.empty()) return;
    ++bad;
    if (examples.size() < 5) examples.push_back(problem + " for body " + json(body).dump().substr(0, 200));
  }
};

// What is wrong with one answer ("" when nothing).
std::string check_answer(const local::HttpExchange& ex) {
  if (!ex.connected) return "connection refused";
  if (!ex.closed) return "no answer within 10 s";
  if (ex.status() == 0) return "no status line";
  bool complete = false;
  const std::string body = ex.body(&complete);
  if (!complete) return "cut body";
  if (ex.status() >= 400) {
    json j = json::parse(body, nullptr, false);
    if (!j.is_object() || !j.contains("error") || !j["error"]["message"].is_string()) return "error without OpenAI error JSON";
  }
  if (ex.status() >= 500 && ex.status() != 503) return "status " + std::to_string(ex.status());
  return "";
}

TEST(GatewayLiveFuzz, HostileTrafficGetsAnswersAndLeavesNoTrace) {
  const char* env = std::getenv("FLASHTIER_LIVE_FUZZ_BODIES");
  const long bodies = env ? std::atol(env) : 20000;
  FakeWorker worker;
  worker.set_script(script_of(cat(ids_of(" ok"), {kEos}), 0us));
  GatewayProcess gw(gateway_args({worker.address()}, {"--max-body-bytes", "65536", "--header-timeout-s", "2",
                                                      "--max-connections", "512", "--threads", "2"}));
  ASSERT_TRUE(gw.wait_healthy());
  const std::vector<std::string> seeds = seed_bodies();
  ASSERT_FALSE(seeds.empty());
  const char* const paths[] = {"/v1/chat/completions", "/v1/completions", "/generate", "/tokenize", "/detokenize"};

  // Warm up with valid bodies, so the baseline holds the gateway's steady-state memory.
  for (int i = 0; i < 300; ++i)
    local::http_exchange(gw.port(), "POST", paths[i % 2], seeds[0], 10s);
  const long rss0 = local::rss_kib(gw.pid());

  Tally tally;
  const auto t0 = Clock::now();
  std::vector<std::thread> clients;
  std::atomic<long> next{0};
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(77 + c);
      for (long i = next++; i < bodies; i = next++) {
        const std::string body = mutate(seeds, rng);
        const auto ex = local::http_exchange(gw.port(), "POST", paths[rng() % std::size(paths)], body, 10s);
        tally.add(ex.status(), check_answer(ex), body);
      }
    });
  }
  for (auto& t : clients) t.join();
  const double fuzz_s = std::chrono::duration<double>(Clock::now() - t0).count();

  // Clients that dribble their headers are cut off at the header timeout; others meanwhile served.
  std::vector<std::thread> slow;
  std::atomic<int> slow_cut{0};
  for (int i = 0; i < 16; ++i) {
    slow.emplace_back([&] {
      const int fd = connect_loopback(gw.port());
      if (fd < 0) return;
      const auto start = Clock::now();
      const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ";
      for (size_t k = 0; Clock::now() - start < 6s; ++k) {
        if (::send(fd, head.data() + (k % head.size()), 1, MSG_NOSIGNAL) != 1) {
          ++slow_cut;
          break;
        }
        std::this_thread::sleep_for(100ms);
      }
      ::close(fd);
    });
  }
  for (int i = 0; i < 20; ++i) EXPECT_EQ(http_request(gw.port(), "GET", "/health").status, 200);
  for (auto& t : slow) t.join();
  EXPECT_EQ(slow_cut.load(), 16) << "slow clients still connected after 6 s with --header-timeout-s 2";

  // Clients that vanish mid-stream: every worker stream is cancelled.
  worker.set_script(script_of(std::vector<int32_t>(400, ids_of(" a")[0]), 5ms));
  const int cancelled_before = worker.cancelled();
  for (int i = 0; i < 24; ++i) {
    SseStream s(gw.port(), "/v1/completions", R"({"model":"model","prompt":"x","max_tokens":400,"stream":true})");
    ASSERT_EQ(s.status(), 200);
    std::string ev;
    s.next(ev);
    s.close();
  }
  for (int i = 0; i < 200 && worker.active() > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(worker.active(), 0);
  EXPECT_EQ(worker.cancelled(), cancelled_before + 24);

  // Oversized headers and bodies: 431 and 413 with error JSON.
  HttpResult big_head = http_request(gw.port(), "GET", "/health", "", {"X-Big: " + std::string(100 * 1024, 'h')});
  EXPECT_EQ(big_head.status, 431) << big_head.body;
  HttpResult big_body = http_request(gw.port(), "POST", "/v1/completions", std::string(200 * 1024, ' '));
  EXPECT_EQ(big_body.status, 413) << big_body.body;

  // Still alive, healthy, and its memory back near the baseline.
  int st = 0;
  ASSERT_EQ(::waitpid(gw.pid(), &st, WNOHANG), 0) << "the gateway died:\n" << gw.report();
  EXPECT_EQ(http_request(gw.port(), "GET", "/health").status, 200);
  std::this_thread::sleep_for(500ms);
  const long rss1 = local::rss_kib(gw.pid());
  std::string statuses;
  for (const auto& [code, n] : tally.by_status) statuses += " " + std::to_string(code) + ":" + std::to_string(n);
  std::printf("live-fuzz: %ld bodies in %.1f s (%.0f/s); statuses%s; malformed answers %ld; RSS %ld -> %ld KiB\n", bodies,
              fuzz_s, double(bodies) / fuzz_s, statuses.c_str(), tally.bad, rss0, rss1);
  EXPECT_EQ(tally.bad, 0) << [&] {
    std::string s;
    for (const auto& e : tally.examples) s += e + "\n";
    return s;
  }();
  EXPECT_LT(rss1 - rss0, 32 * 1024) << "RSS grew from " << rss0 << " to " << rss1 << " KiB";
}

}  // namespace
}  // namespace ft::test
