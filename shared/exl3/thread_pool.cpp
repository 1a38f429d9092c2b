#include "shared/exl3/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>

namespace ft::exl3 {

namespace {

// One logical CPU per physical core among those this process may use.
std::vector<int> one_cpu_per_core() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  std::set<std::pair<int, int>> seen;  // (package, core)
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    int core = cpu, pkg = 0;
    std::ifstream(base + "core_id") >> core;
    std::ifstream(base + "physical_package_id") >> pkg;
    if (seen.insert({pkg, core}).second) cpus.push_back(cpu);
  }
  return cpus;
}

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// A worker polls this long for the next job before it sleeps: MoE layers of one decode step
// follow each other within well under a millisecond, and a futex wake-up costs more than that
// gap's worth of polling on an otherwise idle core.
constexpr auto kSpin = std::chrono::microseconds(200);

}  // namespace

int physical_cores() {
  const size_t n = one_cpu_per_core().size();
  if (n > 0) return static_cast<int>(n);
  const unsigned hw = std::thread::hardware_concurrency();
  return hw ? static_cast<int>(hw) : 1;
}

int default_threads(int reserve) { return std::max(1, physical_cores() - reserve); }

ThreadPool::ThreadPool(int threads, bool pin) {
  if (threads < 1) threads = 1;
  std::vector<int> cpus = pin ? one_cpu_per_core() : std::vector<int>{};
  // Pin only when every participant gets a core of its own; the caller keeps the first one free.
  const bool do_pin = pin && static_cast<int>(cpus.size()) >= threads;
  for (int i = 1; i < threads; ++i) {
    const int cpu = do_pin ? cpus[i] : -1;
    workers_.emplace_back([this, i, cpu] {
      if (cpu >= 0) pin_to(cpu);
      worker_main(i);
    });
  }
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_items(int worker) {
  for (;;) {
    const int i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= n_items_) break;
    (*fn_)(i, worker);
  }
  done_.fetch_add(1, std::memory_order_acq_rel);
}

void ThreadPool::worker_main(int id) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    if (g == seen) {
      const auto until = std::chrono::steady_clock::now() + kSpin;
      for (int spin = 1; g == seen; ++spin) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
        g = generation_.load(std::memory_order_acquire);
        if (spin % 64 == 0 && std::chrono::steady_clock::now() > until) break;
      }
    }
    while (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load()) return;
    run_items(id);
  }
}

void ThreadPool::parallel_for(int n, const std::function<void(int, int)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (int i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  fn_ = &fn;
  n_items_ = n;
  next_.store(0, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  run_items(0);
  const int total = size();
  while (done_.load(std::memory_order_acquire) < total) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
}

}  // namespace ft::exl3
