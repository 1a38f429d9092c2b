#pragma once
#include <cstddef>
#include <cstdint>

// Launch sizing shared by the EXL3 launchers (host only).
namespace ft::cuda::exl3dev {

// Multiprocessors of the current device (queried once per device; grid caps only, never results).
int sm_count();

// Programmatic dependent launch for a skinny linear call of `rows` rows: the policy
// (exl3_linear.h) says so and the current device supports it (compute capability 9.0+).
bool programmatic_launch(int64_t rows);
void set_programmatic_launch(int policy);  // an Exl3Programmatic value
int programmatic_launch_policy();

// The wide shape of the prefill kernels (gemm_kernel.cuh) for a launch needing `smem_bytes` of
// dynamic shared memory: the policy (exl3_linear.h) says so and the device has that much.
bool wide_prefill(size_t smem_bytes);
void set_wide_prefill(bool on);
bool wide_prefill_policy();

}  // namespace ft::cuda::exl3dev
