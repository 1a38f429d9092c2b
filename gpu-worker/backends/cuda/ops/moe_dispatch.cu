// moe_dispatch and moe_combine (ops/moe.h): the expert-format-independent halves of a routed
// MoE layer. Dispatch is a stable counting sort in one block (integer counts only, so the
// result does not depend on the order atomics land in); combine sums each token's weighted
// expert rows in ascending k as shared/engine/local_experts.cpp does.
#include <algorithm>
#include <cstdint>
#include <cub/block/block_scan.cuh>
#include <string>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/programmatic.cuh"
#include "gpu-worker/backends/cuda/ops/linear_launch.h"
#include "gpu-worker/backends/cuda/ops/moe.h"
#include "shared/core/error.h"

namespace ft::cuda {
namespace {

constexpr int kDispatchThreads = 1024;
constexpr int kDispatchWarps = kDispatchThreads / 32;

// Shared memory: base[E] (counts, then each expert's next free position) and
// per_warp[32][E] (a chunk's per-warp counts, then each warp's first position per expert).
__global__ void __launch_bounds__(kDispatchThreads)
    moe_dispatch_kernel(const int32_t* expert, int64_t picks, int n_experts, int32_t* offsets, int32_t* sorted_pick,
                        int32_t* active, int32_t* n_active) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  extern __shared__ int32_t dsm[];
  int32_t* base = dsm;
  int32_t* per_warp = dsm + n_experts;
  using Scan = cub::BlockScan<int32_t, kDispatchThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int E = n_experts;

  for (int e = tid; e < E; e += kDispatchThreads) base[e] = 0;
  for (int i = tid; i < kDispatchWarps * E; i += kDispatchThreads) per_warp[i] = 0;
  __syncthreads();
  for (int64_t p = tid; p < picks; p += kDispatchThreads) {
    const int32_t e = expert[p];
    if (e >= 0 && e < E) atomicAdd(&base[e], 1);
  }
  __syncthreads();

  // offsets = exclusive prefix of the counts; active = experts with a pick, ascending.
  int32_t carry = 0, carry_active = 0;
  for (int e0 = 0; e0 < E; e0 += kDispatchThreads) {
    const int e = e0 + tid;
    const int32_t cnt = e < E ? base[e] : 0;
    int32_t pos, apos, sum, asum;
    Scan(scan_tmp).ExclusiveSum(cnt, pos, sum);
    __syncthreads();
    Scan(scan_tmp).ExclusiveSum(cnt > 0 ? 1 : 0, apos, asum);
    __syncthreads();
    if (e < E) {
      offsets[e] = carry + pos;
      base[e] = carry + pos;
      if (cnt > 0) active[carry_active + apos] = e;
    }
    carry += sum;
    carry_active += asum;
  }
  if (tid == 0) {
    offsets[E] = carry;
    *n_active = carry_active;
  }
  __syncthreads();

  // Placement, chunk by chunk in pick order: a pick's position is its expert's next free slot
  // + the picks of that expert in earlier warps of the chunk + those in earlier lanes of its
  // warp, i.e. picks stay ascending inside an expert.
  const uint32_t lanes_below = (1u << lane) - 1u;
  for (int64_t c0 = 0; c0 < picks; c0 += kDispatchThreads) {
    const int64_t p = c0 + tid;
    const int32_t e = p < picks ? expert[p] : -1;
    const bool ok = e >= 0 && e < E;
    const uint32_t peers = __match_any_sync(0xffffffffu, ok ? e : -1);
    const int rank = __popc(peers & lanes_below);
    if (ok && rank == 0) per_warp[warp * E + e] = __popc(peers);
    __syncthreads();
    for (int x = tid; x < E; x += kDispatchThreads) {
      int32_t run = base[x];
      for (int w = 0; w < kDispatchWarps; ++w) {
        const int32_t c = per_warp[w * E + x];
        per_warp[w * E + x] = run;
        run += c;
      }
      base[x] = run;
    }
    __syncthreads();
    if (ok) sorted_pick[per_warp[warp * E + e] + rank] = static_cast<int32_t>(p);
    __syncthreads();
    for (int i = tid; i < kDispatchWarps * E; i += kDispatchThreads) per_warp[i] = 0;
    __syncthreads();
  }
}

template <bool VEC>
__global__ void __launch_bounds__(256) moe_combine_kernel(const float* Y, const float* weight, int64_t n, int top_k,
                                                          int64_t D, float* out, int64_t ld_out, bool accumulate) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  const int64_t d = 4 * (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x);
  if (d >= D) return;
  const int cnt = D - d < 4 ? static_cast<int>(D - d) : 4;
  for (int64_t t = blockIdx.y; t < n; t += gridDim.y) {
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k = 0; k < top_k; ++k) {
      const int64_t p = t * top_k + k;
      const float w = weight[p];
      const float* row = Y + p * D + d;
      float v[4];
      if constexpr (VEC) {
        const float4 q = *reinterpret_cast<const float4*>(row);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) v[i] = i < cnt ? row[i] : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) s[i] = __fadd_rn(s[i], __fmul_rn(w, v[i]));
    }
    float* o = out + t * ld_out + d;
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (i < cnt) o[i] = accumulate ? __fadd_rn(o[i], s[i]) : s[i];
  }
}

