#pragma once
// A hugetlbfs mount the tests may use: $FLASHTIER_HUGETLBFS, else the usual /dev/hugepages; ""
// when none is mounted there or the system has fewer than `pages` huge pages free.
#include <cstdlib>
#include <fstream>
#include <string>

namespace ft::test {

inline std::string hugetlbfs_dir(long pages = 8) {
  const char* env = std::getenv("FLASHTIER_HUGETLBFS");
  const std::string dir = env && *env ? env : "/dev/hugepages";
  std::ifstream mounts("/proc/mounts");
  bool mounted = false;
  for (std::string dev, at, type, rest; mounts >> dev >> at >> type && std::getline(mounts, rest);)
    mounted = mounted || (at == dir && type == "hugetlbfs");
  std::ifstream meminfo("/proc/meminfo");
  long free_pages = 0;
  for (std::string key, rest; meminfo >> key && std::getline(meminfo, rest);)
    if (key == "HugePages_Free:") free_pages = std::atol(rest.c_str());
  return mounted && free_pages >= pages ? dir : "";
}

}  // namespace ft::test
