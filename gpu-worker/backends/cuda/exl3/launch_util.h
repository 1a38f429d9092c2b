#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

// Launch sizing shared by the EXL3 launchers (host only).
namespace ft::cuda::exl3dev {

// f(std::integral_constant<int, K>{}) for a run-time K in 1…8 (8 for anything above 7; the
// callers have checked K): how a launcher reaches the kernels instantiated per K.
template <class F>
decltype(auto) dispatch_k(int K, F&& f) {
  switch (K) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 7: return f(std::integral_constant<int, 7>{});
    default: return f(std::integral_constant<int, 8>{});
  }
}

// f(std::integral_constant<int, CB>{}) for a run-time codebook 0 (3INST), 1 (MCG) or anything
// else (MUL1): how a launcher reaches the kernels instantiated per codebook.
template <class F>
decltype(auto) dispatch_cb(int cb, F&& f) {
  switch (cb) {
    case 0: return f(std::integral_constant<int, 0>{});
    case 1: return f(std::integral_constant<int, 1>{});
    default: return f(std::integral_constant<int, 2>{});
  }
}

// Multiprocessors of the current device (queried once per device; grid caps only, never results).
int sm_count();

// Programmatic dependent launch for a skinny linear call of `rows` rows: the policy
// (exl3_linear.h) says so and the current device supports it (compute capability 9.0+).
bool programmatic_launch(int64_t rows);
void set_programmatic_launch(int policy);  // an Exl3Programmatic value
int programmatic_launch_policy();

// Whether one CTA on the current device can have `smem_bytes` of shared memory (static +
// dynamic, after opting in).
bool smem_fits(size_t smem_bytes);
// The policy for the wide shape of the prefill kernels (exl3_linear.h), and a count of the
// launches that used it (host side, process-wide: tests check that the shape they ask for ran).
void set_wide_prefill(int policy);  // an Exl3Wide value
int wide_prefill_policy();
// Whether a prefill launch asks for the wide shape: On always; Auto where `pays` (the caller's
// measured rule) and the narrow block does not run on wgmma (sm_90, faster than both).
bool wide_requested(bool pays);
void count_wide_launch();
uint64_t wide_launches();

}  // namespace ft::cuda::exl3dev
