#pragma once
// One spin-wait hint: the body of every busy-wait loop (fewer wasted issue slots, and the sibling
// hyper-thread keeps running).

namespace ft {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace ft
