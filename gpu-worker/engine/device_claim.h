#pragma once
// `--device auto`: a GPU taken for the life of this process, so that gpu-worker replicas that
// all see every GPU (compose `--scale gpu-worker=N`: docker cannot hand each replica its own)
// end up one per GPU. Each device has a lock file named by its PCI bus id in a directory all
// replicas share (/dev/shm: the stack's IPC holder, or the host's); a worker takes the first
// device whose file it can flock exclusively. The kernel drops the lock when the process dies,
// so a restarted replica finds its GPU free again.
#include <string>
#include <vector>

namespace ft::worker {

class DeviceClaim {
 public:
  DeviceClaim() = default;
  // ids[i]: a stable name of device i (its PCI bus id). Throws ft::Error when every device is
  // held by another process, or the directory cannot hold lock files.
  static DeviceClaim first_free(const std::vector<std::string>& ids, const std::string& dir);
  ~DeviceClaim();
  DeviceClaim(DeviceClaim&& o) noexcept;
  DeviceClaim& operator=(DeviceClaim&& o) noexcept;
  DeviceClaim(const DeviceClaim&) = delete;
  DeviceClaim& operator=(const DeviceClaim&) = delete;

  int index() const { return index_; }        // −1: none held
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1, index_ = -1;
  std::string path_;
};

}  // namespace ft::worker
