#pragma once
// Bandwidth bounds measured in the benchmark's own run: HBM read bandwidth (a read-only kernel
// with 16-byte loads over a buffer many times the L2), median of several passes.
#include <cstddef>

namespace ft::cuda::bench {

// GB/s (1e9 bytes) reading `bytes` bytes of device memory.
double hbm_read_gbs(size_t bytes = size_t{4} << 30);

}  // namespace ft::cuda::bench
