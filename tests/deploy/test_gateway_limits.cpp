// The gateway's deploy behaviour, with the real flashtier-gateway binary over HTTP and fake
// gpu-workers over real gRPC: draining on SIGTERM, the API key from a file or the environment,
// the header read timeout, the connection limit, and workers found through DNS.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "tests/gateway/gateway_test_util.h"

namespace ft::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

json chat_body(bool stream) {
  return {{"model", "model"}, {"stream", stream}, {"max_tokens", 100}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
}

// Text (reasoning and content) of every delta of an SSE chat stream, its finish reason, and whether [DONE] came.
struct StreamEnd {
  std::string content, finish_reason, error_message;
  bool done = false;
  bool error = false;
};

// Takes one SSE event block into `r`; true at [DONE].
bool absorb(StreamEnd& r, const std::string& ev) {
  if (ev.rfind("data: ", 0) != 0) return false;
  const std::string data = ev.substr(6);
  if (data == "[DONE]") return r.done = true;
  json j = parse(data);
  if (j.contains("error")) {
    r.error = true;
    r.error_message = j["error"]["message"].is_string() ? j["error"]["message"].get<std::string>() : j.dump();
    return false;
  }
  const json& c = j["choices"][0];
  // (The chat prompt opens a <think> block, so text before any </think> is reasoning.)
  for (const char* field : {"reasoning_content", "content"})
    if (c["delta"].contains(field) && c["delta"][field].is_string()) r.content += c["delta"][field].get<std::string>();
  if (c.contains("finish_reason") && c["finish_reason"].is_string()) r.finish_reason = c["finish_reason"];
  return false;
}

StreamEnd read_to_end(SseStream& s, StreamEnd r, int timeout_ms) {
  std::string ev;
  const auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Clock::now() < until && s.next(ev, timeout_ms))
    if (absorb(r, ev)) break;
  return r;
}

// A TCP connection to the gateway that sends nothing until told (an idle or slow client).
struct RawConn {
  int fd = -1;
  explicit RawConn(int port) : fd(connect_loopback(port)) {}
  ~RawConn() {
    if (fd >= 0) ::close(fd);
  }
  bool send(const std::string& s) { return fd >= 0 && ::send(fd, s.data(), s.size(), MSG_NOSIGNAL) == ssize_t(s.size()); }
  // True once the server closed the connection (read returns 0 or an error) within timeout_ms;
  // whatever it sent before is appended to `got`.
  bool closed_within(int timeout_ms, std::string* got = nullptr) {
    const auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
    char buf[4096];
    while (Clock::now() < until) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return true;
      if (got) got->append(buf, size_t(n));
    }
    return false;
  }
};

// ---------------------------------------------------------------------------------------------
// Draining

