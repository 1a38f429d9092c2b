#include "shared/ipc/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

namespace ft::ipc {

FutexWait futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  if (timeout.count() < 0) timeout = std::chrono::nanoseconds(0);
  timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  // FUTEX_WAIT without FUTEX_PRIVATE_FLAG: the word lives in memory shared with another process.
  const long r = syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
  if (r == 0) return FutexWait::Woken;
  if (errno == EAGAIN) return FutexWait::Changed;
  if (errno == ETIMEDOUT) return FutexWait::TimedOut;
  return FutexWait::Woken;  // EINTR: the caller re-checks
}

int futex_wake(std::atomic<uint32_t>* word, int n) {
  const long r = syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, n, nullptr, nullptr, 0);
  return r < 0 ? 0 : static_cast<int>(r);
}

}  // namespace ft::ipc
