#include "gpu-worker/backends/cuda/core/device.h"

#include <cstdio>

#include "gpu-worker/backends/cuda/core/cuda_check.h"

namespace ft::cuda {

void throw_cuda_error(cudaError_t e, const char* what, const char* file, int line) {
  // Clear a sticky launch error so the next check reports its own failure, not this one.
  (void)cudaGetLastError();
  throw Error(std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") in " + what +
              " at " + file + ":" + std::to_string(line));
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

std::string device_pci_id(int index) {
  char id[32] = {};
  FT_CUDA_CHECK(cudaDeviceGetPCIBusId(id, sizeof id, index));
  return id;
}

DeviceInfo use_device(int index) {
  const int n = device_count();
  if (index < 0 || index >= n)
    throw Error("CUDA device " + std::to_string(index) + " does not exist (this machine has " + std::to_string(n) +
                (n == 1 ? " device)" : " devices)"));
  FT_CUDA_CHECK(cudaSetDevice(index));
  cudaDeviceProp p{};
  FT_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  DeviceInfo d;
  d.index = index;
  d.name = p.name;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  int clk = 0;
  if (cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, index) == cudaSuccess) d.clock_khz = clk;
  (void)cudaGetLastError();
  size_t fr = 0, tot = 0;
  FT_CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
  d.free_bytes = fr;
  d.total_bytes = tot;
  return d;
}

std::string DeviceInfo::summary() const {
  char b[256];
  std::snprintf(b, sizeof b, "cuda:%d %s (sm_%d%d, %d SMs, %.1f GiB, %.1f GiB free)", index, name.c_str(), cc_major,
                cc_minor, sm_count, total_bytes / 1073741824.0, free_bytes / 1073741824.0);
  return b;
}

}  // namespace ft::cuda
