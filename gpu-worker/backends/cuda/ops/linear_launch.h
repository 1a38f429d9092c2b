#pragma once
// Launch plumbing of the linear kernels: the current device's limits (cached), and a kernel's
// shared-memory opt-in and occupancy (computed once per device and kernel), so launchers size
// persistent grids and pick stage counts without querying the driver on every call.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ft::cuda::lin {

struct DeviceLimits {
  int device = 0;
  int sm_count = 0;
  int smem_optin = 0;  // max dynamic shared memory per block after opt-in (bytes)
  int cc_major = 0, cc_minor = 0;
  int l2_bytes = 0;
};
const DeviceLimits& current_device_limits();

// Opts `func` in to `smem_bytes` of dynamic shared memory on the current device (once) and
// returns how many blocks of `threads` threads fit on one SM (≥ 1; throws when none fit).
int prepare_kernel(const void* func, int threads, size_t smem_bytes);

// Whether a skinny dense call of `rows` rows is launched programmatically (core/programmatic.cuh:
// it streams its first weight stages while the kernel ahead of it — the activations' fp16
// conversion — ends): calls of up to 8 rows on sm_90+, unless FLASHTIER_LINEAR_PDL=off (policy
// 0; 1 and 2 mean on). set_linear_programmatic changes it (tests, A/B).
bool linear_programmatic(int64_t rows);
void set_linear_programmatic(int policy);

// Whether the skinny kernels let the kernel after them launch as soon as their own wait is over
// (griddepcontrol.launch_dependents), so its blocks are resident and waiting when the linear
// ends instead of being launched then: sm_90+ unless FLASHTIER_LINEAR_TRIGGER=off (session 27,
// H100: decode B=1 15.903 → 15.723 ms). set_linear_trigger for tests and A/B (0 off, 1 and 2 on).
bool linear_trigger();
void set_linear_trigger(int policy);

// Whether to_f16_rows keeps a row's values in registers between its max and its conversion (rows
// of up to 8,192 padded columns, float4-aligned): FLASHTIER_F16_ROWS_REGS=on (auto: off until
// measured); set_to_f16_rows_registers for tests and A/B (0 off, 1 auto, 2 on). Same bits.
void set_to_f16_rows_registers(int policy);

// Output blocks per band of the tiled dense kernels' item order (linear_f16_dense.cuh): as many
// blocks of block_n outputs (block_n · in8 halves of weights each) as fill a sixth of the
// device's L2, so they stay there while every row tile passes over them; all n_blocks when
// FLASHTIER_LINEAR_BANDS=off (policy 0; set_linear_bands for tests and A/B).
int64_t dense_band(int64_t n_blocks, int block_n, int64_t in8);
void set_linear_bands(int policy);

}  // namespace ft::cuda::lin
