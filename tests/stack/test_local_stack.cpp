// The whole stack under flashtier-local, driven with curl: on the tiny-chat fixture the ready
// line, killing the cpu-expert-worker mid-stream (error event, restart, re-attach without reload,
// next request served identically) and SIGTERM stopping every service; on the EXL3 fixture the
// fixture's greedy tokens with the expert worker computing EXL3 experts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <thread>

#include "deploy/local/free_port.h"
#include "shared/model/tensor_convert.h"
#include "tests/support/test_paths.h"

using namespace std::chrono_literals;
using ::testing::HasSubstr;

extern char** environ;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string run(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  pclose(p);
  return out;
}

// Pids whose command line contains every one of `parts` (read from /proc, so no shell of ours
// ever matches its own pattern).
std::vector<pid_t> pids_matching(std::initializer_list<std::string> parts) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = slurp(e.path().string() + "/cmdline");
    for (char& c : cmd)
      if (c == '\0') c = ' ';
    bool all = !cmd.empty();
    for (const auto& p : parts) all = all && cmd.find(p) != std::string::npos;
    if (all && std::stoi(name) != getpid()) out.push_back(std::stoi(name));
  }
  return out;
}

class LocalStack : public ::testing::Test {
 protected:
  virtual std::string model_dir() { return ft::test::fixture("glm5-tiny-chat/model"); }
  virtual std::vector<std::string> extra_args() { return {}; }
  void SetUp() override {
    port_ = ft::local::free_loopback_port();
    tag_ = "ftstack" + std::to_string(getpid());
    out_ = dir_ / "out.txt";
    err_ = dir_ / "err.txt";
    const std::string bin = std::string(FLASHTIER_BIN_DIR) + "/flashtier-local";
    std::vector<std::string> args = {bin, "--model", model_dir(), "--port",
                                     std::to_string(port_), "--segment", tag_ + "-seg", "--ring", tag_ + "-ring"};
    for (const std::string& a : extra_args()) args.push_back(a);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_EQ(posix_spawn(&pid_, bin.c_str(), &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    const auto t0 = std::chrono::steady_clock::now();
    while (slurp(out_).find("ready") == std::string::npos) {
      ASSERT_LT(std::chrono::steady_clock::now() - t0, 60s) << slurp(err_);
      std::this_thread::sleep_for(50ms);
    }
  }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int st = 0;
      waitpid(pid_, &st, 0);
    }
    run(std::string(FLASHTIER_BIN_DIR) + "/flashtier-cpu-expert-worker --remove-segment --segment " + tag_ +
        "-seg --ring " + tag_ + "-ring >/dev/null 2>&1");
  }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
  std::string completion(int max_tokens, bool stream) const {
    return "curl -sN " + url("/v1/completions") +
           " -H 'content-type: application/json' -d '{\"model\": \"model\", \"prompt\": [3007, 100, 200], "
           "\"max_tokens\": " + std::to_string(max_tokens) + ", \"temperature\": 0, \"ignore_eos\": true, \"stream\": " +
           (stream ? "true" : "false") + "}'";
  }

