// The launcher's pieces: restarting children that die, stopping them (escalating to SIGKILL),
// and the health probe against a real socket.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "deploy/local/free_port.h"
#include "deploy/local/gpu_list.h"
#include "deploy/local/http_probe.h"
#include "deploy/local/supervisor.h"
#include "shared/core/error.h"
#include "tests/support/test_paths.h"

using namespace ft::local;
using namespace std::chrono_literals;

namespace {
void quiet(const std::string&) {}
}  // namespace

TEST(Supervisor, RestartsAChildThatDies) {
  Supervisor s(quiet);
  s.start({"crasher", {"/bin/sh", "-c", "exit 3"}});
  const auto t0 = std::chrono::steady_clock::now();
  while (s.restarts_of("crasher") < 2 && std::chrono::steady_clock::now() - t0 < 5s) {
    s.poll();
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_GE(s.restarts_of("crasher"), 2);
  s.stop_all(1000ms);
}

TEST(Supervisor, RestartsAKilledChildWithANewPid) {
  Supervisor s(quiet);
  s.start({"sleeper", {"/bin/sleep", "100"}});
  const pid_t first = s.pid_of("sleeper");
  ASSERT_GT(first, 0);
  ASSERT_TRUE(s.signal("sleeper", SIGKILL));
  const auto t0 = std::chrono::steady_clock::now();
  while ((s.pid_of("sleeper") <= 0 || s.pid_of("sleeper") == first) && std::chrono::steady_clock::now() - t0 < 3s) {
    s.poll();
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_GT(s.pid_of("sleeper"), 0);
  EXPECT_NE(s.pid_of("sleeper"), first);
  EXPECT_EQ(s.restarts_of("sleeper"), 1);
  s.stop_all(1000ms);
  EXPECT_EQ(s.pid_of("sleeper"), -1);
}

TEST(Supervisor, StopEscalatesToSigkill) {
  Supervisor s(quiet);
  s.start({"stubborn", {"/bin/sh", "-c", "trap '' TERM; exec sleep 100"}});
  std::this_thread::sleep_for(100ms);  // let the shell install the trap
  const pid_t pid = s.pid_of("stubborn");
  const auto t0 = std::chrono::steady_clock::now();
  s.stop_all(300ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_NE(kill(pid, 0), 0);  // gone
}

TEST(Supervisor, MissingExecutableIsAnError) {
  Supervisor s(quiet);
  EXPECT_ANY_THROW(s.start({"ghost", {"/nonexistent/binary"}}));
}

TEST(HttpProbe, ReadsTheStatusCode) {
  const int port = free_loopback_port();
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  std::thread server([fd] {
    const int c = accept(fd, nullptr, nullptr);
    char buf[256];
    [[maybe_unused]] ssize_t n = recv(c, buf, sizeof buf, 0);
    const char* resp = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n";
    n = send(c, resp, strlen(resp), 0);
    close(c);
  });
  EXPECT_EQ(http_get_status("127.0.0.1", port, "/health", 2000ms), 503);
  server.join();
  close(fd);
  EXPECT_EQ(http_get_status("127.0.0.1", port, "/health", 300ms), -1);  // nobody listens now
}

TEST(GpuList, ParsesOrdinalsAndAll) {
  EXPECT_EQ(ft::local::parse_gpu_list("0,1", nullptr), (std::vector<int>{0, 1}));
  EXPECT_EQ(ft::local::parse_gpu_list("3", nullptr), (std::vector<int>{3}));
  EXPECT_EQ(ft::local::parse_gpu_list("all", "0,2,5"), (std::vector<int>{0, 1, 2}));
  ft::test::TempDir dev;
  for (const char* n : {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "null"})
    std::ofstream(dev / n).put('x');
  EXPECT_EQ(ft::local::parse_gpu_list("all", nullptr, dev.path()), (std::vector<int>{0, 1}));
  for (const char* bad : {"", "a", "0,,1", "0,0", "-1", "1.5"})
    EXPECT_THROW(ft::local::parse_gpu_list(bad, nullptr), ft::Error) << bad;
  ft::test::TempDir empty;
  EXPECT_THROW(ft::local::parse_gpu_list("all", nullptr, empty.path()), ft::Error);
  EXPECT_THROW(ft::local::parse_gpu_list("all", "", empty.path()), ft::Error) << "an empty CUDA_VISIBLE_DEVICES counts the device nodes";
}
