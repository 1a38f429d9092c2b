#pragma once
// Launch sizing shared by the EXL3 launchers (host only).
namespace ft::cuda::exl3dev {

// Multiprocessors of the current device (queried once per device; grid caps only, never results).
int sm_count();

// Programmatic dependent launch for the skinny linear kernels: requested (exl3_linear.h) and
// supported by the current device (compute capability 9.0+).
bool programmatic_launch();
void set_programmatic_launch(bool on);

}  // namespace ft::cuda::exl3dev
