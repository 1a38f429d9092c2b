// The gpu-worker's command line: a bad knob is refused at once (exit 2 and a message naming it)
// before any model loads, and the prefill-staging and cache knobs are taken.
#include <sys/wait.h>

#include <csignal>
#include <fstream>

#include "tests/gateway/gateway_test_util.h"
#include "tests/support/test_paths.h"

namespace ft::test {
namespace {

std::vector<std::string> worker_with(const std::vector<std::string>& extra, int port) {
  std::vector<std::string> a{bin_path("flashtier-gpu-worker"), "--model", fixture("glm5-tiny-chat/model"), "--listen",
                             "127.0.0.1:" + std::to_string(port), "--experts", "local", "--backend", "cpu"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(WorkerFlags, BadKnobsAreRefusedBeforeAnyLoad) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--staging-slots", "-2"}, "--staging-slots"},
      {{"--staging-min-rows", "-1"}, "--staging-min-rows"},
      {{"--admit-per-step", "-1"}, "--admit-per-step"},
      {{"--cache-admission", "lru"}, "--cache-admission"},
      {{"--expert-stats", "/nonexistent/routing-stats.txt"}, "--expert-stats"},
      {{"--tier-mode", "fastest"}, "--tier-mode"},
      {{"--precision", "fp8"}, "--precision"},
      {{"--staging-slots", "many"}, "bad number"},
  };
  for (const auto& [flags, says] : bad) {
    ChildProcess w(worker_with(flags, free_port()));
    const int status = w.wait_exit(10000);
    ASSERT_NE(status, -1) << flags[0] << ": still running\n" << w.output();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << flags[0] << " " << flags[1] << "\n" << w.output();
    EXPECT_NE(w.output().find(says), std::string::npos) << flags[0] << " " << flags[1] << "\n" << w.output();
    EXPECT_EQ(w.output().find("listening"), std::string::npos) << w.output();
  }
}

TEST(WorkerFlags, StagingKnobsAreTaken) {
  const int port = free_port();
  ChildProcess w(worker_with({"--staging-min-rows", "1024", "--staging-slots", "0", "--admit-per-step", "4",
                                 "--cache-admission", "clock"}, port));
  EXPECT_TRUE(w.wait_for_output("listening on port", 30000)) << w.output();
}

// --expert-stats-out on an engine without a VRAM expert cache (the CPU backend): taken, and at
// shutdown the worker says it has nothing to write instead of writing an empty file.
TEST(WorkerFlags, ExpertStatsOutWithoutACacheWritesNothing) {
  TempDir d;
  const int port = free_port();
  ChildProcess w(worker_with({"--expert-stats-out", d / "stats.txt"}, port));
  ASSERT_TRUE(w.wait_for_output("listening on port", 30000)) << w.output();
  ::kill(w.pid(), SIGTERM);
  const int status = w.wait_exit(30000);
  ASSERT_NE(status, -1) << w.output();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << w.output();
  EXPECT_NE(w.output().find("keeps no expert cache; nothing written"), std::string::npos) << w.output();
  EXPECT_FALSE(std::ifstream(d / "stats.txt").good());
}

}  // namespace
}  // namespace ft::test
