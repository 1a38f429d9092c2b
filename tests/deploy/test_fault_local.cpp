// The fault suite against flashtier-local (the three real services on the tiny-chat fixture):
// under 8 concurrent streaming requests, SIGKILL each service in turn, kKills times each.
// Every stream that was running must end with a complete answer, or with an error event followed
// by [DONE] (a killed gateway can only drop its connections: that shows as a chunked body without
// its last chunk, which every HTTP client reports, and is allowed only then). Never a hang, never
// a stream that ends cleanly without [DONE]. New requests succeed within 5 s of the kill. A clean
// stop leaves no ring in /dev/shm. Prints the recovery times (p50/max per service) for
// docs/reliability.md.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "deploy/local/free_port.h"
#include "deploy/local/http_exchange.h"
#include "deploy/local/proc_info.h"
#include "tests/gateway/harness.h"  // ChildProcess
#include "tests/support/test_paths.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kStreams = 8;
constexpr int kKills = 3;  // per service (the launcher's back-off doubles per quick death: 250 ms, 500, 1 s)
constexpr int kStreamTokens = 1500;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

enum class End { Complete, ErrorThenDone, Cut, NoDone, Hang, Refused, NotOk };
const char* end_name(End e) {
  switch (e) {
    case End::Complete: return "complete";
    case End::ErrorThenDone: return "error+[DONE]";
    case End::Cut: return "cut (no last chunk)";
    case End::NoDone: return "ended without [DONE]";
    case End::Hang: return "hang";
    case End::Refused: return "refused";
    case End::NotOk: return "non-200";
  }
  return "?";
}

// One streaming completion, read to the end. `first_event` is set once the first SSE event has
// arrived.
End run_stream(int port, std::atomic<bool>& first_event, int timeout_ms, std::string* detail) {
  const std::string body = "{\"model\":\"model\",\"prompt\":\"Once upon a time\",\"max_tokens\":" + std::to_string(kStreamTokens) +
                           ",\"temperature\":0,\"ignore_eos\":true,\"stream\":true}";
  const auto ex = ft::local::http_exchange(port, "POST", "/v1/completions", body, std::chrono::milliseconds(timeout_ms),
                                           [&](const std::string& got) {
                                             if (got.find("\r\n\r\n") != std::string::npos && got.find("data: ") != std::string::npos)
                                               first_event = true;
                                           });
  first_event = true;  // (also when it never started: the caller must not wait for it forever)
  if (!ex.connected) return End::Refused;
  if (!ex.closed) return End::Hang;
  if (!ex.has_head()) return End::Cut;
  if (ex.status() != 200) {
    *detail = ex.raw.substr(0, 200);
    return End::NotOk;
  }
  bool last_chunk = false;
  const std::string data = ex.body(&last_chunk);
  if (!last_chunk) return End::Cut;
  const bool done = data.size() >= 14 && data.compare(data.size() - 14, 14, "data: [DONE]\n\n") == 0;
  if (!done) {
    *detail = data.substr(data.size() > 300 ? data.size() - 300 : 0);
    return End::NoDone;
  }
  if (data.find("data: {\"error\"") != std::string::npos) {
    *detail = data.substr(data.find("data: {\"error\""), 200);
    return End::ErrorThenDone;
  }
  return data.find("\"finish_reason\":\"length\"") != std::string::npos ? End::Complete : End::NoDone;
}

int http_status(int port, const std::string& method, const std::string& path, const std::string& body, int timeout_ms) {
  return ft::local::http_exchange(port, method, path, body, std::chrono::milliseconds(timeout_ms)).status();
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(q * double(v.size() - 1) + 0.5))];
}

