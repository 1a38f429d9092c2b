#pragma once
// Futex wait/wake on a 32-bit word inside a MAP_SHARED mapping, across processes.
//
// Why a raw futex and not a library primitive:
//  * std::atomic<T>::wait/notify in libstdc++ issue FUTEX_PRIVATE_FLAG futexes: those are keyed on
//    the virtual address, so a waiter and a waker in two processes (which map the ring at
//    different addresses) never meet. A shared futex is keyed on the page itself.
//  * Boost.Interprocess condition variables need a process-shared mutex around them; a peer that
//    dies holding it leaves the other side blocked forever. The ring's state words are plain
//    atomics with one writer per transition, so a dead peer can leave nothing locked.
//  * FUTEX_WAIT takes a timeout, so a waiter wakes every few milliseconds to check that its peer
//    is still alive (pid, heartbeat) instead of hanging on a dead one.
//  * The waker only makes the syscall when the other side announced that it sleeps, so the fast
//    (spinning) path never enters the kernel.
#include <atomic>
#include <chrono>
#include <cstdint>

namespace ft::ipc {

static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free,
              "futex words must be plain 32-bit atomics");

enum class FutexWait { Woken, Changed, TimedOut };

// Sleeps while *word == expected, at most `timeout`. Woken also covers signals and spurious wakes:
// callers re-check their condition.
FutexWait futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout);

// Wakes up to `n` waiters; returns how many were woken.
int futex_wake(std::atomic<uint32_t>* word, int n = 1 << 30);

}  // namespace ft::ipc
