#pragma once
// Stream memory operations (the driver's cuStreamWriteValue32 / cuStreamWaitValue32): a stream
// writes a flag, or waits until a flag holds a value, in memory the host sees — without a host
// thread waiting on the stream. Both are captured into CUDA graphs (batch memory-op nodes), which
// is what lets a decode graph hand work to a host thread and wait for its answer mid-step.
//
// The runtime is linked, not the driver library: the two entry points are looked up once through
// cudaGetDriverEntryPointByVersion. Addresses are device addresses (the device alias of mapped
// pinned host memory, or device memory).
#include <cuda_runtime.h>

#include <cstdint>

namespace ft::cuda {

// Whether this driver exposes both operations (CUDA 11.7+ drivers always do).
bool stream_memops_available();
// *addr ← value once the work before it on `s` is done; preceded by a memory fence, which the
// driver documents for the writes of kernels before it. Copies (DMA) into host memory are not
// documented to be ordered before the flag: data a host thread reads on seeing it is written by
// a kernel (engine/host_publish.h).
void stream_write_u32(cudaStream_t s, uint32_t* addr, uint32_t value);
// Work after it on `s` starts once *addr == value.
void stream_wait_u32(cudaStream_t s, const uint32_t* addr, uint32_t value);

}  // namespace ft::cuda
