#pragma once
// Host memory for the zero-copy benchmarks, backed the ways the expert segment could be: plain
// heap, anonymous memory with or without transparent huge pages, hugetlbfs pages, or a /dev/shm
// file mapped read-only and shared (what the gpu-worker maps today). Lets a benchmark tell
// whether the GPU's zero-copy read rate depends on the host's page size.
#include <cstddef>
#include <string>

namespace ft::bench {

class HostBacking {
 public:
  // kind: malloc | thp | 4k | hugetlb | shm. `fill(p, bytes)` writes the contents before a shm
  // file is remapped read-only. Throws std::runtime_error when the kind is unavailable here.
  template <class Fill>
  HostBacking(const std::string& kind, size_t bytes, const Fill& fill) : kind_(kind) {
    allocate(bytes);
    fill(data_, bytes_);
    seal();
  }
  ~HostBacking();
  HostBacking(const HostBacking&) = delete;
  HostBacking& operator=(const HostBacking&) = delete;

  unsigned char* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // The kernel's view of the mapping's page sizes (/proc/self/smaps: KernelPageSize and the
  // huge-page counters of the VMA holding data()).
  std::string pages() const;

 private:
  void allocate(size_t bytes);
  void seal();  // shm: remap PROT_READ, MAP_SHARED

  std::string kind_;
  unsigned char* data_ = nullptr;
  size_t bytes_ = 0, mapped_ = 0;
  std::string path_;
  int fd_ = -1;
};

}  // namespace ft::bench
