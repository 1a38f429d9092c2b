#pragma once
// One spin-wait hint: the body of every busy-wait loop (fewer wasted issue slots, and the sibling
// hyper-thread keeps running), and how long the CPU expert tier's waiters spin before sleeping.
#include <chrono>

namespace ft {

// The CPU expert tier's pool, ring server and ring client poll this long before a futex sleep:
// a decode step's MoE layers are ~0.6–1.2 ms apart (the GPU's attention between them), so no
// layer pays a wake-up; an idle waiter sleeps this long after its last request. Measured (H100
// host, session 14, docs/perf.md): 50–200 µs → 2 ms took C1 @1k from 48.4/52.9 to 41.3/44.3 ms
// and C4 @1k from 114.0/119.6 to 97.4/96.5 ms.
inline constexpr std::chrono::microseconds kTierSpin{2000};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace ft
