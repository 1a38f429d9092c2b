#pragma once
// What /proc says about processes: the children of a pid (the launcher's services) and a
// process's resident memory. For the fault suite and the soak tool.
#include <sys/types.h>

#include <string>
#include <vector>

namespace ft::local {

struct ProcessInfo {
  pid_t pid = -1;
  std::string argv0;  // the executable as started
};

// Live (not zombie) children of `parent`.
std::vector<ProcessInfo> children_of(pid_t parent);
// The child of `parent` whose argv[0] ends with `binary`; -1 when none.
pid_t child_running(pid_t parent, const std::string& binary);
// VmRSS in KiB; -1 when the process is gone.
long rss_kib(pid_t pid);

}  // namespace ft::local