TEST(GatewayDrain, SigtermRefusesNewWorkWith503WhileTheRunningStreamFinishes) {
  FakeWorker worker;
  const std::string text = "one two three four five six seven eight nine ten";
  worker.set_script(script_of(cat(ids_of(text), {kEos}), 60ms));
  GatewayProcess gw(gateway_args({worker.address()}, {"--drain-timeout", "20"}));
  ASSERT_TRUE(gw.wait_healthy());

  SseStream s(gw.port(), "/v1/chat/completions", chat_body(true).dump());
  ASSERT_EQ(s.status(), 200);
  std::string first;
  ASSERT_TRUE(s.next(first));  // the stream is running
  StreamEnd so_far;
  absorb(so_far, first);

  ASSERT_EQ(::kill(gw.pid(), SIGTERM), 0);
  HttpResult health;
  for (int i = 0; i < 200; ++i) {  // the signal is handled asynchronously
    health = http_request(gw.port(), "GET", "/health");
    if (health.status == 503) break;
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_EQ(health.status, 503) << health.body;
  json he = parse(health.body);
  EXPECT_EQ(he["error"]["type"], "server_error");
  EXPECT_NE(he["error"]["message"].get<std::string>().find("shutting down"), std::string::npos) << health.body;

  HttpResult fresh = http_request(gw.port(), "POST", "/v1/chat/completions", chat_body(false).dump());
  EXPECT_EQ(fresh.status, 503) << fresh.body;
  EXPECT_EQ(fresh.header("retry-after"), "1");
  json fe = parse(fresh.body);
  EXPECT_NE(fe["error"]["message"].get<std::string>().find("draining"), std::string::npos) << fresh.body;
  const int calls_before = worker.generate_calls();

  // The stream that was running when the signal came ends normally, with every token.
  StreamEnd end = read_to_end(s, so_far, 10000);
  EXPECT_TRUE(end.done);
  EXPECT_FALSE(end.error);
  EXPECT_EQ(end.finish_reason, "stop");
  EXPECT_EQ(end.content, text);
  EXPECT_EQ(worker.generate_calls(), calls_before);  // the refused request never reached a worker

  const int st = gw.wait_exit(5000);
  ASSERT_GE(st, 0) << "the gateway did not exit after its last stream";
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << gw.report();
  EXPECT_NE(gw.stderr_text().find("drained (0 request(s) still in flight)"), std::string::npos) << gw.report();
}

TEST(GatewayDrain, TheDrainTimeoutEndsAStreamThatRunsLonger) {
  FakeWorker worker;
  worker.set_script(script_of(std::vector<int32_t>(200, ids_of(" a")[0]), 50ms));  // 10 s of tokens
  GatewayProcess gw(gateway_args({worker.address()}, {"--drain-timeout", "1"}));
  ASSERT_TRUE(gw.wait_healthy());
  SseStream s(gw.port(), "/v1/chat/completions", chat_body(true).dump());
  ASSERT_EQ(s.status(), 200);
  std::string ev;
  ASSERT_TRUE(s.next(ev));
  const auto t0 = Clock::now();
  ASSERT_EQ(::kill(gw.pid(), SIGTERM), 0);
  // The stream is ended at the timeout with an error event and [DONE], not cut.
  StreamEnd end = read_to_end(s, StreamEnd{}, 6000);
  const double ended_s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_TRUE(end.error);
  EXPECT_NE(end.error_message.find("drain timeout (1 s) has passed"), std::string::npos) << end.error_message;
  EXPECT_TRUE(end.done);
  EXPECT_GE(ended_s, 0.9);
  EXPECT_LT(ended_s, 2.5);
  const int st = gw.wait_exit(6000);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_GE(st, 0) << "still running 6 s after SIGTERM with --drain-timeout 1";
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << gw.report();
  EXPECT_LT(secs, 3.0);
  EXPECT_NE(gw.stderr_text().find("drain timeout: ending 1 request(s) with an error"), std::string::npos) << gw.report();
  EXPECT_NE(gw.stderr_text().find("drained (0 request(s) still in flight)"), std::string::npos) << gw.report();
}

TEST(GatewayDrain, ASecondSignalExitsAtOnce) {
  FakeWorker worker;
  worker.set_script(script_of(std::vector<int32_t>(200, ids_of(" a")[0]), 50ms));
  GatewayProcess gw(gateway_args({worker.address()}, {"--drain-timeout", "30"}));
  ASSERT_TRUE(gw.wait_healthy());
  SseStream s(gw.port(), "/v1/chat/completions", chat_body(true).dump());
  ASSERT_EQ(s.status(), 200);
  std::string ev;
  ASSERT_TRUE(s.next(ev));
  ASSERT_EQ(::kill(gw.pid(), SIGTERM), 0);
  for (int i = 0; i < 200 && http_request(gw.port(), "GET", "/health").status != 503; ++i) std::this_thread::sleep_for(5ms);
  const auto t0 = Clock::now();
  ASSERT_EQ(::kill(gw.pid(), SIGINT), 0);
  const int st = gw.wait_exit(3000);
  ASSERT_GE(st, 0);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 1.0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << gw.report();
}

// ---------------------------------------------------------------------------------------------
// API key

int auth_status(int port, const std::string& key) {
  std::vector<std::string> h;
  if (!key.empty()) h.push_back("Authorization: Bearer " + key);
  return http_request(port, "GET", "/v1/models", "", h).status;
}

std::string cmdline_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/cmdline");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return s;
}

TEST(GatewayApiKey, FromAFileTrimmedAndNotOnTheCommandLine) {
  FakeWorker worker;
  const auto file = std::filesystem::temp_directory_path() / ("ft-key-" + std::to_string(::getpid()));
  std::ofstream(file) << "file-secret-42\n";
  GatewayProcess gw(gateway_args({worker.address()}, {"--api-key-file", file.string()}));
  ASSERT_TRUE(gw.wait_healthy());
  EXPECT_EQ(auth_status(gw.port(), ""), 401);
  EXPECT_EQ(auth_status(gw.port(), "file-secret-4"), 401);
  EXPECT_EQ(auth_status(gw.port(), "file-secret-42"), 200);
  EXPECT_EQ(cmdline_of(gw.pid()).find("file-secret-42"), std::string::npos);
  std::filesystem::remove(file);
}

