// Device twin of shared/ops/topk.cpp for the indexer: per row, the k best of a prefix of scores,
// ties to the lower index, found by an exact radix select so that any number of candidates
// (up to max_context/κ pools) costs a few passes over the row's scores and no sort.
#include "gpu-worker/backends/cuda/ops/topk.h"

#include <cub/block/block_scan.cuh>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/programmatic.cuh"
#include "shared/core/error.h"

namespace ft::cuda {
namespace {

constexpr int kTopkThreads = 512;

// Order-preserving map of a score to 32 bits: larger score, larger key. −0 and +0 are the same
// score (the relu makes both), NaN ranks below −inf.
__device__ __forceinline__ uint32_t order_key(float x) {
  if (x != x) return 0u;
  if (x == 0.0f) x = 0.0f;
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// One block per row. Four 8-bit radix passes find the key of the k-th best score (the
// threshold) and how many of the entries equal to it still fit; a final pass in index order
// takes every entry above the threshold and the lowest-indexed equal ones, writing ids
// ascending. Histogram counts are integers, so their atomic order does not matter.
__global__ void __launch_bounds__(kTopkThreads)
    topk_pool_ids_kernel(const float* scores, int64_t ld, const int32_t* pos, int kpool, int k, int32_t* ids,
                         int32_t* count) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  using Scan = cub::BlockScan<int, kTopkThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ uint32_t hist[256];
  __shared__ uint32_t s_prefix, s_need;

  const int64_t r = blockIdx.x;
  const int64_t nvis = (static_cast<int64_t>(pos[r]) + 1) / kpool;
  int32_t* out = ids + r * k;
  if (k == 0) {
    if (threadIdx.x == 0) count[r] = 0;
    return;
  }
  if (nvis <= k) {
    for (int i = threadIdx.x; i < k; i += kTopkThreads) out[i] = i < nvis ? i : -1;
    if (threadIdx.x == 0) count[r] = static_cast<int32_t>(nvis);
    return;
  }
  const float* sc = scores + r * ld;

  uint32_t prefix = 0, mask = 0, need = static_cast<uint32_t>(k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kTopkThreads) hist[b] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < nvis; i += kTopkThreads) {
      const uint32_t key = order_key(sc[i]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l owns bins [8l, 8l+8); suffix sums over lanes find the lane holding the bin where
      // the running count from the top reaches `need`, then that lane walks its own bins.
      const int lane = threadIdx.x;
      uint32_t local = 0;
      for (int j = 0; j < 8; ++j) local += hist[lane * 8 + j];
      uint32_t suf = local;
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t v = __shfl_down_sync(0xffffffffu, suf, o);
        if (lane + o < 32) suf += v;
      }
      const uint32_t above = suf - local;
      if (above < need && need <= suf) {
        uint32_t acc = above;
        int b = lane * 8 + 7;
        for (; b > lane * 8; --b) {
          if (acc + hist[b] >= need) break;
          acc += hist[b];
        }
        s_prefix = prefix | (static_cast<uint32_t>(b) << shift);
        s_need = need - acc;
      }
    }
    __syncthreads();
    prefix = s_prefix;
    need = s_need;
    mask |= 255u << shift;
  }

  // prefix is now the threshold key; `need` entries equal to it are taken, lowest ids first.
  int base_eq = 0, base_out = 0;
  for (int64_t t0 = 0; t0 < nvis && base_out < k; t0 += kTopkThreads) {
    const int64_t i = t0 + threadIdx.x;
    const bool in = i < nvis;
    const uint32_t key = in ? order_key(sc[i]) : 0u;
    const int eq = in && key == prefix;
    const int gt = in && key > prefix;
    int eq_rank, eq_total;
    Scan(scan_tmp).ExclusiveSum(eq, eq_rank, eq_total);
    __syncthreads();
    const int take = gt || (eq && base_eq + eq_rank < static_cast<int>(need));
    int at, taken;
    Scan(scan_tmp).ExclusiveSum(take, at, taken);
    __syncthreads();
    if (take) out[base_out + at] = static_cast<int32_t>(i);
    base_eq += eq_total;
    base_out += taken;
  }
  if (threadIdx.x == 0) count[r] = k;
}

}  // namespace

void topk_pool_ids(const float* scores, int64_t ld, const int32_t* pos, int64_t rows, int kpool, int64_t k,
                   int32_t* ids, int32_t* count, cudaStream_t stream) {
  if (rows <= 0) return;
  if (kpool < 1 || k < 0 || k > (1 << 30)) throw Error("topk_pool_ids: bad kpool or k");
  if (rows > 0x7fffffffLL) throw Error("topk_pool_ids: too many rows");
  launch_chained(topk_pool_ids_kernel, static_cast<unsigned>(rows), kTopkThreads, 0, stream, scores, ld, pos, kpool,
                 static_cast<int>(k), ids, count);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
