// Grouped EXL3 MoE kernels for K = 6 (one file per K so the instantiations compile in parallel).
#include "gpu-worker/backends/cuda/exl3/moe_launch.cuh"

namespace ft::cuda::exl3dev {
template void launch_moe<6>(int cb, int grid, const MoeArgs& a, cudaStream_t stream);
template void launch_moe_gemm<6>(int cb, int grid, const MoeArgs& a, bool wide, cudaStream_t stream);
template bool moe_gemm_wide_fits<6>();
}  // namespace ft::cuda::exl3dev
