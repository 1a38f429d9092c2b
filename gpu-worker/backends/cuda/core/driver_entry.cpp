#include "gpu-worker/backends/cuda/core/driver_entry.h"

#include <cuda_runtime.h>

namespace ft::cuda {

void* driver_entry_point(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return fn;
}

}  // namespace ft::cuda
