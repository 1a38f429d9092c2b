#include "tests/gateway/harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

extern char** environ;

namespace ft::test {

namespace {

// fork + exec with stdout on `out_fd` and stderr on `err_fd` (-1: inherited); the child gets
// SIGKILL when the test process dies, so a crashed test never leaves servers behind.
pid_t spawn(const std::vector<std::string>& args, int out_fd, int err_fd) {
  std::vector<std::string> a = args;
  std::vector<char*> argv;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(out_fd, 1);
    if (err_fd >= 0) dup2(err_fd, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// Waits up to timeout_ms for `pid` to exit and reaps it: its wait status (kept in `status`, so a
// second call returns it again), or -1 while it still runs.
int reap_within(pid_t pid, int& status, int timeout_ms) {
  if (status >= 0) return status;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  do {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) return status = st;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (std::chrono::steady_clock::now() < until);
  return -1;
}

int connect_to(int port) {
  const int fd = connect_loopback(port);
  if (fd < 0) throw std::runtime_error("connect to 127.0.0.1:" + std::to_string(port) + " failed");
  return fd;
}

void send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server may answer early (413) and close
    off += size_t(n);
  }
}

std::string build_request(const std::string& method, const std::string& path, const std::string& body,
                          const std::vector<std::string>& headers) {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  bool has_ct = false;
  for (const auto& h : headers) {
    r += h + "\r\n";
    std::string l = h;
    std::transform(l.begin(), l.end(), l.begin(), ::tolower);
    if (l.rfind("content-type:", 0) == 0) has_ct = true;
  }
  if (!body.empty() || method == "POST") {
    if (!has_ct) r += "Content-Type: application/json\r\n";
    r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  r += "\r\n" + body;
  return r;
}

}  // namespace

std::string HttpResult::header(const std::string& name) const {
  std::string key = name;
  std::transform(key.begin(), key.end(), key.begin(), ::tolower);
  key += ":";
  size_t p = headers.find(key);
  if (p == std::string::npos) return {};
  size_t e = headers.find("\r\n", p);
  std::string v = headers.substr(p + key.size(), e - p - key.size());
  while (!v.empty() && v.front() == ' ') v.erase(0, 1);
  return v;
}

SseStream::SseStream(int port, const std::string& path, const std::string& body, const std::vector<std::string>& headers) {
  fd_ = connect_to(port);
  send_all(fd_, build_request("POST", path, body, headers));
}

SseStream::~SseStream() { close(); }

void SseStream::close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

bool SseStream::fill(int timeout_ms) {
  if (eof_ || fd_ < 0) return false;
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return false;
  char buf[65536];
  ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
  if (n <= 0) {
    eof_ = true;
    return false;
  }
  raw_.append(buf, size_t(n));
  return true;
}

// Moves what can be decoded from raw_ into body_.
bool SseStream::decode() {
  if (!head_done_) {
    size_t e = raw_.find("\r\n\r\n");
    if (e == std::string::npos) return false;
    std::string head = raw_.substr(0, e);
    raw_.erase(0, e + 4);
    status_ = std::atoi(head.c_str() + head.find(' ') + 1);
    std::string lower = head;
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    chunked_ = lower.find("transfer-encoding: chunked") != std::string::npos;
    head_done_ = true;
  }
  if (!chunked_) {
    body_ += raw_;
    raw_.clear();
    return true;
  }
  for (;;) {
    size_t e = raw_.find("\r\n");
    if (e == std::string::npos) return true;
    size_t len = std::stoul(raw_.substr(0, e), nullptr, 16);
    if (len == 0) {
      eof_ = true;
      raw_.clear();
      return true;
    }
    if (raw_.size() < e + 2 + len + 2) return true;
    body_.append(raw_, e + 2, len);
    raw_.erase(0, e + 2 + len + 2);
  }
}

int SseStream::status(int timeout_ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!head_done_) {
    decode();
    if (head_done_) break;
    int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count());
    if (left <= 0 || !fill(left)) break;
  }
  if (status_ == 0)
    std::fprintf(stderr, "[harness] SSE request: no response head (%s)\n%s", eof_ ? "EOF" : "timeout",
                 GatewayProcess::report_all().c_str());
  return status_;
}

bool SseStream::next(std::string& event, int timeout_ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    decode();
    size_t e = body_.find("\n\n");
    if (e != std::string::npos) {
      event = body_.substr(0, e);
      body_.erase(0, e + 2);
      return true;
    }
    int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count());
    if (left <= 0 || !fill(left)) {
      decode();
      if (!body_.empty() && eof_) {
        event = body_;
        body_.clear();
        return true;
      }
      return false;
    }
  }
}

