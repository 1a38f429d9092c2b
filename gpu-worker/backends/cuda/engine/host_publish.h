#pragma once
// Small device arrays copied into mapped pinned host memory by a kernel whose every thread ends
// with a system-scope fence, for a host thread that learns of them from a stream memory operation
// enqueued next. cuStreamWriteValue32's own fence is documented for the writes of kernels before
// it; a DMA copy (cudaMemcpyAsync) before the flag has no such promise.
#include <cuda_runtime.h>

#include <cstdint>

namespace ft::cuda {

// ints_host[0, n_ints) = ints, floats_host[0, n_floats) = floats (device aliases of mapped pinned
// memory; floats 16-byte aligned on both sides).
void publish_to_host(const int32_t* ints, int64_t n_ints, int32_t* ints_host, const float* floats, int64_t n_floats,
                     float* floats_host, cudaStream_t stream);

}  // namespace ft::cuda
