#include "deploy/local/proc_info.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace ft::local {

namespace {
std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

std::vector<ProcessInfo> children_of(pid_t parent) {
  std::vector<ProcessInfo> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = slurp(e.path().string() + "/stat");
    const size_t close = stat.rfind(')');  // the command name may hold spaces and parentheses
    if (close == std::string::npos || close + 2 >= stat.size()) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent || state == 'Z') continue;
    const std::string cmd = slurp(e.path().string() + "/cmdline");
    out.push_back({std::stoi(name), cmd.substr(0, cmd.find('\0'))});
  }
  return out;
}

pid_t child_running(pid_t parent, const std::string& binary) {
  for (const auto& c : children_of(parent))
    if (c.argv0.size() >= binary.size() && c.argv0.compare(c.argv0.size() - binary.size(), binary.size(), binary) == 0)
      return c.pid;
  return -1;
}

long rss_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

}  // namespace ft::local
