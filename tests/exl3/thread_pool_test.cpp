// The expert pool: every item runs exactly once per job, jobs follow each other, workers sleep
// and wake.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "shared/exl3/thread_pool.h"

namespace ft::exl3 {
namespace {

TEST(Exl3ThreadPool, EveryItemOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads, false);
    EXPECT_EQ(pool.size(), threads);
    for (int job = 0; job < 200; ++job) {
      const int n = 1 + job % 37;
      std::vector<std::atomic<int>> hits(n);
      std::atomic<int> bad_worker{0};
      pool.parallel_for(n, [&](int i, int w) {
        hits[i].fetch_add(1);
        if (w < 0 || w >= threads) bad_worker.fetch_add(1);
      });
      for (int i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "threads " << threads << " job " << job;
      ASSERT_EQ(bad_worker.load(), 0);
    }
  }
}

// Workers that wake late or run long items straddle jobs: each item still runs once, under its
// own job's function, and no job returns before its items are done.
TEST(Exl3ThreadPool, LateWorkersJoinTheRunningJobOnly) {
  ThreadPool pool(4, false);
  for (int job = 0; job < 300; ++job) {
    const int n = 1 + (job * 7) % 23;
    std::vector<std::atomic<int>> hits(n);
    std::atomic<int> finished{0};
    pool.parallel_for(n, [&, job](int i, int) {
      if ((i + job) % 5 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50 + 20 * (job % 3)));
      hits[i].fetch_add(1);
      finished.fetch_add(1);
    });
    ASSERT_EQ(finished.load(), n) << "job " << job << " returned before its items were done";
    for (int i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "job " << job << " item " << i;
    if (job % 50 == 49) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the spin
  }
}

TEST(Exl3ThreadPool, WakesAfterSleeping) {
  ThreadPool pool(3, false);
  std::atomic<int> sum{0};
  pool.parallel_for(10, [&](int i, int) { sum += i; });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the spin: workers sleep
  pool.parallel_for(10, [&](int i, int) { sum += i; });
  EXPECT_EQ(sum.load(), 90);
  EXPECT_GE(physical_cores(), 1);
  EXPECT_GE(default_threads(), 1);
}

}  // namespace
}  // namespace ft::exl3
