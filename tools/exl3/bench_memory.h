#pragma once
#include <cstddef>

#include "shared/exl3/thread_pool.h"

namespace ft::exl3 {
// Best read bandwidth in bytes/s over passes of `bytes` (spread over the pool in 1 MiB items),
// running for at least `seconds`. Needs AVX2.
double read_bandwidth(ThreadPool& pool, size_t bytes, double seconds);
}  // namespace ft::exl3
