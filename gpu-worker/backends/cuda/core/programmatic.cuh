#pragma once
// Programmatic dependent launch (sm_90+): a grid launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start before the grid ahead of it in the
// stream has finished — once every block of that grid has called grid_dependents_launch(), or has
// ended. Until grid_dependency_wait() returns (that grid finished, its writes visible) such a grid
// may touch only what the grid ahead neither writes nor reads: weights, its own shared memory.
// Below sm_90 both calls compile to nothing and launchers never set the attribute. nvcc only.
#include <cuda_runtime.h>

#include <utility>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/programmatic.h"

namespace ft::cuda {

__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void grid_dependents_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// A launch configuration that lets the grid start early (the attribute lives in *attr, which
// must outlive the launch call).
inline cudaLaunchConfig_t programmatic_config(dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                              cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  attr->id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr->val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

// The first statement of every kernel launch_chained starts: wait for the kernel ahead (a
// no-op when this grid was launched plainly), then let the next one launch.
__device__ __forceinline__ void chain_start() {
  grid_dependency_wait();
  grid_dependents_launch();
}

// Launches `kernel`, to start early when `early` (it must then wait — grid_dependency_wait or
// chain_start — before touching anything the kernel ahead writes), plainly otherwise.
template <class... KernelArgs, class... Args>
void launch_maybe_early(bool early, void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                        cudaStream_t stream, Args&&... args) {
  if (may_start_early(stream, early)) {
    cudaLaunchAttribute attr{};
    const cudaLaunchConfig_t cfg = programmatic_config(grid, block, smem, stream, &attr);
    FT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
    return;
  }
  kernel<<<grid, block, smem, stream>>>(std::forward<Args>(args)...);
  FT_CUDA_CHECK_LAUNCH();
}

// A per-step kernel (one that begins with chain_start()): started early where
// chain_programmatic() says so, plainly otherwise.
template <class... KernelArgs, class... Args>
void launch_chained(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                    Args&&... args) {
  launch_maybe_early(chain_programmatic(), kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace ft::cuda
