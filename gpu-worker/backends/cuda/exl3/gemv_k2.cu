// Skinny EXL3 linear kernels for K = 2 (one file per K so the instantiations compile in parallel).
#include "gpu-worker/backends/cuda/exl3/gemv_launch.cuh"

namespace ft::cuda::exl3dev {
template void launch_gemv<2>(int cb, const GemvLaunch& l, const LinearArgs& a, cudaStream_t stream);
}  // namespace ft::cuda::exl3dev
