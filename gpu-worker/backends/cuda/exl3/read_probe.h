#pragma once
// What the EXL3 kernels' memory path can do on this GPU, measured with their own load pattern
// (16-byte cp.async, 512 contiguous bytes per warp instruction): the bound the benchmark and the
// engine's zero-copy cost model compare against — VRAM (HBM) or mapped host memory (PCIe).
// Host functions; each synchronises (start-up calibration, not per step).
#include <cstddef>

namespace ft::cuda {

// GB/s (1e9 bytes) reading `bytes` bytes at device-visible address `p` (device memory or the
// device alias of mapped host memory), best of `reps` passes after one warm-up, with
// `ctas_per_sm` CTAs of 4 warps per SM (each warp keeps 8 KB in flight).
double exl3_read_gbs(const void* p, size_t bytes, int reps = 5, int ctas_per_sm = 8);

// The same bytes read in runs of `run_bytes` (rounded down to a power of two ≥ 2 KB; 0: in address
// order) whose order is scrambled: how much the read rate depends on concurrent warps reading
// nearby pages (GPU and IOMMU translation reach). Reads a power-of-two number of runs ≤ bytes.
double exl3_read_scattered_gbs(const void* p, size_t bytes, size_t run_bytes, int reps = 5, int ctas_per_sm = 8);

// SM clock in MHz while a busy kernel runs (clock64 cycles over event time).
double exl3_sm_clock_mhz();

}  // namespace ft::cuda