// One CTA per placed row; rows may be mapped host memory (the CPU tier's answers). A row whose
// pick is negative is skipped (a graph launches one CTA for every row there could be).
__global__ void __launch_bounds__(256) moe_place_rows_kernel(const float* rows, const int32_t* pick, int64_t D,
                                                             float* Y) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  const int64_t i = blockIdx.x;
  const int32_t p = pick[i];
  if (p < 0) return;
  const float* src = rows + i * D;
  float* dst = Y + static_cast<int64_t>(p) * D;
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) dst[c] = src[c];
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

size_t dispatch_smem(int n_experts) { return static_cast<size_t>(kDispatchWarps + 1) * n_experts * sizeof(int32_t); }

}  // namespace

MoeDispatchSizes moe_dispatch_sizes(int64_t max_n, int top_k, int n_experts) {
  const int64_t picks = max_n * top_k;
  return MoeDispatchSizes{n_experts + 1, picks, std::min<int64_t>(n_experts, picks), 1};
}

void moe_dispatch(const MoeRoutes& r, int n_experts, const MoeDispatch& d, cudaStream_t stream) {
  if (r.n < 0 || r.top_k <= 0 || n_experts <= 0)
    throw Error("moe_dispatch: bad routes (n " + std::to_string(r.n) + ", top_k " + std::to_string(r.top_k) +
                ", experts " + std::to_string(n_experts) + ")");
  const size_t smem = dispatch_smem(n_experts);
  const void* func = reinterpret_cast<const void*>(moe_dispatch_kernel);
  lin::prepare_kernel(func, kDispatchThreads, smem);
  launch_chained(moe_dispatch_kernel, 1, kDispatchThreads, smem, stream, r.expert, r.n * r.top_k, n_experts, d.offsets,
                 d.sorted_pick, d.active, d.n_active);
  FT_CUDA_CHECK_LAUNCH();
}

void moe_combine(const float* Y, const float* weight, int64_t n, int top_k, int64_t D, float* out, int64_t ld_out,
                 LinearStore store, cudaStream_t stream) {
  if (n < 0 || top_k <= 0 || D <= 0 || (n > 1 && ld_out < D))
    throw Error("moe_combine: bad shape (n " + std::to_string(n) + ", top_k " + std::to_string(top_k) + ", D " +
                std::to_string(D) + ", ld_out " + std::to_string(ld_out) + ")");
  if (n == 0) return;
  const dim3 grid(static_cast<unsigned>((D + 4 * 256 - 1) / (4 * 256)),
                  static_cast<unsigned>(std::min<int64_t>(n, 65535)));
  const bool acc = store == LinearStore::Accumulate;
  if (D % 4 == 0 && aligned16(Y))
    launch_chained(moe_combine_kernel<true>, grid, 256, 0, stream, Y, weight, n, top_k, D, out, ld_out, acc);
  else
    launch_chained(moe_combine_kernel<false>, grid, 256, 0, stream, Y, weight, n, top_k, D, out, ld_out, acc);
  FT_CUDA_CHECK_LAUNCH();
}

void moe_place_rows(const float* rows, const int32_t* pick, int64_t n, int64_t D, float* Y, cudaStream_t stream) {
  if (n < 0 || D <= 0) throw Error("moe_place_rows: bad shape (n " + std::to_string(n) + ", D " + std::to_string(D) + ")");
  if (n == 0) return;
  launch_chained(moe_place_rows_kernel, static_cast<unsigned>(n), 256, 0, stream, rows, pick, D, Y);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
