// flashtier-shm: lists and removes flashtier's POSIX shared-memory objects in /dev/shm.
// Expert segments are kept on purpose when a cpu-expert-worker stops (the next start re-attaches
// in milliseconds instead of reloading every expert); this is how an operator sees them and frees
// the memory. Rings are removed by the cpu-expert-worker on a clean stop; a ring left behind by a
// SIGKILL shows here as stale.
//   flashtier-shm list [--json]                 every flashtier object: kind, size, model, users
//   flashtier-shm remove NAME... [--force]      remove named objects (refused while mapped)
//   flashtier-shm remove --all|--stale [--force]  every object / every object nobody maps
// Objects are recognised by their magic (expert segment FTEXPSEG, ring FTRING01), never by name.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <cstring>
#include <optional>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/ipc/expert_segment.h"
#include "shared/ipc/ring_layout.h"

namespace fs = std::filesystem;

namespace {

const char* kShmDir = "/dev/shm";

struct Object {
  std::string name, kind;  // kind: "expert-segment" | "ring"
  uint64_t bytes = 0;
  std::string fingerprint;
  bool complete = false;   // segments: every expert written
  uint32_t server_pid = 0; // rings: the serving cpu-expert-worker (0 = none)
  std::vector<int> users;  // pids that map it now
};

std::string cstr(const char* p, size_t n) { return std::string(p, strnlen(p, n)); }

// Reads the header without mapping the object (mapping 100+ GB just to look would be harmless
// but pointless); nullopt for anything that is not ours.
std::optional<Object> inspect(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::vector<char> h(4096, 0);
  const ssize_t n = pread(fd, h.data(), h.size(), 0);
  ::close(fd);
  if (n < 8) return std::nullopt;
  Object o;
  o.name = p.filename().string();
  std::error_code ec;
  o.bytes = fs::file_size(p, ec);
  if (std::memcmp(h.data(), ft::ipc::kSegmentMagic, 8) == 0 && n >= static_cast<ssize_t>(sizeof(ft::ipc::SegmentHeader))) {
    const auto* s = reinterpret_cast<const ft::ipc::SegmentHeader*>(h.data());
    o.kind = "expert-segment";
    o.fingerprint = cstr(s->fingerprint, sizeof s->fingerprint);
    o.complete = s->complete.load() == 1;
    return o;
  }
  if (std::memcmp(h.data(), ft::ipc::ring::kMagic, 8) == 0 && n >= static_cast<ssize_t>(sizeof(ft::ipc::ring::RingHeader))) {
    const auto* r = reinterpret_cast<const ft::ipc::ring::RingHeader*>(h.data());
    o.kind = "ring";
    o.fingerprint = cstr(r->fingerprint, sizeof r->fingerprint);
    o.server_pid = r->server_pid.load();
    return o;
  }
  return std::nullopt;
}

// Pids (in this PID namespace) with /dev/shm/<name> in their memory maps.
std::vector<int> users_of(const std::string& name) {
  std::vector<int> out;
  const std::string needle = std::string(kShmDir) + "/" + name;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream maps(e.path() / "maps");
    std::string line;
    while (std::getline(maps, line)) {
      const auto at = line.find(needle);
      if (at != std::string::npos && (line.size() == at + needle.size() || line[at + needle.size()] == ' ')) {
        out.push_back(std::stoi(pid));
        break;
      }
    }
  }
  return out;
}

std::vector<Object> scan() {
  std::vector<Object> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(kShmDir, ec)) {
    if (!e.is_regular_file()) continue;
    if (auto o = inspect(e.path())) {
      o->users = users_of(o->name);
      out.push_back(std::move(*o));
    }
  }
  std::sort(out.begin(), out.end(), [](const Object& a, const Object& b) { return a.name < b.name; });
  return out;
}

std::string gib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f GiB", static_cast<double>(b) / (1ull << 30));
  return buf;
}

int list(bool as_json) {
  const auto objs = scan();
  if (as_json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& o : objs)
      j.push_back({{"name", o.name}, {"kind", o.kind}, {"bytes", o.bytes}, {"fingerprint", o.fingerprint},
                   {"complete", o.complete}, {"server_pid", o.server_pid}, {"users", o.users}});
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  if (objs.empty()) std::printf("no flashtier shared-memory objects in %s\n", kShmDir);
  for (const auto& o : objs) {
    std::string users;
    for (int p : o.users) users += (users.empty() ? "" : ",") + std::to_string(p);
    std::printf("%-40s %-14s %14s  %s%s  mapped by: %s\n", o.name.c_str(), o.kind.c_str(), gib(o.bytes).c_str(),
                o.kind == "ring" ? "" : (o.complete ? "complete " : "INCOMPLETE "), o.fingerprint.substr(0, 16).c_str(),
                users.empty() ? "nobody (stale)" : users.c_str());
  }
  return 0;
}

int remove_objects(const std::vector<std::string>& names, bool all, bool stale, bool force) {
  const auto objs = scan();
  std::set<std::string> wanted(names.begin(), names.end());
  int failures = 0;
  for (const auto& n : names) {
    if (n.find('/') != std::string::npos || n.empty() || n[0] == '.') {
      std::fprintf(stderr, "flashtier-shm: '%s' is not a shared-memory object name\n", n.c_str());
      return 2;
    }
    bool known = false;
    for (const auto& o : objs) known = known || o.name == n;
    if (!known) {
      std::fprintf(stderr, "flashtier-shm: %s: no flashtier object of that name in %s\n", n.c_str(), kShmDir);
      ++failures;
    }
  }
  for (const auto& o : objs) {
    const bool pick = all || (stale && o.users.empty()) || wanted.count(o.name);
    if (!pick) continue;
    if (!o.users.empty() && !force) {
      std::fprintf(stderr, "flashtier-shm: %s is mapped by %zu process(es) (pid %d...); stop them or pass --force\n",
                   o.name.c_str(), o.users.size(), o.users.front());
      ++failures;
      continue;
    }
    const std::string path = std::string(kShmDir) + "/" + o.name;
    if (::unlink(path.c_str()) != 0) {
      std::fprintf(stderr, "flashtier-shm: cannot remove %s: %s\n", path.c_str(), std::strerror(errno));
      ++failures;
      continue;
    }
    std::printf("removed %s (%s, %s)\n", o.name.c_str(), o.kind.c_str(), gib(o.bytes).c_str());
  }
  return failures ? 1 : 0;
}

int usage() {
  std::fputs("usage: flashtier-shm list [--json]\n"
             "       flashtier-shm remove NAME... [--force]\n"
             "       flashtier-shm remove --all|--stale [--force]\n",
             stderr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string cmd = argv[1];
  bool as_json = false, all = false, stale = false, force = false;
  std::vector<std::string> names;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") as_json = true;
    else if (a == "--all") all = true;
    else if (a == "--stale") stale = true;
    else if (a == "--force") force = true;
    else if (a.rfind("--", 0) == 0) return usage();
    else names.push_back(a);
  }
  if (cmd == "list" && names.empty() && !all && !stale && !force) return list(as_json);
  if (cmd == "remove" && (all || stale || !names.empty())) return remove_objects(names, all, stale, force);
  return usage();
}