HttpResult http_request(int port, const std::string& method, const std::string& path, const std::string& body,
                        const std::vector<std::string>& headers, int timeout_ms) {
  int fd = connect_to(port);
  send_all(fd, build_request(method, path, body, headers));
  std::string raw;
  char buf[65536];
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string ended = "timeout";
  for (;;) {
    int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count());
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, left) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0) ended = std::strerror(errno);
    if (n == 0) ended = "EOF";
    if (n <= 0) break;
    raw.append(buf, size_t(n));
  }
  ::close(fd);
  HttpResult r;
  size_t e = raw.find("\r\n\r\n");
  if (e == std::string::npos) {
    std::fprintf(stderr, "[harness] %s %s on port %d: no response (%s after %zu bytes)\n%s", method.c_str(), path.c_str(), port,
                 ended.c_str(), raw.size(), GatewayProcess::report_all().c_str());
    return r;
  }
  r.headers = raw.substr(0, e);
  std::transform(r.headers.begin(), r.headers.end(), r.headers.begin(), ::tolower);
  r.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
  std::string rest = raw.substr(e + 4);
  if (r.headers.find("transfer-encoding: chunked") != std::string::npos) {
    size_t pos = 0;
    for (;;) {
      size_t le = rest.find("\r\n", pos);
      if (le == std::string::npos) break;
      size_t len = std::stoul(rest.substr(pos, le - pos), nullptr, 16);
      if (len == 0) break;
      r.body.append(rest, le + 2, len);
      pos = le + 2 + len + 2;
    }
  } else {
    r.body = rest;
  }
  return r;
}

std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t e = body.find("\n\n", pos);
    std::string ev = body.substr(pos, e == std::string::npos ? std::string::npos : e - pos);
    if (ev.rfind("data: ", 0) == 0) out.push_back(ev.substr(6));
    if (e == std::string::npos) break;
    pos = e + 2;
  }
  return out;
}

struct ChildProcess::State {
  mutable std::mutex mu;
  std::string out;
  std::atomic<bool> eof{false};
  std::thread reader;
};

ChildProcess::ChildProcess(const std::vector<std::string>& argv_in) : st_(new State) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  pid_ = spawn(argv_in, pipefd[1], pipefd[1]);
  ::close(pipefd[1]);
  if (pid_ < 0) {
    ::close(pipefd[0]);
    throw std::runtime_error("cannot start " + argv_in[0]);
  }
  fd_ = pipefd[0];
  State* st = st_;
  int fd = fd_;
  st_->reader = std::thread([st, fd] {
    char buf[4096];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      std::lock_guard lk(st->mu);
      st->out.append(buf, size_t(n));
    }
    st->eof = true;
  });
}

int ChildProcess::wait_exit(int timeout_ms) {
  const int status = reap_within(pid_, exit_status_, timeout_ms);
  // Reaped is not read: the reader may not have taken the child's last bytes from the pipe yet
  // (a flake under load: a refused flag's message missing from output()). Its end of file comes
  // once the child's side closes; a grandchild keeping the pipe open bounds the wait.
  if (status != -1) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (!st_->eof && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return status;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && exit_status_ < 0) {
    kill(pid_, SIGTERM);
    bool gone = false;
    for (int i = 0; i < 150 && !gone; ++i) {
      gone = waitpid(pid_, nullptr, WNOHANG) == pid_;
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!gone) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  if (st_->reader.joinable()) st_->reader.join();
  if (fd_ >= 0) ::close(fd_);
  delete st_;
}

bool ChildProcess::wait_for_output(const std::string& text, int timeout_ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < until) {
    {
      std::lock_guard lk(st_->mu);
      if (st_->out.find(text) != std::string::npos) return true;
    }
    if (st_->eof) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::string ChildProcess::output() const {
  std::lock_guard lk(st_->mu);
  return st_->out;
}

bool ChildProcess::running() const { return pid_ > 0 && !st_->eof && kill(pid_, 0) == 0; }

int connect_loopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

std::string bin_path(const std::string& name) { return std::string(FLASHTIER_BIN_DIR) + "/" + name; }

namespace {

std::mutex live_mu;
std::vector<const GatewayProcess*> live_gateways;

std::string describe_status(int st) {
  if (WIFEXITED(st)) return "exited with status " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return "killed by signal " + std::to_string(WTERMSIG(st)) + " (" + strsignal(WTERMSIG(st)) + ")";
  return "status " + std::to_string(st);
}

std::string file_tail(const std::string& path, size_t max_bytes) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return {};
  std::fseek(f, 0, SEEK_END);
  long size = std::ftell(f);
  long from = size > long(max_bytes) ? size - long(max_bytes) : 0;
  std::fseek(f, from, SEEK_SET);
  std::string s(size_t(size - from), '\0');
  s.resize(std::fread(s.data(), 1, s.size(), f));
  std::fclose(f);
  return (from > 0 ? "[...]" : "") + s;
}

// A test of this process failed (so far, or in the current test).
bool test_failed() {
  const auto* u = ::testing::UnitTest::GetInstance();
  const auto* suite = u->current_test_suite();
  return u->failed_test_count() > 0 || u->ad_hoc_test_result().Failed() || (suite && suite->ad_hoc_test_result().Failed()) ||
         (u->current_test_info() && ::testing::Test::HasFailure());
}

}  // namespace

GatewayProcess::GatewayProcess(const std::vector<std::string>& args) : GatewayProcess(args, {}) {}

GatewayProcess::GatewayProcess(const std::vector<std::string>& args, const std::vector<std::string>& prefix) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  char err_path[] = "/tmp/flashtier-gateway-stderr-XXXXXX";
  int err_fd = ::mkostemp(err_path, O_CLOEXEC);
  if (err_fd < 0) throw std::runtime_error("mkstemp failed");
  stderr_path_ = err_path;
  std::vector<std::string> argv_s = prefix;
  argv_s.push_back(bin_path("flashtier-gateway"));
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  pid_ = spawn(argv_s, pipefd[1], err_fd);
  ::close(pipefd[1]);
  ::close(err_fd);
  if (pid_ < 0) {
    ::close(pipefd[0]);
    throw std::runtime_error("cannot start " + argv_s[0]);
  }
  // Read stdout until the "listening on http://HOST:PORT" line.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  char buf[4096];
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{pipefd[0], POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    ssize_t n = ::read(pipefd[0], buf, sizeof buf);
    if (n <= 0) break;
    out_.append(buf, size_t(n));
    size_t k = out_.find("listening on http://");
    if (k != std::string::npos && out_.find('\n', k) != std::string::npos) {
      size_t colon = out_.find(':', k + 20);
      port_ = std::atoi(out_.c_str() + colon + 1);
      break;
    }
  }
  ::close(pipefd[0]);
  if (port_ == 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    std::string err = file_tail(stderr_path_, 4096);
    ::unlink(stderr_path_.c_str());
    throw std::runtime_error("flashtier-gateway did not start: " + out_ + err);
  }
  std::lock_guard lk(live_mu);
  live_gateways.push_back(this);
}

