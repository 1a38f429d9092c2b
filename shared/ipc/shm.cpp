#include "shared/ipc/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/vfs.h>

#include <boost/interprocess/file_mapping.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "shared/core/error.h"

namespace bip = boost::interprocess;

namespace ft::ipc {

ShmMapping::ShmMapping() = default;
ShmMapping::~ShmMapping() = default;
ShmMapping::ShmMapping(ShmMapping&&) noexcept = default;
ShmMapping& ShmMapping::operator=(ShmMapping&&) noexcept = default;

namespace {

bool good_component(const std::string& s) {
  bool ok = !s.empty() && s.size() <= 200 && s != "." && s != "..";
  for (char c : s)
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                c == '-');
  return ok;
}

// The file behind a path name, mapped MAP_SHARED (boost's mapped_region maps the whole file).
ShmMapping::Region map_file(const std::string& path, bool writable) {
  bip::file_mapping f(path.c_str(), writable ? bip::read_write : bip::read_only);
  return std::make_unique<bip::mapped_region>(f, writable ? bip::read_write : bip::read_only);
}

}  // namespace

void ShmMapping::check_name(const std::string& name) {
  bool ok = good_component(name);
  if (is_path(name)) {
    ok = name.size() <= 200 && name.find("/../") == std::string::npos && name.find("//") == std::string::npos &&
         good_component(name.substr(name.rfind('/') + 1));
  }
  if (!ok)
    throw Error("bad shared-memory name '" + name +
                "': use 1-200 characters among A-Z a-z 0-9 . _ -, or an absolute file path ending in such a name");
}

namespace {

// A path name: a file created O_EXCL, its size rounded up to the filesystem's block (the huge
// page on hugetlbfs), optionally reserved.
ShmMapping::Region create_file(const std::string& name, uint64_t bytes, bool reserve) {
  const int fd = ::open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0660);
  if (fd < 0) throw Error("cannot create " + name + ": " + std::strerror(errno));
  struct statfs fs {};
  const uint64_t block = fstatfs(fd, &fs) == 0 && fs.f_bsize > 0 ? static_cast<uint64_t>(fs.f_bsize) : 4096;
  const uint64_t size = (std::max<uint64_t>(bytes, 1) + block - 1) / block * block;
  int rc = ftruncate(fd, static_cast<off_t>(size)) == 0 ? 0 : errno;
  if (rc == 0 && reserve) rc = posix_fallocate(fd, 0, static_cast<off_t>(size));
  ::close(fd);
  if (rc != 0) {
    ::unlink(name.c_str());
    throw Error("cannot reserve " + std::to_string(size) + " bytes for " + name + ": " + std::strerror(rc) +
                " (a hugetlbfs mount needs that many huge pages free: see /proc/meminfo HugePages_Free)");
  }
  try {
    return map_file(name, true);
  } catch (const bip::interprocess_exception& e) {
    ::unlink(name.c_str());
    throw Error("cannot map " + name + ": " + e.what());
  }
}

ShmMapping::Region create_object(const std::string& name, uint64_t bytes, bool reserve) {
  try {
    bip::shared_memory_object obj(bip::create_only, name.c_str(), bip::read_write, bip::permissions(0660));
    obj.truncate(static_cast<bip::offset_t>(bytes));
    if (reserve && bytes > 0) {
      const int fd = obj.get_mapping_handle().handle;
      const int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
      if (rc != 0) {
        bip::shared_memory_object::remove(name.c_str());
        throw Error("cannot reserve " + std::to_string(bytes) + " bytes for shared memory '" + name +
                    "' in /dev/shm: " + std::strerror(rc) + " (is /dev/shm large enough? see df -h /dev/shm)");
      }
    }
    return std::make_unique<bip::mapped_region>(obj, bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    throw Error("cannot create shared memory '" + name + "' (" + std::to_string(bytes) + " bytes): " + e.what());
  }
}

// nullopt: nothing by that name, or it is being created (no size yet).
std::optional<ShmMapping::Region> open_file(const std::string& name, bool writable) {
  struct stat st {};
  if (::stat(name.c_str(), &st) != 0 || st.st_size <= 0) return std::nullopt;
  try {
    return map_file(name, writable);
  } catch (const bip::interprocess_exception& e) {
    if (e.get_error_code() == bip::not_found_error) return std::nullopt;
    throw Error("cannot open " + name + ": " + e.what());
  }
}

std::optional<ShmMapping::Region> open_object(const std::string& name, bool writable) {
  try {
    const bip::mode_t mode = writable ? bip::read_write : bip::read_only;
    bip::shared_memory_object obj(bip::open_only, name.c_str(), mode);
    bip::offset_t size = 0;
    if (!obj.get_size(size) || size <= 0) return std::nullopt;
    return std::make_unique<bip::mapped_region>(obj, mode);
  } catch (const bip::interprocess_exception& e) {
    if (e.get_error_code() == bip::not_found_error) return std::nullopt;
    throw Error("cannot open shared memory '" + name + "': " + e.what());
  }
}

}  // namespace

ShmMapping ShmMapping::adopt(const std::string& name, Region region) {
  ShmMapping m;
  m.name_ = name;
  m.region_ = std::move(region);
  m.data_ = static_cast<uint8_t*>(m.region_->get_address());
  m.size_ = m.region_->get_size();
  return m;
}

ShmMapping ShmMapping::create(const std::string& name, uint64_t bytes, bool reserve) {
  check_name(name);
  return adopt(name, is_path(name) ? create_file(name, bytes, reserve) : create_object(name, bytes, reserve));
}

std::optional<ShmMapping> ShmMapping::open(const std::string& name, bool writable) {
  check_name(name);
  std::optional<Region> r = is_path(name) ? open_file(name, writable) : open_object(name, writable);
  if (!r) return std::nullopt;
  return adopt(name, std::move(*r));
}

bool ShmMapping::remove(const std::string& name) {
  check_name(name);
  if (is_path(name)) return ::unlink(name.c_str()) == 0;
  return bip::shared_memory_object::remove(name.c_str());
}

bool ShmMapping::exists(const std::string& name) {
  check_name(name);
  struct stat st;
  return stat((is_path(name) ? name : "/dev/shm/" + name).c_str(), &st) == 0;
}

double prefault_read(const uint8_t* p, uint64_t bytes, int threads) {
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  if (!p || bytes == 0) return 0;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) / page * page;
  const uint64_t len = (reinterpret_cast<uintptr_t>(p) + bytes - a + page - 1) / page * page;
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
  if (madvise(reinterpret_cast<void*>(a), len, MADV_POPULATE_READ) == 0) return seconds();
  // Older kernels: read one byte of every page, the range split across threads.
  const int T = std::max(1, threads);
  const uint64_t pages = len / page, per = (pages + T - 1) / T;
  std::vector<std::thread> th;
  for (int t = 0; t < T; ++t)
    th.emplace_back([=] {
      uint8_t sink = 0;
      for (uint64_t i = t * per; i < std::min(pages, (t + 1) * per); ++i)
        sink ^= *reinterpret_cast<const volatile uint8_t*>(a + i * page);
      asm volatile("" : : "r"(sink));
    });
  for (std::thread& x : th) x.join();
  return seconds();
}

}  // namespace ft::ipc
