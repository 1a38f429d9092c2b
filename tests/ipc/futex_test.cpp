// The futex doorbell: timed sleep, immediate return on a changed word, wake of a real sleeper, and
// a wake that crosses processes through two different mappings of one shared-memory object.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "shared/ipc/futex.h"
#include "shared/ipc/shm.h"
#include "tests/ipc/child_process.h"

using namespace ft::ipc;
using clk = std::chrono::steady_clock;
using namespace std::chrono_literals;

TEST(Futex, WaitTimesOut) {
  std::atomic<uint32_t> w{0};
  const auto t0 = clk::now();
  EXPECT_EQ(futex_wait(&w, 0, 30ms), FutexWait::TimedOut);
  EXPECT_GE(clk::now() - t0, 25ms);
}

TEST(Futex, ChangedWordReturnsAtOnce) {
  std::atomic<uint32_t> w{1};
  const auto t0 = clk::now();
  EXPECT_EQ(futex_wait(&w, 0, 5s), FutexWait::Changed);
  EXPECT_LT(clk::now() - t0, 500ms);
}

TEST(Futex, WakeReachesASleepingThread) {
  std::atomic<uint32_t> w{0};
  std::atomic<int> result{-1};
  std::thread t([&] { result = static_cast<int>(futex_wait(&w, 0, 10s)); });
  // A wake that returns 1 found the thread asleep in the kernel.
  int woken = 0;
  const auto t0 = clk::now();
  while (woken == 0 && clk::now() - t0 < 5s) {
    std::this_thread::sleep_for(1ms);
    woken = futex_wake(&w);
  }
  t.join();
  EXPECT_EQ(woken, 1);
  EXPECT_EQ(result.load(), static_cast<int>(FutexWait::Woken));
  EXPECT_LT(clk::now() - t0, 5s);
}

TEST(Futex, WakeCrossesProcessesAndMappings) {
  const std::string name = ft::test::unique_name("futex");
  ShmMapping parent = ShmMapping::create(name, 4096, false);
  auto* word = new (parent.data() + 128) std::atomic<uint32_t>(0);
  const pid_t pid = fork();
  if (pid == 0) {
    // A second mapping of the same object, at another address.
    auto m = ShmMapping::open(name, true);
    auto* w = reinterpret_cast<std::atomic<uint32_t>*>(m->data() + 128);
    _exit(futex_wait(w, 0, 10s) == FutexWait::Woken ? 0 : 1);
  }
  ASSERT_GT(pid, 0);
  // The word stays 0: only a wake through the parent's mapping can end the child's wait early.
  int woken = 0;
  const auto t0 = clk::now();
  while (woken == 0 && clk::now() - t0 < 5s) {
    std::this_thread::sleep_for(1ms);
    woken = futex_wake(word);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  ShmMapping::remove(name);
  EXPECT_EQ(woken, 1);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
