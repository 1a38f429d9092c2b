#include "tools/bench-cuda/host_backing.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ft::bench {

namespace {
constexpr size_t kHuge = size_t{2} << 20;
std::runtime_error sys_error(const std::string& what) { return std::runtime_error(what + ": " + std::strerror(errno)); }
}  // namespace

void HostBacking::allocate(size_t bytes) {
  bytes_ = bytes;
  mapped_ = (bytes + kHuge - 1) / kHuge * kHuge;
  if (kind_ == "malloc") {
    data_ = static_cast<unsigned char*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096));
    if (!data_) throw std::runtime_error("aligned_alloc failed");
    mapped_ = 0;
  } else if (kind_ == "thp" || kind_ == "4k") {
    // Over-map by one huge page so the used range starts 2 MB-aligned (THP needs aligned ranges).
    void* p = mmap(nullptr, mapped_ + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw sys_error("mmap");
    auto* base = static_cast<unsigned char*>(p);
    auto* aligned = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(base) + kHuge - 1) / kHuge * kHuge);
    if (aligned > base) munmap(base, static_cast<size_t>(aligned - base));
    const size_t tail = static_cast<size_t>(base + mapped_ + kHuge - (aligned + mapped_));
    if (tail) munmap(aligned + mapped_, tail);
    data_ = aligned;
    if (madvise(data_, mapped_, kind_ == "thp" ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) != 0) throw sys_error("madvise");
  } else if (kind_ == "hugetlb") {
    void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    if (p == MAP_FAILED) throw sys_error("mmap(MAP_HUGETLB) (are huge pages reserved? /proc/sys/vm/nr_hugepages)");
    data_ = static_cast<unsigned char*>(p);
  } else if (kind_ == "shm") {
    path_ = "/dev/shm/flashtier-bench-backing-" + std::to_string(getpid());
    fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd_ < 0) throw sys_error("open " + path_);
    if (ftruncate(fd_, static_cast<off_t>(mapped_)) != 0) throw sys_error("ftruncate " + path_);
    void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) throw sys_error("mmap " + path_);
    data_ = static_cast<unsigned char*>(p);
  } else {
    throw std::runtime_error("unknown host backing '" + kind_ + "' (malloc, thp, 4k, hugetlb, shm)");
  }
}

void HostBacking::seal() {
  if (kind_ != "shm") return;
  munmap(data_, mapped_);
  void* p = mmap(nullptr, mapped_, PROT_READ, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) throw sys_error("mmap read-only " + path_);
  data_ = static_cast<unsigned char*>(p);
}

HostBacking::~HostBacking() {
  if (kind_ == "malloc") {
    std::free(data_);
  } else if (data_) {
    munmap(data_, mapped_);
  }
  if (fd_ >= 0) close(fd_);
  if (!path_.empty()) unlink(path_.c_str());
}

std::string HostBacking::pages() const {
  std::ifstream f("/proc/self/smaps");
  std::string line, out;
  bool in = false;
  const auto addr = reinterpret_cast<uintptr_t>(data_);
  while (std::getline(f, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      if (in) break;
      in = addr >= lo && addr < hi;
      continue;
    }
    if (!in) continue;
    for (const char* key : {"KernelPageSize", "AnonHugePages", "ShmemPmdMapped", "FilePmdMapped", "Private_Hugetlb",
                            "Shared_Hugetlb"}) {
      if (line.rfind(key, 0) == 0) {
        std::istringstream s(line.substr(std::strlen(key) + 1));
        std::string v, unit;
        s >> v >> unit;
        if (v != "0" || std::string(key) == "KernelPageSize") out += std::string(out.empty() ? "" : ", ") + key + " " + v + " " + unit;
      }
    }
  }
  return out.empty() ? "(no smaps entry)" : out;
}

}  // namespace ft::bench
