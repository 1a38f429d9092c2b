#include "tools/bench-cuda/hbm_probe.h"

#include <algorithm>
#include <vector>

#include "gpu-worker/backends/cuda/core/cuda_check.h"

namespace ft::cuda::bench {

namespace {

// Sums 16-byte words with no reuse; the sum is written so the loads cannot be dropped.
__global__ void read_kernel(const uint4* __restrict__ p, size_t n, unsigned* out) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p + i));
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *out = acc;
}

}  // namespace

double hbm_read_gbs(size_t bytes) {
  void* buf = nullptr;
  FT_CUDA_CHECK(cudaMalloc(&buf, bytes));
  FT_CUDA_CHECK(cudaMemset(buf, 1, bytes));
  const double gbs = read_gbs(buf, bytes, 10);
  cudaFree(buf);
  return gbs;
}

double read_gbs(const void* buf, size_t bytes, int passes) {
  unsigned* out = nullptr;
  FT_CUDA_CHECK(cudaMalloc(&out, 4));
  int sms = 0;
  FT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaEvent_t a, b;
  FT_CUDA_CHECK(cudaEventCreate(&a));
  FT_CUDA_CHECK(cudaEventCreate(&b));
  const size_t n = bytes / 16;
  std::vector<float> ms;
  for (int it = 0; it < passes + 2; ++it) {
    FT_CUDA_CHECK(cudaEventRecord(a));
    read_kernel<<<sms * 8, 512>>>(static_cast<const uint4*>(buf), n, out);
    FT_CUDA_CHECK_LAUNCH();
    FT_CUDA_CHECK(cudaEventRecord(b));
    FT_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    FT_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    if (it >= 2) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaFree(out);
  return static_cast<double>(bytes) / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

double h2d_copy_gbs(const void* host, size_t bytes, int passes) {
  void* dst = nullptr;
  FT_CUDA_CHECK(cudaMalloc(&dst, bytes));
  cudaStream_t s;
  FT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  FT_CUDA_CHECK(cudaEventCreate(&a));
  FT_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int it = 0; it < passes + 1; ++it) {
    FT_CUDA_CHECK(cudaEventRecord(a, s));
    FT_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, s));
    FT_CUDA_CHECK(cudaEventRecord(b, s));
    FT_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    FT_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    if (it >= 1) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(s);
  cudaFree(dst);
  return static_cast<double>(bytes) / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

}  // namespace ft::cuda::bench
