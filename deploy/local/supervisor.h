#pragma once
// Runs child processes, restarts the ones that die unexpectedly (with a growing back-off) and
// stops them in order. Used by flashtier-local to keep the three services up on one host.
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace ft::local {

struct ChildSpec {
  std::string name;               // for logs: "cpu-expert-worker"
  std::vector<std::string> argv;  // argv[0] is the executable path
  // NAME=VALUE added to the inherited environment (secrets stay out of the command line, which
  // any user can read in ps).
  std::vector<std::string> env{};
  // How long stop_all waits for this child after SIGTERM before SIGKILL (0: stop_all's grace).
  // A draining service gets its drain timeout plus a margin.
  std::chrono::milliseconds stop_grace{0};
};

class Supervisor {
 public:
  using Log = std::function<void(const std::string&)>;
  explicit Supervisor(Log log) : log_(std::move(log)) {}
  ~Supervisor();

  // Starts the child now; throws ft::Error if it cannot be spawned.
  void start(const ChildSpec& spec);
  // Reaps exited children and restarts them when their back-off has passed. Call often.
  void poll();
  // Stops the children one at a time in reverse start order: SIGTERM, then SIGKILL after the
  // child's stop_grace (or `grace`). One at a time so a draining gateway's last streams are still
  // served by the gpu-worker behind it, and a draining gpu-worker still has its experts.
  void stop_all(std::chrono::milliseconds grace);
  // Sends `sig` to the named child (tests, and forwarding).
  bool signal(const std::string& name, int sig);
  pid_t pid_of(const std::string& name) const;
  int restarts_of(const std::string& name) const;

 private:
  struct Child {
    ChildSpec spec;
    pid_t pid = -1;
    int restarts = 0;
    std::chrono::steady_clock::time_point started, restart_at;
    std::chrono::milliseconds backoff{250};
  };
  pid_t spawn(const ChildSpec& spec);
  Log log_;
  mutable std::mutex m_;
  std::vector<Child> children_;
  bool stopping_ = false;
};

}  // namespace ft::local
