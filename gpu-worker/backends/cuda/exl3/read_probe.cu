// Read-bandwidth and clock probes (read_probe.h).
#include <algorithm>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/exl3/device.cuh"
#include "gpu-worker/backends/cuda/exl3/launch_util.h"
#include "gpu-worker/backends/cuda/exl3/read_probe.h"

namespace ft::cuda {
namespace {

using namespace exl3dev;

constexpr int kProbeWarps = 4;
constexpr int kProbeStages = 4;
constexpr int kChunksPerLane = 4;  // 2 KB per warp per stage, as a K = 4 stage of the kernels

// Each warp streams its own contiguous 2 KB pieces through a private cp.async ring and folds
// one word per stage so nothing is dead. Pieces go out in address order, or (run_shift ≥ 0) in
// runs of 2^run_shift adjacent pieces whose order is scrambled by an odd multiplier modulo the
// (power-of-two) run count: the same bytes, with concurrent warps on far-apart pages.
__device__ __forceinline__ size_t probe_piece(size_t i, int run_shift, size_t run_mask) {
  if (run_shift < 0) return i;
  const size_t run = i >> run_shift, within = i & ((size_t{1} << run_shift) - 1);
  return ((run * 0x9E3779B97F4A7C15ull) & run_mask) << run_shift | within;
}

__global__ void __launch_bounds__(kProbeWarps * 32)
    read_probe_kernel(const uint4* p, size_t n_pieces, int run_shift, size_t run_mask, unsigned* out) {
  __shared__ __align__(16) uint4 ring[kProbeWarps][kProbeStages][32 * kChunksPerLane];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const size_t gw = blockIdx.x * static_cast<size_t>(kProbeWarps) + warp;
  const size_t stride = static_cast<size_t>(gridDim.x) * kProbeWarps;
  unsigned acc = 0;
  auto issue = [&](size_t piece, int slot) {
    if (piece < n_pieces)
      for (int j = 0; j < kChunksPerLane; ++j)
        cp_async16(&ring[warp][slot][j * 32 + lane],
                   p + probe_piece(piece, run_shift, run_mask) * 32 * kChunksPerLane + j * 32 + lane);
    cp_async_commit();
  };
  size_t piece = gw;
  for (int s = 0; s < kProbeStages; ++s) issue(piece + s * stride, s);
  for (int it = 0; piece < n_pieces; ++it, piece += stride) {
    cp_async_wait<kProbeStages - 1>();
    __syncwarp();
    const int slot = it % kProbeStages;
    acc ^= ring[warp][slot][lane].x;
    __syncwarp();
    issue(piece + kProbeStages * stride, slot);
  }
  cp_async_wait<0>();
  if (acc == 0x9E3779B9u) *out = acc;
}

__global__ void spin_kernel(long long cycles, unsigned long long* out) {
  const long long t0 = clock64();
  long long t = t0;
  while (t - t0 < cycles) t = clock64();
  if (threadIdx.x == 0 && blockIdx.x == 0) *out = static_cast<unsigned long long>(t - t0);
}

}  // namespace

double exl3_read_gbs(const void* p, size_t bytes, int reps, int ctas_per_sm) {
  return exl3_read_scattered_gbs(p, bytes, 0, reps, ctas_per_sm);
}

double exl3_read_scattered_gbs(const void* p, size_t bytes, size_t run_bytes, int reps, int ctas_per_sm) {
  const size_t piece = 32 * kChunksPerLane * 16;
  size_t n = bytes / piece;
  int run_shift = -1;
  size_t run_mask = 0;
  if (run_bytes > 0) {
    run_shift = 0;
    while ((piece << (run_shift + 1)) <= run_bytes) ++run_shift;
    size_t runs = 1;
    while ((runs << 1) <= (n >> run_shift)) runs <<= 1;
    run_mask = runs - 1;
    n = runs << run_shift;
  }
  unsigned* out = nullptr;
  FT_CUDA_CHECK(cudaMalloc(&out, 4));
  cudaEvent_t a, b;
  FT_CUDA_CHECK(cudaEventCreate(&a));
  FT_CUDA_CHECK(cudaEventCreate(&b));
  const int grid = std::max(1, ctas_per_sm) * exl3dev::sm_count();
  double best = 0;
  for (int it = 0; it <= reps; ++it) {
    FT_CUDA_CHECK(cudaEventRecord(a));
    read_probe_kernel<<<grid, kProbeWarps * 32>>>(static_cast<const uint4*>(p), n, run_shift, run_mask, out);
    FT_CUDA_CHECK_LAUNCH();
    FT_CUDA_CHECK(cudaEventRecord(b));
    FT_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    FT_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (it > 0) best = std::max(best, static_cast<double>(n * piece) / (ms * 1e6));
  }
  FT_CUDA_CHECK(cudaEventDestroy(a));
  FT_CUDA_CHECK(cudaEventDestroy(b));
  FT_CUDA_CHECK(cudaFree(out));
  return best;
}

double exl3_sm_clock_mhz() {
  unsigned long long* out = nullptr;
  FT_CUDA_CHECK(cudaMalloc(&out, 8));
  cudaEvent_t a, b;
  FT_CUDA_CHECK(cudaEventCreate(&a));
  FT_CUDA_CHECK(cudaEventCreate(&b));
  const long long cycles = 200'000'000;  // ~0.1 s
  spin_kernel<<<exl3dev::sm_count(), 128>>>(cycles / 10, out);  // warm-up: clocks ramp
  FT_CUDA_CHECK_LAUNCH();
  FT_CUDA_CHECK(cudaEventRecord(a));
  spin_kernel<<<exl3dev::sm_count(), 128>>>(cycles, out);
  FT_CUDA_CHECK_LAUNCH();
  FT_CUDA_CHECK(cudaEventRecord(b));
  FT_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  FT_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  FT_CUDA_CHECK(cudaEventDestroy(a));
  FT_CUDA_CHECK(cudaEventDestroy(b));
  FT_CUDA_CHECK(cudaFree(out));
  return static_cast<double>(cycles) / (ms * 1e3);
}

}  // namespace ft::cuda
