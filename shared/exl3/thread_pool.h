#pragma once
// Fixed pool of std::threads that all work on one job at a time (one expert batch): the caller
// takes part, items are claimed from one atomic ticket that names the job, and a job is done
// when its items are, not when every worker has checked in — so a worker still waking from sleep
// (a futex wake, a deep C-state) never holds a job up; it joins whichever job is running when it
// gets there. Finished workers spin before sleeping (FLASHTIER_POOL_SPIN_US, default 2000), so the
// ~40 jobs per decode step start within a microsecond. Workers are pinned one per physical core
// when the process may run there.
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
  // [0, size()) and a thread's own (per-worker scratch stays exclusive); 0 is the caller. Not
  // reentrant: one job at a time.
  void parallel_for(int n, const std::function<void(int, int)>& fn);

 private:
  void worker_main(int id);
  // Claims and runs items of whatever job the ticket names until it has none left.
  void run_items(int worker);
  void run_job(int n, const std::function<void(int, int)>& fn);

  // ticket_ = job (24 bits) | items (20) | next item (20); a claim is a compare-exchange, so an
  // item is taken once and only while its job is the current one. Each hot atomic on its own
  // cache line: workers hammer the ticket and `done_`, the caller polls `done_`, sleeping workers
  // wait on `generation_`.
  static constexpr int kItemBits = 20;
  static constexpr uint64_t kItemMask = (uint64_t{1} << kItemBits) - 1;
  alignas(64) std::atomic<uint64_t> generation_{0};
  alignas(64) std::atomic<uint64_t> ticket_{0};
  alignas(64) std::atomic<int> done_{0};  // items of the current job finished
  // The job's function, by job parity: rewritten only two jobs later, which cannot start while a
  // claimed item of this one is unfinished.
  alignas(64) const std::function<void(int, int)>* fn_[2] = {nullptr, nullptr};
  uint64_t jobs_ = 0;  // caller side
  std::atomic<bool> stop_{false};
  std::vector<std::thread> workers_;
};

}  // namespace ft::exl3