  ft::test::TempDir dir_;
  std::string out_, err_, tag_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace

TEST_F(LocalStack, ExpertWorkerKilledMidStreamThenReattachedAndServing) {
  const std::string before = run(completion(8, false));
  ASSERT_THAT(before, HasSubstr("\"completion_tokens\":8")) << before;
  EXPECT_THAT(slurp(err_), HasSubstr("building segment " + tag_ + "-seg"));

  // A long stream; kill the expert worker once tokens flow.
  FILE* p = popen(completion(20000, true).c_str(), "r");
  std::string streamed;
  std::array<char, 4096> buf;
  int events = 0;
  while (events < 5 && fgets(buf.data(), buf.size(), p)) {
    streamed += buf.data();
    if (std::string(buf.data()).rfind("data: ", 0) == 0) ++events;
  }
  ASSERT_EQ(events, 5) << streamed;
  const auto expert_worker = pids_matching({"flashtier-cpu-expert-worker", "--segment " + tag_ + "-seg"});
  ASSERT_EQ(expert_worker.size(), 1u);
  kill(expert_worker[0], SIGKILL);
  while (fgets(buf.data(), buf.size(), p)) streamed += buf.data();
  pclose(p);
  EXPECT_THAT(streamed, HasSubstr("\"error\""));
  EXPECT_THAT(streamed, HasSubstr("died"));
  EXPECT_THAT(streamed.substr(streamed.size() - 16), HasSubstr("data: [DONE]"));

  // The launcher restarts it; it re-attaches to the segment instead of reloading the model.
  const auto t0 = std::chrono::steady_clock::now();
  while (slurp(err_).find("re-attached to segment " + tag_ + "-seg") == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now() - t0, 20s) << slurp(err_);
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_THAT(slurp(err_), HasSubstr("no reload"));
  EXPECT_THAT(slurp(err_), HasSubstr("cpu-expert-worker restarted"));
  std::string after;
  for (int i = 0; i < 100; ++i) {  // the gpu-worker reconnects on its next request
    after = run(completion(8, false));
    if (after.find("\"completion_tokens\":8") != std::string::npos) break;
    std::this_thread::sleep_for(100ms);
  }
  auto text_of = [](const std::string& body) { return body.substr(body.find("\"text\"")); };
  EXPECT_EQ(text_of(after).substr(0, 60), text_of(before).substr(0, 60)) << after;
}

TEST_F(LocalStack, SigtermStopsEveryService) {
  EXPECT_EQ(run("curl -s -o /dev/null -w '%{http_code}' " + url("/health")), "200");
  const std::string port_flag = "--port " + std::to_string(port_) + " ";
  EXPECT_EQ(pids_matching({"flashtier-cpu-expert-worker", "--segment " + tag_ + "-seg"}).size(), 1u);
  EXPECT_EQ(pids_matching({"flashtier-gateway", port_flag}).size(), 1u);
  ASSERT_EQ(kill(pid_, SIGTERM), 0);
  int st = 0;
  ASSERT_EQ(waitpid(pid_, &st, 0), pid_);
  pid_ = -1;
  EXPECT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  EXPECT_TRUE(pids_matching({"flashtier-cpu-expert-worker", "--segment " + tag_ + "-seg"}).empty());
  EXPECT_TRUE(pids_matching({"flashtier-gateway", port_flag}).empty());
  EXPECT_THAT(slurp(err_), HasSubstr("stopping the services"));
}

TEST_F(LocalStack, ServicesDoNotOutliveAKilledLauncher) {
  const std::string port_flag = "--port " + std::to_string(port_) + " ";
  ASSERT_EQ(pids_matching({"flashtier-gateway", port_flag}).size(), 1u);
  ASSERT_EQ(kill(pid_, SIGKILL), 0);
  int st = 0;
  waitpid(pid_, &st, 0);
  pid_ = -1;
  const auto t0 = std::chrono::steady_clock::now();
  while (!pids_matching({"flashtier-gateway", port_flag}).empty() ||
         !pids_matching({"flashtier-cpu-expert-worker", "--segment " + tag_ + "-seg"}).empty()) {
    ASSERT_LT(std::chrono::steady_clock::now() - t0, 5s);
    std::this_thread::sleep_for(20ms);
  }
}

namespace {

// tiny-exl3 ships without a tokenizer (its vocabulary is 512 ids); the gateway needs one, so the
// test serves a copy of the model with a 512-token byte-level tokenizer from our demo tool. The
// checked output is token ids, which the tokenizer does not influence.
class LocalStackExl3 : public LocalStack {
 protected:
  std::string model_dir() override {
    const std::string dir = dir_ / "exl3-model";
    std::filesystem::create_directories(dir);
    for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
      std::filesystem::copy_file(ft::test::fixture(std::string("glm5-tiny-exl3/model/") + f), dir + "/" + f);
    run(std::string(FLASHTIER_BIN_DIR) + "/flashtier-demo-model --out " + dir + " --tokenizer-only --vocab 512");
    return dir;
  }
};

std::vector<int64_t> ids_of(const std::string& json_array) {
  std::vector<int64_t> v;
  const size_t open = json_array.find('['), close = json_array.find(']', open);
  std::stringstream ss(json_array.substr(open + 1, close - open - 1));
  for (std::string t; std::getline(ss, t, ',');)
    if (!t.empty()) v.push_back(std::stoll(t));
  return v;
}

}  // namespace

TEST_F(LocalStackExl3, ServesTheFixtureGreedyTokensWithExl3Experts) {
  EXPECT_THAT(slurp(err_), HasSubstr("exl3 "));  // the worker's kernel line names its EXL3 path
  const ft::TensorStore ref = ft::TensorStore::open(ft::test::fixture("glm5-tiny-exl3/reference.safetensors"));
  for (int c = 0; c < 3; ++c) {
    const auto input = ft::to_i64(ref.get("case" + std::to_string(c) + ".input_ids"));
    const auto want = ft::to_i64(ref.get("case" + std::to_string(c) + ".generated_ids"));
    std::string ids;
    for (int64_t v : input) ids += (ids.empty() ? "" : ",") + std::to_string(v);
    const std::string body = "{\"input_ids\": [" + ids + "], \"sampling_params\": {\"max_new_tokens\": " +
                             std::to_string(want.size()) + ", \"temperature\": 0, \"ignore_eos\": true}}";
    const std::string resp =
        run("curl -s " + url("/generate") + " -H 'content-type: application/json' -d '" + body + "'");
    const auto pos = resp.find("\"output_ids\"");
    ASSERT_NE(pos, std::string::npos) << resp;
    EXPECT_EQ(ids_of(resp.substr(pos)), want) << "case " << c << ": " << resp;
  }
}

namespace {

// Two gpu-workers behind one gateway, both on the one cpu-expert-worker's segment and ring.
class LocalStackTwoWorkers : public LocalStack {
 protected:
  std::vector<std::string> extra_args() override { return {"--workers", "2", "--max-batch-size", "4"}; }
  // The launcher's gpu-worker children (by parent pid, so other tests' stacks never count).
  std::vector<pid_t> workers() const {
    std::vector<pid_t> out;
    for (pid_t p : pids_matching({"flashtier-gpu-worker", "--model"})) {
      const std::string stat = slurp("/proc/" + std::to_string(p) + "/stat");
      const size_t close = stat.rfind(')');
      if (close == std::string::npos) continue;
      std::stringstream ss(stat.substr(close + 2));
      std::string state;
      pid_t ppid = 0;
      ss >> state >> ppid;
      if (ppid == pid_) out.push_back(p);
    }
    return out;
  }
  // flashtier_worker_streams_total per worker address, from the gateway's /metrics.
  std::vector<uint64_t> streams_per_worker() const {
    std::vector<uint64_t> out;
    std::stringstream ss(run("curl -s " + url("/metrics")));
    for (std::string line; std::getline(ss, line);)
      if (line.rfind("flashtier_worker_streams_total{", 0) == 0) out.push_back(std::stoull(line.substr(line.rfind(' ') + 1)));
    return out;
  }
  // Waits until the gateway sees both workers SERVING (the launcher's "ready" needs only one).
  void wait_both_up() const {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      int up = 0;
      std::stringstream ss(run("curl -s " + url("/metrics")));
      for (std::string line; std::getline(ss, line);)
        if (line.rfind("flashtier_worker_up{", 0) == 0 && line.substr(line.rfind(' ') + 1) == "1") ++up;
      if (up == 2) return;
      ASSERT_LT(std::chrono::steady_clock::now() - t0, 30s) << slurp(err_);
      std::this_thread::sleep_for(50ms);
    }
  }
  std::string text(const std::string& body) const {
    const size_t at = body.find("\"text\"");
    return at == std::string::npos ? "" : body.substr(at, body.find("\"finish_reason\"", at) - at);
  }
};

}  // namespace