TEST(GatewayApiKey, FromTheEnvironment) {
  FakeWorker worker;
  ::setenv("FLASHTIER_API_KEY", "env-secret-7", 1);
  GatewayProcess gw(gateway_args({worker.address()}));
  ::unsetenv("FLASHTIER_API_KEY");
  ASSERT_TRUE(gw.wait_healthy());
  EXPECT_EQ(auth_status(gw.port(), ""), 401);
  EXPECT_EQ(auth_status(gw.port(), "wrong"), 401);
  EXPECT_EQ(auth_status(gw.port(), "env-secret-7"), 200);
  EXPECT_EQ(cmdline_of(gw.pid()).find("env-secret-7"), std::string::npos);
}

TEST(GatewayApiKey, AnUnreadableFileStopsTheStartWithItsName) {
  FakeWorker worker;
  try {
    GatewayProcess gw(gateway_args({worker.address()}, {"--api-key-file", "/nonexistent/flashtier-key"}));
    ADD_FAILURE() << "the gateway started without its key file";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("--api-key-file: cannot read /nonexistent/flashtier-key"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// Connection limits

TEST(GatewayLimits, AClientDribblingHeadersIsCutOffAtTheHeaderTimeout) {
  FakeWorker worker;
  GatewayProcess gw(gateway_args({worker.address()}, {"--header-timeout-s", "1", "--request-timeout-s", "60"}));
  ASSERT_TRUE(gw.wait_healthy());
  RawConn slow(gw.port());
  ASSERT_GE(slow.fd, 0);
  const auto t0 = Clock::now();
  ASSERT_TRUE(slow.send("GET /health HTTP/1.1\r\nHost: x\r\n"));
  // One byte every 100 ms: the connection is never idle, but its headers never end.
  bool closed = false;
  for (int i = 0; i < 40 && !closed; ++i) {
    slow.send("X");
    closed = slow.closed_within(100);
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_TRUE(closed) << "a dribbling client held the connection for 4 s with --header-timeout-s 1";
  EXPECT_GE(secs, 0.9);
  EXPECT_LT(secs, 2.5);
  // Meanwhile everybody else is served.
  EXPECT_EQ(http_request(gw.port(), "GET", "/health").status, 200);
}

TEST(GatewayLimits, ConnectionsOverTheLimitGet503AndTheSlotIsFreedOnClose) {
  FakeWorker worker;
  GatewayProcess gw(gateway_args({worker.address()}, {"--max-connections", "2"}));
  ASSERT_TRUE(gw.wait_healthy());
  {
    RawConn a(gw.port()), b(gw.port());
    ASSERT_GE(a.fd, 0);
    ASSERT_GE(b.fd, 0);
    HttpResult over;
    for (int i = 0; i < 100; ++i) {  // until both idle connections are accepted
      over = http_request(gw.port(), "GET", "/health");
      if (over.status == 503) break;
      std::this_thread::sleep_for(10ms);
    }
    ASSERT_EQ(over.status, 503) << over.body;
    EXPECT_NE(parse(over.body)["error"]["message"].get<std::string>().find("too many connections (the limit is 2)"),
              std::string::npos)
        << over.body;
  }
  HttpResult after;
  for (int i = 0; i < 100; ++i) {
    after = http_request(gw.port(), "GET", "/health");
    if (after.status == 200) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(after.status, 200) << after.body;
}

// ---------------------------------------------------------------------------------------------
// Workers found through DNS

// Runs the gateway in its own mount namespace where `name` resolves (through /etc/hosts, as any
// name does with glibc's resolver) to the given addresses; empty when that is not possible here.
std::vector<std::string> hosts_prefix(const std::string& hosts_file, const std::string& name, const std::vector<std::string>& ips) {
  std::ofstream f(hosts_file);
  for (const auto& ip : ips) f << ip << " " << name << "\n";
  f.close();
  if (::access("/usr/bin/unshare", X_OK) != 0) return {};
  const std::string probe = "/usr/bin/unshare -m sh -c 'mount --bind " + hosts_file + " /etc/hosts && getent ahosts " + name +
                            "' >/dev/null 2>&1";
  if (std::system(probe.c_str()) != 0) return {};
  return {"/usr/bin/unshare", "-m", "/bin/sh", "-c", "mount --bind " + hosts_file + " /etc/hosts && exec \"$0\" \"$@\""};
}

TEST(GatewayWorkerDns, BothAddressesOfTheNameServeAndTheLeastBusyGetsTheNextStream) {
  FakeWorker a("fake-model", "127.0.0.1", 0);
  FakeWorker b("fake-model", "127.0.0.2", a.port());  // the same port, another address
  const std::string hosts = (std::filesystem::temp_directory_path() / ("ft-hosts-" + std::to_string(::getpid()))).string();
  auto prefix = hosts_prefix(hosts, "gpu-workers.flashtier.test", {"127.0.0.1", "127.0.0.2"});
  if (prefix.empty()) GTEST_SKIP() << "cannot give the gateway its own /etc/hosts here (unshare -m and mount as root)";
  std::vector<std::string> args{"--model-dir", tiny_chat_model(), "--port", "0", "--host", "127.0.0.1",
                                "--health-interval-ms", "100", "--dns-interval-ms", "200",
                                "--worker-dns", "gpu-workers.flashtier.test:" + std::to_string(a.port())};
  GatewayProcess gw(args, prefix);
  ASSERT_TRUE(gw.wait_healthy());

  // A long stream to one worker, then short requests: least-outstanding sends every one of them
  // to the other worker.
  const auto a_tok = ids_of(" a")[0];
  a.set_script(script_of(std::vector<int32_t>(60, a_tok), 50ms));
  b.set_script(script_of(std::vector<int32_t>(60, a_tok), 50ms));
  const std::string up_a = "flashtier_worker_up{worker=\"" + a.address() + "\"} 1";
  const std::string up_b = "flashtier_worker_up{worker=\"" + b.address() + "\"} 1";
  bool both = false;
  for (int i = 0; i < 150 && !both; ++i) {  // until the pool has found both and both are SERVING
    HttpResult m = http_request(gw.port(), "GET", "/metrics");
    both = m.body.find(up_a) != std::string::npos && m.body.find(up_b) != std::string::npos;
    if (!both) std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(both) << http_request(gw.port(), "GET", "/metrics").body;
  SseStream longer(gw.port(), "/v1/chat/completions", chat_body(true).dump());
  ASSERT_EQ(longer.status(), 200);
  std::string ev;
  ASSERT_TRUE(longer.next(ev));
  FakeWorker& busy = a.active() == 1 ? a : b;
  FakeWorker& idle = a.active() == 1 ? b : a;
  ASSERT_EQ(busy.active(), 1);
  idle.set_script(script_of(cat(ids_of(" ok"), {kEos}), 0us));
  const int busy_calls = busy.generate_calls(), idle_calls = idle.generate_calls();
  for (int i = 0; i < 4; ++i) {
    HttpResult r = http_request(gw.port(), "POST", "/v1/chat/completions", chat_body(false).dump());
    EXPECT_EQ(r.status, 200) << r.body;
  }
  EXPECT_EQ(idle.generate_calls(), idle_calls + 4);
  EXPECT_EQ(busy.generate_calls(), busy_calls);
  longer.close();

  // A worker that goes away is dropped from rotation; the other one serves everything.
  b.set_script(script_of(cat(ids_of(" ok"), {kEos}), 0us));
  a.set_script(script_of(cat(ids_of(" ok"), {kEos}), 0us));
  a.shutdown();
  std::this_thread::sleep_for(400ms);
  const int b_calls = b.generate_calls();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(http_request(gw.port(), "POST", "/v1/chat/completions", chat_body(false).dump()).status, 200);
  EXPECT_EQ(b.generate_calls(), b_calls + 3);
  std::filesystem::remove(hosts);
}

TEST(GatewayWorkerDns, ANameThatDoesNotResolveYetIsRetried) {
  // Compose starts the gateway before any gpu-worker has an address: no worker, /health 503,
  // and the gateway keeps resolving.
  std::vector<std::string> args{"--model-dir", tiny_chat_model(), "--port", "0", "--host", "127.0.0.1",
                                "--health-interval-ms", "100", "--dns-interval-ms", "100",
                                "--worker-dns", "no-such-worker.invalid:50051"};
  GatewayProcess gw(args);
  std::this_thread::sleep_for(300ms);
  HttpResult h = http_request(gw.port(), "GET", "/health");
  EXPECT_EQ(h.status, 503) << h.body;
  HttpResult r = http_request(gw.port(), "POST", "/v1/chat/completions", chat_body(false).dump());
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_TRUE(parse(r.body).contains("error"));
}

}  // namespace
}  // namespace ft::test
