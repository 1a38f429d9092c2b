// FifoMutex admits waiters in the order they asked: threads that queue one after another while
// the lock is held get it in that order, and a thread that unlocks and locks again at once goes
// behind everyone already waiting.
#include "shared/core/fifo_mutex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

TEST(FifoMutex, WaitersGetTheLockInArrivalOrder) {
  ft::FifoMutex m;
  std::vector<int> order;
  std::mutex order_mu;
  m.lock();
  std::vector<std::thread> ts;
  for (int i = 0; i < 6; ++i) {
    ts.emplace_back([&, i] {
      std::lock_guard<ft::FifoMutex> l(m);
      std::lock_guard<std::mutex> o(order_mu);
      order.push_back(i);
    });
    std::this_thread::sleep_for(20ms);  // thread i is queued before thread i + 1 starts
  }
  m.unlock();
  for (auto& t : ts) t.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

TEST(FifoMutex, ARelockGoesBehindTheWaiters) {
  ft::FifoMutex m;
  std::atomic<int> turns_b{0};
  m.lock();
  std::thread b([&] {
    std::lock_guard<ft::FifoMutex> l(m);
    ++turns_b;
  });
  std::this_thread::sleep_for(50ms);  // B is queued
  // Unlocking and locking again at once: B, already waiting, goes first (a std::mutex would
  // usually hand it straight back to this thread).
  m.unlock();
  m.lock();
  EXPECT_EQ(turns_b.load(), 1);
  m.unlock();
  b.join();
}
