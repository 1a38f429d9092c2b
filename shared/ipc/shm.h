#pragma once
// A named POSIX shared-memory object (/dev/shm/<name>) mapped into this process, through
// Boost.Interprocess. The object outlives the process: that is what lets a restarted
// cpu-expert-worker re-attach to 100+ GB of experts instead of reloading them.
// A name that starts with '/' is a file path instead (its last component a name as below), e.g.
// in a hugetlbfs mount: the same sharing and lifetime on 2 MB pages (a 100 GB segment then needs
// 50 thousand page-table entries per process instead of 25 million); its size is rounded up to
// the filesystem's block (the huge page) size.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace boost::interprocess {
class mapped_region;
}

namespace ft::ipc {

class ShmMapping {
 public:
  ShmMapping();
  ~ShmMapping();
  ShmMapping(ShmMapping&&) noexcept;
  ShmMapping& operator=(ShmMapping&&) noexcept;

  // Creates `name` (it must not exist) with `bytes` bytes, mapped read-write. With `reserve` the
  // pages are allocated now (posix_fallocate), so a full /dev/shm is a clear error here instead of
  // a SIGBUS in the middle of a copy.
  static ShmMapping create(const std::string& name, uint64_t bytes, bool reserve);
  // Maps an existing object; nullopt when none has this name. Throws ft::Error on other failures.
  static std::optional<ShmMapping> open(const std::string& name, bool writable);
  static bool remove(const std::string& name);  // true when something was removed
  static bool exists(const std::string& name);
  // Names are one path component: [A-Za-z0-9._-], 1..200 characters, or an absolute path (≤ 200
  // characters, no "..") whose last component is such a name. Throws ft::Error otherwise.
  static void check_name(const std::string& name);
  static bool is_path(const std::string& name) { return !name.empty() && name[0] == '/'; }

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& name() const { return name_; }
  bool valid() const { return data_ != nullptr; }

 public:
  using Region = std::unique_ptr<boost::interprocess::mapped_region>;

 private:
  static ShmMapping adopt(const std::string& name, Region region);

  std::string name_;
  Region region_;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// Maps every page of [p, p + bytes) into this process's page tables for reading (the pages
// themselves are already in memory: a shared-memory object). A fresh mapping of a 100 GB segment
// otherwise takes a minor fault on the first read of each 4 KB page — about a millisecond per
// 9 MB expert, a third of the exact CPU kernel's time — spread over the first hours of serving.
// MADV_POPULATE_READ where the kernel has it (5.14+), else `threads` threads touching each page.
// Returns the seconds it took.
double prefault_read(const uint8_t* p, uint64_t bytes, int threads);

}  // namespace ft::ipc
