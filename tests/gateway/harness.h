#pragma once
// Test plumbing for the gateway: the real flashtier-gateway binary as a child process, a raw-socket
// HTTP/1.1 client (incremental SSE reading, abrupt close), and curl.
#include <string>
#include <vector>

#include <sys/types.h>

namespace ft::test {

struct HttpResult {
  int status = 0;
  std::string headers;  // raw header block, lower-cased names
  std::string body;     // de-chunked
  std::string header(const std::string& name) const;
};

// One request on a fresh connection (Connection: close); waits for the whole response.
HttpResult http_request(int port, const std::string& method, const std::string& path, const std::string& body = "",
                        const std::vector<std::string>& headers = {}, int timeout_ms = 30000);

// "data: ..." payloads of an SSE body (comments skipped).
std::vector<std::string> sse_data(const std::string& body);

class SseStream {
 public:
  SseStream(int port, const std::string& path, const std::string& body, const std::vector<std::string>& headers = {});
  ~SseStream();
  int status(int timeout_ms = 10000);  // reads the response head
  // Next event block (without the blank line), e.g. "data: {...}" or ": keep-alive"; false at the
  // end of the stream or on timeout.
  bool next(std::string& event, int timeout_ms = 10000);
  void close();  // abrupt client disconnect

 private:
  bool fill(int timeout_ms);
  bool decode();
  int fd_ = -1;
  int status_ = 0;
  bool head_done_ = false, chunked_ = false, eof_ = false;
  std::string raw_, body_;
};

// Any child process with its stdout+stderr collected in the background.
class ChildProcess {
 public:
  explicit ChildProcess(const std::vector<std::string>& argv);
  ~ChildProcess();  // SIGTERM, then SIGKILL
  // Waits until the output contains `text`; false on timeout or exit.
  bool wait_for_output(const std::string& text, int timeout_ms);
  std::string output() const;
  bool running() const;
  pid_t pid() const { return pid_; }
  // Waits for the process to exit and reaps it: its wait status, or -1 on timeout. After an
  // exit, output() holds everything it wrote.
  int wait_exit(int timeout_ms);

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  int exit_status_ = -1;
  struct State;
  State* st_;
};

// A TCP port that was free a moment ago.
int free_port();
// A TCP connection to 127.0.0.1:port (TCP_NODELAY), or -1 when none can be made.
int connect_loopback(int port);

// The gateway binary as a child process. Its stderr goes to a file; the harness prints the
// process's state and the end of that file when a request gets no response (status 0) and, at
// destruction, when a test failed or the gateway died on its own.
class GatewayProcess {
 public:
  explicit GatewayProcess(const std::vector<std::string>& args);
  // `prefix` runs before the binary, e.g. {"unshare", "-m", ...} to give it its own /etc/hosts.
  GatewayProcess(const std::vector<std::string>& args, const std::vector<std::string>& prefix);
  ~GatewayProcess();
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // Polls /health until 200 (or timeout).
  bool wait_healthy(int timeout_ms = 10000);
  std::string output() const { return out_; }  // what it printed before listening
  // "flashtier-gateway (pid N, port P) running|exited with status S|killed by signal S" and the
  // last few KB of its stderr.
  std::string report() const;
  // The reports of every gateway this process runs.
  static std::string report_all();
  // Waits for the process to exit and reaps it: its wait status, or -1 on timeout. After an
  // exit, output() holds everything it wrote.
  int wait_exit(int timeout_ms);
  std::string stderr_text() const;  // the last 64 KB of its stderr

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string out_;
  std::string stderr_path_;
  int exit_status_ = -1;  // waitpid status once reaped
};

struct CurlResult {
  int status = 0;
  std::string body;
};
// Runs curl with the given (shell-quoted) arguments; the status comes from -w.
CurlResult curl(const std::string& args);
std::string shell_quote(const std::string& s);

std::string bin_path(const std::string& name);

}  // namespace ft::test