GatewayProcess::~GatewayProcess() {
  {
    std::lock_guard lk(live_mu);
    std::erase(live_gateways, this);
  }
  bool died = false;  // before we asked it to stop
  if (pid_ > 0 && exit_status_ < 0) {
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      died = true;
    } else {
      kill(pid_, SIGTERM);
      bool gone = false;
      for (int i = 0; i < 100 && !gone; ++i) {
        gone = waitpid(pid_, &st, WNOHANG) == pid_;
        if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!gone) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &st, 0);
      }
    }
    exit_status_ = st;
  }
  const bool clean = exit_status_ >= 0 && WIFEXITED(exit_status_) && WEXITSTATUS(exit_status_) == 0;
  if (died || !clean || test_failed()) std::fprintf(stderr, "[harness] %s", report().c_str());
  ::unlink(stderr_path_.c_str());
}

std::string GatewayProcess::report() const {
  std::string state = "running";
  if (exit_status_ >= 0) {
    state = describe_status(exit_status_);
  } else if (pid_ > 0) {
    siginfo_t si{};  // peek without reaping (the destructor reaps)
    if (::waitid(P_PID, id_t(pid_), &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid_)
      state = si.si_code == CLD_EXITED ? "exited with status " + std::to_string(si.si_status)
                                       : "killed by signal " + std::to_string(si.si_status) + " (" + strsignal(si.si_status) + ")";
  }
  std::string err = file_tail(stderr_path_, 4096);
  return "flashtier-gateway (pid " + std::to_string(pid_) + ", port " + std::to_string(port_) + ") " + state +
         (err.empty() ? "; stderr empty\n" : "; stderr:\n" + err + (err.back() == '\n' ? "" : "\n"));
}

int GatewayProcess::wait_exit(int timeout_ms) { return reap_within(pid_, exit_status_, timeout_ms); }

std::string GatewayProcess::stderr_text() const { return file_tail(stderr_path_, 64 * 1024); }

std::string GatewayProcess::report_all() {
  std::lock_guard lk(live_mu);
  std::string out;
  for (const auto* g : live_gateways) out += g->report();
  return out;
}

bool GatewayProcess::wait_healthy(int timeout_ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < until) {
    if (http_request(port_, "GET", "/health", "", {}, 2000).status == 200) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q.push_back(c);
  }
  return q + "'";
}

CurlResult curl(const std::string& args) {
  std::string cmd = "curl -sS --max-time 30 -o - -w '\\n%{http_code}' " + args + " 2>&1";
  FILE* f = ::popen(cmd.c_str(), "r");
  CurlResult r;
  if (!f) return r;
  char buf[4096];
  size_t n;
  std::string out;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  ::pclose(f);
  size_t nl = out.rfind('\n');
  if (nl == std::string::npos) return r;
  r.status = std::atoi(out.c_str() + nl + 1);
  r.body = out.substr(0, nl);
  return r;
}

}  // namespace ft::test
