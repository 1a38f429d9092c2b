#pragma once
// A mutex that admits its waiters in arrival order (a ticket lock on a condition variable).
// std::mutex promises no order, so a thread that unlocks and locks again at once can keep it
// while others wait: the cpu-expert-worker's clients (ring channels, gRPC streams) share one
// kernel pool and must each wait behind at most one batch of every other client.
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace ft {

class FifoMutex {
 public:
  void lock() {
    std::unique_lock<std::mutex> l(m_);
    const uint64_t ticket = next_++;
    cv_.wait(l, [&] { return serving_ == ticket; });
  }
  void unlock() {
    {
      std::lock_guard<std::mutex> l(m_);
      ++serving_;
    }
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  uint64_t next_ = 0, serving_ = 0;
};

}  // namespace ft
