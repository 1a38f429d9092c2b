#include "deploy/local/supervisor.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

extern char** environ;

#include "shared/core/error.h"

namespace ft::local {

Supervisor::~Supervisor() { stop_all(std::chrono::milliseconds(3000)); }

pid_t Supervisor::spawn(const ChildSpec& spec) {
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // The environment is built before fork (no allocation in the child).
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    bool replaced = false;
    for (const auto& x : spec.env) replaced = replaced || kv.compare(0, x.find('=') + 1, x, 0, x.find('=') + 1) == 0;
    if (!replaced) env_strings.push_back(kv);
  }
  env_strings.insert(env_strings.end(), spec.env.begin(), spec.env.end());
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  if (access(argv[0], X_OK) != 0)
    throw Error("cannot start " + spec.name + " (" + spec.argv[0] + "): " + std::strerror(errno));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw Error("cannot start " + spec.name + ": fork: " + std::strerror(errno));
  if (pid == 0) {
    // Children must not outlive the launcher, even when it is killed with SIGKILL.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

void Supervisor::start(const ChildSpec& spec) {
  Child c;
  c.spec = spec;
  c.pid = spawn(spec);
  c.started = std::chrono::steady_clock::now();
  log_(spec.name + " started (pid " + std::to_string(c.pid) + ")");
  std::lock_guard<std::mutex> l(m_);
  children_.push_back(std::move(c));
}

void Supervisor::poll() {
  std::lock_guard<std::mutex> l(m_);
  const auto now = std::chrono::steady_clock::now();
  for (Child& c : children_) {
    if (c.pid > 0) {
      int status = 0;
      const pid_t r = waitpid(c.pid, &status, WNOHANG);
      if (r != c.pid) continue;
      const std::string how = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                                  : "exited with status " + std::to_string(WEXITSTATUS(status));
      c.pid = -1;
      if (stopping_) continue;
      // A child that ran for a while gets a quick restart; one that keeps dying backs off.
      if (now - c.started > std::chrono::seconds(30)) c.backoff = std::chrono::milliseconds(250);
      c.restart_at = now + c.backoff;
      log_(c.spec.name + " " + how + "; restarting in " + std::to_string(c.backoff.count()) + " ms");
      c.backoff = std::min(c.backoff * 2, std::chrono::milliseconds(8000));
    } else if (!stopping_ && now >= c.restart_at) {
      try {
        c.pid = spawn(c.spec);
        c.started = now;
        ++c.restarts;
        log_(c.spec.name + " restarted (pid " + std::to_string(c.pid) + ")");
      } catch (const Error& e) {
        log_(e.what());
        c.restart_at = now + c.backoff;
      }
    }
  }
}

void Supervisor::stop_all(std::chrono::milliseconds grace) {
  std::unique_lock<std::mutex> l(m_);
  stopping_ = true;
  for (auto it = children_.rbegin(); it != children_.rend(); ++it) {
    if (it->pid <= 0) continue;
    kill(it->pid, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + (it->spec.stop_grace.count() > 0 ? it->spec.stop_grace : grace);
    while (it->pid > 0) {
      int status = 0;
      if (waitpid(it->pid, &status, WNOHANG) == it->pid) {
        it->pid = -1;
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        log_(it->spec.name + " did not stop in time; killing it");
        kill(it->pid, SIGKILL);
        waitpid(it->pid, &status, 0);
        it->pid = -1;
        break;
      }
      l.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      l.lock();
    }
  }
}

bool Supervisor::signal(const std::string& name, int sig) {
  std::lock_guard<std::mutex> l(m_);
  for (const Child& c : children_)
    if (c.spec.name == name && c.pid > 0) return kill(c.pid, sig) == 0;
  return false;
}

pid_t Supervisor::pid_of(const std::string& name) const {
  std::lock_guard<std::mutex> l(m_);
  for (const Child& c : children_)
    if (c.spec.name == name) return c.pid;
  return -1;
}

int Supervisor::restarts_of(const std::string& name) const {
  std::lock_guard<std::mutex> l(m_);
  for (const Child& c : children_)
    if (c.spec.name == name) return c.restarts;
  return 0;
}

}  // namespace ft::local