TEST(FaultSuiteLocal, KillEachServiceUnderEightStreams) {
  const int port = ft::local::free_loopback_port();
  const std::string tag = "ftfault" + std::to_string(getpid());
  const std::string bin = std::string(FLASHTIER_BIN_DIR);
  // However the test ends, the segment and ring go (the launcher goes with its ChildProcess).
  struct Cleanup {
    std::string cmd;
    ~Cleanup() { std::system(cmd.c_str()); }
  } cleanup{bin + "/flashtier-shm remove " + tag + "-seg " + tag + "-ring --force >/dev/null 2>&1"};
  ft::test::ChildProcess launcher({bin + "/flashtier-local", "--model", ft::test::fixture("glm5-tiny-chat/model"), "--port",
                                   std::to_string(port), "--segment", tag + "-seg", "--ring", tag + "-ring",
                                   "--context-size", "4096", "--drain-timeout", "5"});
  // (flashtier-local prints the line "ready"; the expert worker logs "ready: ..." before that.)
  ASSERT_TRUE(launcher.wait_for_output("\nready\n", 60000)) << launcher.output();
  const std::string chat = "{\"model\":\"model\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4}";
  ASSERT_EQ(http_status(port, "POST", "/v1/chat/completions", chat, 10000), 200);

  struct PerService {
    std::vector<double> recovery_ms;
    std::map<End, int> ends;
  };
  std::map<std::string, PerService> results;
  for (const std::string service : {"flashtier-cpu-expert-worker", "flashtier-gpu-worker", "flashtier-gateway"}) {
    for (int k = 0; k < kKills; ++k) {
      std::vector<std::atomic<bool>> started(kStreams);
      std::vector<End> ends(kStreams);
      std::vector<std::string> details(kStreams);
      std::vector<std::thread> clients;
      struct JoinAll {  // an ASSERT below must not leave joinable threads behind (std::terminate)
        std::vector<std::thread>& t;
        ~JoinAll() {
          for (auto& x : t)
            if (x.joinable()) x.join();
        }
      } join_all{clients};
      for (int i = 0; i < kStreams; ++i)
        clients.emplace_back([&, i] { ends[i] = run_stream(port, started[i], 30000, &details[i]); });
      for (int i = 0; i < kStreams; ++i)
        while (!started[i]) std::this_thread::sleep_for(1ms);
      const pid_t victim = ft::local::child_running(launcher.pid(), service);
      ASSERT_GT(victim, 0) << service << " is not running:\n" << launcher.output();
      const auto t_kill = Clock::now();
      ASSERT_EQ(::kill(victim, SIGKILL), 0);
      // New requests: one every 50 ms until one succeeds.
      double recovered = -1;
      while (ms_since(t_kill) < 15000) {
        if (http_status(port, "POST", "/v1/chat/completions", chat, 2000) == 200) {
          recovered = ms_since(t_kill);
          break;
        }
        std::this_thread::sleep_for(50ms);
      }
      for (auto& c : clients) c.join();
      EXPECT_GE(recovered, 0) << "no request succeeded within 15 s of killing " << service << "\n" << launcher.output();
      EXPECT_LT(recovered, 5000) << "killing " << service << ": the first request succeeded after " << recovered << " ms";
      results[service].recovery_ms.push_back(recovered);
      for (int i = 0; i < kStreams; ++i) {
        ++results[service].ends[ends[i]];
        const bool ok = ends[i] == End::Complete || ends[i] == End::ErrorThenDone ||
                        (ends[i] == End::Cut && service == "flashtier-gateway");
        EXPECT_TRUE(ok) << "killing " << service << " (round " << k << "): stream " << i << " " << end_name(ends[i]) << ": "
                        << details[i];
      }
    }
  }
  for (const auto& [service, r] : results) {
    std::string ends;
    for (const auto& [e, n] : r.ends) ends += std::string(ends.empty() ? "" : ", ") + std::to_string(n) + " " + end_name(e);
    std::printf("fault-suite: %-28s %d kills, first success after the kill p50 %.0f ms, max %.0f ms; %d streams: %s\n",
                service.c_str(), int(r.recovery_ms.size()), percentile(r.recovery_ms, 0.5),
                *std::max_element(r.recovery_ms.begin(), r.recovery_ms.end()), kStreams * kKills, ends.c_str());
  }
  EXPECT_NE(launcher.output().find("re-attached to segment " + tag + "-seg"), std::string::npos) << launcher.output();

  // A clean stop removes the ring; the segment stays by design (flashtier-shm removes it).
  ASSERT_EQ(::kill(launcher.pid(), SIGTERM), 0);
  const int st = launcher.wait_exit(30000);
  ASSERT_GE(st, 0) << "flashtier-local still runs 30 s after SIGTERM:\n" << launcher.output();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << launcher.output();
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + tag + "-ring")) << launcher.output();
  EXPECT_TRUE(std::filesystem::exists("/dev/shm/" + tag + "-seg"));
  EXPECT_EQ(std::system((bin + "/flashtier-shm remove " + tag + "-seg >/dev/null").c_str()), 0);
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + tag + "-seg"));
}

}  // namespace
