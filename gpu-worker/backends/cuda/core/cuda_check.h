#pragma once
// Every CUDA runtime call is checked: a failure becomes ft::Error naming the call, the file and
// line, and CUDA's own message, so the caller (a request, a load) fails cleanly instead of the
// process continuing on a poisoned context.
#include <cuda_runtime.h>

#include "shared/core/error.h"

namespace ft::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t e, const char* what, const char* file, int line);

}  // namespace ft::cuda

#define FT_CUDA_CHECK(expr)                                                        \
  do {                                                                             \
    const cudaError_t ft_cuda_err_ = (expr);                                       \
    if (ft_cuda_err_ != cudaSuccess)                                               \
      ::ft::cuda::throw_cuda_error(ft_cuda_err_, #expr, __FILE__, __LINE__);       \
  } while (0)

// After a kernel launch: a bad configuration (too many threads, too much shared memory) shows up
// here; faults inside the kernel show up at the next synchronisation.
#define FT_CUDA_CHECK_LAUNCH() FT_CUDA_CHECK(cudaGetLastError())
