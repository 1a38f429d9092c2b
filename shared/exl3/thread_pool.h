#pragma once
// Fixed pool of std::threads that all work on one job at a time (one expert batch): the caller
// takes part, items are handed out through one atomic counter, and finished workers spin briefly
// before sleeping, so the ~40 jobs per decode step start within a microsecond. Workers are pinned
// one per physical core when the process may run there.
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace ft::exl3 {

// Physical cores this process may run on (from its affinity mask and the sysfs topology);
// falls back to std::thread::hardware_concurrency().
int physical_cores();
// physical_cores() − reserve, at least 1.
int default_threads(int reserve = 1);

class ThreadPool {
 public:
  // `threads` participants in total, the caller included (so threads − 1 are spawned).
  explicit ThreadPool(int threads = default_threads(), bool pin = true);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(item, worker) for every item in [0, n) and returns when all are done. `worker` is in
  // [0, size()); 0 is the caller. Not reentrant: one job at a time.
  void parallel_for(int n, const std::function<void(int, int)>& fn);

 private:
  void worker_main(int id);
  void run_items(int worker);

  // Each hot atomic on its own cache line: workers hammer `next_` and `done_`, the caller polls
  // `done_`, and sleeping workers wait on `generation_`.
  alignas(64) std::atomic<uint64_t> generation_{0};
  alignas(64) std::atomic<int> next_{0};
  alignas(64) std::atomic<int> done_{0};
  alignas(64) int n_items_ = 0;
  const std::function<void(int, int)>* fn_ = nullptr;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> workers_;
};

}  // namespace ft::exl3
