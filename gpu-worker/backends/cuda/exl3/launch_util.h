#pragma once
// Launch sizing shared by the EXL3 launchers (host only).
namespace ft::cuda::exl3dev {

// Multiprocessors of the current device (queried once per device; grid caps only, never results).
int sm_count();

}  // namespace ft::cuda::exl3dev
