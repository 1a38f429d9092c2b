#include "shared/ipc/liveness.h"

#include <signal.h>
#include <sys/stat.h>

#include <cerrno>
#include <ctime>
#include <fstream>

namespace ft::ipc {

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t pid_namespace_id() {
  static const uint64_t id = [] {
    struct stat st;
    if (stat("/proc/self/ns/pid", &st) != 0) return uint64_t{0};
    return static_cast<uint64_t>(st.st_ino);
  }();
  return id;
}

bool process_alive(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // A killed process that its parent has not reaped yet still answers kill(pid, 0): a zombie.
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return true;
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return true;
  const char state = stat[paren + 2];
  return state != 'Z' && state != 'X';
}

std::string host_boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id;
}

}  // namespace ft::ipc
