#pragma once
// The prefill kernels' wgmma form (gemm_wgmma.cuh, moe_gemm_wgmma.cuh), compiled in their own
// translation units for sm_90a only (host declarations; the launchers of gemm_kernel.cuh and
// moe_launch.cuh call these where wgmma_prefill() says so). Same bits as the mma.sync forms.
#include <cuda_runtime.h>

namespace ft::cuda::exl3dev {

struct LinearArgs;
struct MoeArgs;

// A compute capability 9.0 device, an sm_90a image of the kernels in this build, and policy On
// (an Exl3Wgmma value, exl3_linear.h: Auto is off until a GPU run has checked the form).
bool wgmma_prefill();
void set_wgmma_prefill(int policy);
int wgmma_prefill_policy();
// How many prefill launches took the wgmma form (process-wide: tests check it ran).
unsigned long long wgmma_prefill_launches();
void count_wgmma_launch();  // each launcher, once per launch

void launch_gemm_wgmma(int K, int cb, const LinearArgs& a, cudaStream_t stream);
void launch_moe_gemm_wgmma(int K, int cb, int grid, const MoeArgs& a, cudaStream_t stream);

}  // namespace ft::cuda::exl3dev
