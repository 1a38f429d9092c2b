#pragma once
// Bandwidth bounds measured in the benchmark's own run: HBM read bandwidth (a read-only kernel
// with 16-byte loads over a buffer many times the L2), zero-copy reads of mapped host memory by
// the same kernel, and host-to-device copies; medians of several passes.
#include <cstddef>

namespace ft::cuda::bench {

// GB/s (1e9 bytes) reading `bytes` bytes of device memory.
double hbm_read_gbs(size_t bytes = size_t{4} << 30);

// GB/s of the same read kernel over `bytes` bytes at `device_ptr`: a device alias of registered
// host memory measures zero-copy reads over PCIe. Passes: median of that many after one warm-up.
double read_gbs(const void* device_ptr, size_t bytes, int passes = 5);

// GB/s of cudaMemcpyAsync from pinned or registered host memory at `host` into a device buffer.
double h2d_copy_gbs(const void* host, size_t bytes, int passes = 5);

}  // namespace ft::cuda::bench