TEST_F(LocalStackTwoWorkers, EightConcurrentStreamsOverBothWorkersGiveOneWorkersTokens) {
  ASSERT_EQ(workers().size(), 2u) << slurp(err_);
  // The segment is built once, by the one cpu-expert-worker; both gpu-workers use it.
  const std::string log = slurp(err_);
  size_t builds = 0;
  for (size_t at = log.find("building segment"); at != std::string::npos; at = log.find("building segment", at + 1)) ++builds;
  EXPECT_EQ(builds, 1u) << log;
  EXPECT_EQ(pids_matching({"flashtier-cpu-expert-worker", "--segment " + tag_ + "-seg"}).size(), 1u);

  const std::string want = text(run(completion(12, false)));
  ASSERT_FALSE(want.empty());
  ASSERT_NO_FATAL_FAILURE(wait_both_up());
  const std::vector<uint64_t> before = streams_per_worker();
  std::vector<std::string> got(8);
  std::vector<std::thread> th;
  for (int i = 0; i < 8; ++i) th.emplace_back([&, i] { got[i] = text(run(completion(12, false))); });
  for (auto& t : th) t.join();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(got[i], want) << "stream " << i;
  const std::vector<uint64_t> after = streams_per_worker();
  ASSERT_EQ(after.size(), 2u);
  EXPECT_GT(after[0], before[0]) << "worker 0 served none of the 8 streams";
  EXPECT_GT(after[1], before[1]) << "worker 1 served none of the 8 streams";
}

TEST_F(LocalStackTwoWorkers, KillingOneGpuWorkerLeavesTheOtherServing) {
  const std::string want = text(run(completion(8, false)));
  ASSERT_FALSE(want.empty());
  ASSERT_NO_FATAL_FAILURE(wait_both_up());
  const std::vector<pid_t> w = workers();
  ASSERT_EQ(w.size(), 2u);
  ASSERT_EQ(kill(w[0], SIGKILL), 0);
  // While the launcher restarts it, the other serves: every request succeeds with the same text
  // (a request that lands on the dead one is refused UNAVAILABLE and the gateway takes it out).
  int ok = 0;
  for (int i = 0; i < 10; ++i) {
    const std::string body = run(completion(8, false));
    if (text(body) == want) ++ok;
    else ADD_FAILURE() << "request " << i << " after the kill: " << body;
  }
  EXPECT_EQ(ok, 10);
  const auto t0 = std::chrono::steady_clock::now();
  while (slurp(err_).find("gpu-worker-0 restarted") == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now() - t0, 20s) << slurp(err_);
    std::this_thread::sleep_for(50ms);
  }
}
