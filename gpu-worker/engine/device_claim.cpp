#include "gpu-worker/engine/device_claim.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <utility>

#include "shared/core/error.h"

namespace ft::worker {

namespace {
// "0000:41:00.0" → "0000-41-00.0": a file name on any filesystem.
std::string file_name(const std::string& id) {
  std::string s = "flashtier-gpu-";
  for (char c : id) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-') ? c : '-';
  return s + ".lock";
}
}  // namespace

DeviceClaim DeviceClaim::first_free(const std::vector<std::string>& ids, const std::string& dir) {
  if (ids.empty()) throw Error("--device auto: no CUDA device is visible to this process");
  std::string held;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string path = dir + "/" + file_name(ids[i]);
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) throw Error("--device auto: cannot open " + path + ": " + std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      // Who holds it, for someone looking at the file.
      const std::string pid = std::to_string(getpid()) + "\n";
      if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, pid.data(), pid.size(), 0);
      DeviceClaim c;
      c.fd_ = fd;
      c.index_ = static_cast<int>(i);
      c.path_ = path;
      return c;
    }
    const int err = errno;
    ::close(fd);
    if (err != EWOULDBLOCK) throw Error("--device auto: cannot lock " + path + ": " + std::strerror(err));
    held += (held.empty() ? "" : ", ") + std::to_string(i);
  }
  throw Error("--device auto: every GPU is taken by another gpu-worker (devices " + held + "; lock files in " + dir +
              ")");
}

DeviceClaim::~DeviceClaim() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the lock
}

DeviceClaim::DeviceClaim(DeviceClaim&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), index_(std::exchange(o.index_, -1)), path_(std::move(o.path_)) {}

DeviceClaim& DeviceClaim::operator=(DeviceClaim&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    index_ = std::exchange(o.index_, -1);
    path_ = std::move(o.path_);
  }
  return *this;
}

}  // namespace ft::worker
