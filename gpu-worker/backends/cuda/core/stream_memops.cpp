#include "gpu-worker/backends/cuda/core/stream_memops.h"

#include <cuda.h>

#include <mutex>
#include <string>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/driver_entry.h"
#include "gpu-worker/backends/cuda/core/programmatic.h"
#include "shared/core/error.h"

namespace ft::cuda {
namespace {

// Both signatures are the CUDA 11.7 (v2) ones.
using MemOpFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

struct MemOps {
  MemOpFn write = nullptr, wait = nullptr;
};

const MemOps& memops() {
  static MemOps ops;
  static std::once_flag once;
  std::call_once(once, [] {
    ops.write = reinterpret_cast<MemOpFn>(driver_entry_point("cuStreamWriteValue32"));
    ops.wait = reinterpret_cast<MemOpFn>(driver_entry_point("cuStreamWaitValue32"));
  });
  return ops;
}

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) throw Error(std::string(what) + " failed (CUresult " + std::to_string(static_cast<int>(r)) + ")");
}

}  // namespace

bool stream_memops_available() { return memops().write && memops().wait; }

void stream_write_u32(cudaStream_t s, uint32_t* addr, uint32_t value) {
  if (!stream_memops_available()) throw Error("this CUDA driver has no stream memory operations");
  check(memops().write(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(addr), value,
                       CU_STREAM_WRITE_VALUE_DEFAULT),
        "cuStreamWriteValue32");
  note_stream_memop(s);
}

void stream_wait_u32(cudaStream_t s, const uint32_t* addr, uint32_t value) {
  if (!stream_memops_available()) throw Error("this CUDA driver has no stream memory operations");
  check(memops().wait(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(addr), value,
                      CU_STREAM_WAIT_VALUE_EQ),
        "cuStreamWaitValue32");
  note_stream_memop(s);
}

}  // namespace ft::cuda
