#pragma once
// Driver API functions without linking the driver library: the runtime's entry-point query
// (cudaGetDriverEntryPointByVersion) for the CUDA 12.0 form of `name`. Null where this driver
// lacks it; a failed query leaves no error behind for the next cudaGetLastError.
namespace ft::cuda {

void* driver_entry_point(const char* name);

}  // namespace ft::cuda
