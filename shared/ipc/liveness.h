#pragma once
// Is the process on the other side of a shared mapping still there? Both sides of the ring publish
// their pid and pid namespace; a pid can only be probed from the same namespace, so a peer in
// another container (same /dev/shm, other pid namespace) is judged by its heartbeat instead.
#include <sys/types.h>

#include <cstdint>
#include <string>

namespace ft::ipc {

// CLOCK_MONOTONIC in ns: one clock for every process of a host (containers included).
uint64_t monotonic_ns();

// Inode of /proc/self/ns/pid (0 if unknown): equal values mean pids are comparable.
uint64_t pid_namespace_id();

// False when the process does not exist or is a zombie (dead, not reaped yet).
bool process_alive(pid_t pid);

// The kernel's boot id: equal on two processes iff they run on the same host (and boot).
std::string host_boot_id();

}  // namespace ft::ipc
