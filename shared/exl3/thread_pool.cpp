#include "shared/exl3/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "shared/core/cpu_relax.h"

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

// A worker polls this long for the next job before it sleeps (ft::kTierSpin: a step's layers never
// sleep). FLASHTIER_POOL_SPIN_US sets it (0: sleep at once).
std::chrono::microseconds spin_time() {
  static const std::chrono::microseconds t = [] {
    const char* v = std::getenv("FLASHTIER_POOL_SPIN_US");
    if (!v || !*v) return kTierSpin;
    char* end = nullptr;
    const long us = std::strtol(v, &end, 10);
    return end && *end == 0 && us >= 0 ? std::chrono::microseconds(us) : kTierSpin;
  }();
  return t;
}

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
    uint64_t t = ticket_.load(std::memory_order_acquire);
    for (;;) {
      if ((t & kItemMask) >= ((t >> kItemBits) & kItemMask)) return;
      if (ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)) break;
    }
    const uint64_t job = t >> (2 * kItemBits);
    (*fn_[job & 1])(static_cast<int>(t & kItemMask), worker);
    done_.fetch_add(1, std::memory_order_release);
  }
}

void ThreadPool::worker_main(int id) {
  uint64_t seen = 0;
  const auto spin = spin_time();
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    if (g == seen && spin.count() > 0) {
      const auto until = std::chrono::steady_clock::now() + spin;
      for (int n = 1; g == seen; ++n) {
        cpu_relax();
        g = generation_.load(std::memory_order_acquire);
        if (n % 64 == 0 && std::chrono::steady_clock::now() > until) break;
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

void ThreadPool::run_job(int n, const std::function<void(int, int)>& fn) {
  const uint64_t job = ++jobs_ & ((uint64_t{1} << (64 - 2 * kItemBits)) - 1);
  fn_[job & 1] = &fn;
  done_.store(0, std::memory_order_relaxed);
  // Release: a worker whose claim reads this ticket sees fn_ and the zeroed count.
  ticket_.store(job << (2 * kItemBits) | static_cast<uint64_t>(n) << kItemBits, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  run_items(0);
  while (done_.load(std::memory_order_acquire) < n) cpu_relax();
}

void ThreadPool::parallel_for(int n, const std::function<void(int, int)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (int i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  // Jobs of up to 2^20 − 1 items (the ticket's width); larger ones run as several.
  constexpr int kMaxItems = static_cast<int>(kItemMask);
  if (n <= kMaxItems) return run_job(n, fn);
  for (int first = 0; first < n; first += kMaxItems) {
    const std::function<void(int, int)> part = [&fn, first](int i, int w) { fn(first + i, w); };
    run_job(std::min(kMaxItems, n - first), part);
  }
}

}  // namespace ft::exl3
