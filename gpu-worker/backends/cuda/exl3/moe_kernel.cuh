#pragma once
// The grouped EXL3 matmul of one MoE layer (internal header, instantiated per K in moe_k*.cu).
// Work items are (active expert, 32-row batch of its picks, projection, 128-column block[, chunk]);
// a CTA of 4 warps runs an item over the whole input (WarpPair folds the chunks left to right, as
// the linear kernels do) and applies the output transform from shared memory — or, for small
// batches, over one chunk, the block's last CTA adding the chunk sums in order (the linear's
// split-K; same bits). CTAs loop over the items, whose number comes from the dispatch in device
// memory; the grid is fixed.
#include "gpu-worker/backends/cuda/exl3/gemv.cuh"
#include "gpu-worker/backends/cuda/exl3/moe.h"

namespace ft::cuda::exl3dev {

constexpr int kMoeMaxExperts = 1024;
constexpr int kMoeRows = 32;  // rows per batch: 4 groups of 8

struct MoeArgs {
  const Exl3ExpertPtrs* table = nullptr;
  const int32_t* offsets = nullptr;      // [E + 1]
  const int32_t* active = nullptr;       // active experts, ascending
  const int32_t* n_active = nullptr;     // [1]
  const int32_t* sorted_pick = nullptr;  // [P]
  int nproj = 1;
  int proj[2] = {0, 1};          // ExpertProj of each projection of this launch
  const __half* xh[2] = {};      // per projection of this launch: [P][in_p] permuted fp16
  const float* row_scale[2] = {};
  float* out[2] = {};            // gate/up: [P][out_p] by sorted position; down: Y [n·top_k][D] by pick
  int by_pick = 0;               // 1: row of sorted position s goes to out + sorted_pick[s]·ld_out
  int64_t ld_out = 0;
  int64_t in_p = 0, out_p = 0, out_cols = 0;  // out_cols: columns stored (logical width)
  int kc_steps = 0;
  // Split K (small batches, where the items alone cannot fill the GPU): every chunk is an item,
  // chunk sums go to partials [nproj][chunks][P][out_p], the CTA completing a (batch, projection,
  // block) adds them left to right (counters [P·nproj·nblk], zero between launches).
  // Only experts with min_rows … max_rows picks in this step are items of this launch (the
  // prefill form takes the crowded ones, this kernel the rest).
  int min_rows = 1, max_rows = 0x7fffffff;
  int chunks = 1;  // > 1: split
  int64_t P = 0;
  float* partials = nullptr;
  int* counters = nullptr;
};

// Row batches of `rows_per_batch` per active expert whose pick count lies in [p.min_rows,
// p.max_rows] (0 for the others), as an exclusive scan: s_pre[i] = batches before active expert i,
// s_pre[kMoeMaxExperts] = all. Every CTA computes it (≤ 1024 values); THREADS = the CTA's size.
template <int THREADS>
__device__ __forceinline__ void moe_batch_scan(const MoeArgs& p, int rows_per_batch, int* s_pre) {
  __shared__ int s_warp[THREADS / 32];
  constexpr int PER = kMoeMaxExperts / THREADS;
  static_assert(PER * THREADS == kMoeMaxExperts, "the scan covers every expert");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n = *p.n_active, base = threadIdx.x * PER;
  int v[PER], sum = 0;
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    const int i = base + j;
    int b = 0;
    if (i < n) {
      const int e = p.active[i];
      const int rows = p.offsets[e + 1] - p.offsets[e];
      if (rows >= p.min_rows && rows <= p.max_rows) b = (rows + rows_per_batch - 1) / rows_per_batch;
    }
    v[j] = b;
    sum += b;
  }
  int x = sum;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) s_warp[warp] = x;
  __syncthreads();
  int excl = x - sum;
  for (int w = 0; w < warp; ++w) excl += s_warp[w];
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    s_pre[base + j] = excl;
    excl += v[j];
  }
  if (threadIdx.x == THREADS - 1) s_pre[kMoeMaxExperts] = excl;
  __syncthreads();
}

// The active expert (index into p.active) whose batches hold `batch` < s_pre[kMoeMaxExperts]:
// the last i with s_pre[i] ≤ batch (experts without batches share their successor's s_pre).
__device__ __forceinline__ int moe_batch_owner(const int* s_pre, int n_act, int batch) {
  int lo = 0, hi = n_act - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (s_pre[mid] <= batch) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

template <int K>
constexpr size_t moe_smem_bytes() {
  const size_t ring = size_t{kWarps} * ring_stages<K>() * stage_dwords<K>() * 4;
  const size_t tile = size_t{kMoeRows} * 128 * 4;
  return (ring > tile ? ring : tile) + kSmemAlignSlack;
}

template <int K, int CB>
__global__ void __launch_bounds__(kWarps * 32) exl3_moe_kernel(const MoeArgs p) {
  constexpr int NG = kMoeRows / 8;
  extern __shared__ __align__(16) uint32_t smem_raw[];
  uint32_t* const smem = smem_align128(smem_raw);
  __shared__ int s_pre[kMoeMaxExperts + 1];  // row batches before active expert i (exclusive scan)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  using WP = WarpPair<K, CB, NG>;
  uint32_t* ring = smem + warp * WP::S * WP::kStage;
  float* tile = reinterpret_cast<float*>(smem);
  moe_batch_scan<kWarps * 32>(p, kMoeRows, s_pre);
  const int n_act = *p.n_active;
  LaneGeom<K> geo;
  geo.init(lane);
  const int nblk = static_cast<int>(p.out_p / 128);
  const bool split = p.chunks > 1;
  const int per_batch = p.nproj * nblk * p.chunks;
  const int n_items = s_pre[n_act] * per_batch;
  const int64_t pair_dwords = p.in_p / 16 * LaneBits<K>::kStepDwords;
  const int n_steps = split ? p.kc_steps : static_cast<int>(p.in_p / 16);
  __shared__ int s_last;
  for (int item = blockIdx.x; item < n_items; item += gridDim.x) {
    const int batch = item / per_batch;
    int rest = item - batch * per_batch;
    const int c = rest % p.chunks;
    rest /= p.chunks;
    const int pj = rest / nblk, blk = rest - pj * nblk;
    const int lo = moe_batch_owner(s_pre, n_act, batch);
    const int e = p.active[lo];
    const int s0 = p.offsets[e] + kMoeRows * (batch - s_pre[lo]);
    const int nr = min(kMoeRows, p.offsets[e + 1] - s0);
    const int ng = (nr + 7) / 8;
    const int proj = p.proj[pj];
    const Exl3ExpertPtrs& ex = p.table[e];
    const int step0 = c * p.kc_steps;  // 0 unless split

    const __half* xrow[NG];
#pragma unroll
    for (int g = 0; g < NG; ++g)
      xrow[g] = p.xh[pj] + static_cast<int64_t>(s0 + min(8 * g + (lane >> 2), nr - 1)) * p.in_p + step0 * 16 +
                8 * (lane & 3);
    const uint32_t* src = ex.trellis[proj] + (4 * blk + warp) * pair_dwords +
                          static_cast<int64_t>(step0) * LaneBits<K>::kStepDwords;
    float tot[2][NG][4];
    WP::run(src, n_steps, p.kc_steps, xrow, ng, ring, geo, lane, tot);

    const int64_t col0 = 128 * static_cast<int64_t>(blk);
    const int valid = static_cast<int>(p.out_cols - col0 < 128 ? p.out_cols - col0 : 128);
    if (split) {
      // This chunk's sums to the workspace; the CTA completing the block adds them in order.
      float* part = p.partials + ((static_cast<int64_t>(pj) * p.chunks + c) * p.P + s0) * p.out_p + col0;
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int g = 0; g < NG; ++g)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int r = acc_row(g, lane, i);
            if (r < nr) part[static_cast<int64_t>(r) * p.out_p + acc_col(warp, h, lane, i)] = tot[h][g][i];
          }
      __threadfence();
      __syncthreads();
      int* counter = p.counters + (static_cast<int64_t>(batch) * p.nproj + pj) * nblk + blk;
      if (threadIdx.x == 0) s_last = atomicAdd(counter, 1) == p.chunks - 1;
      __syncthreads();
      if (s_last) {
        __threadfence();
        const int64_t cstride = p.P * p.out_p;
        for (int r = warp; r < nr; r += kWarps) {
          const int s = s0 + r;
          const float* z = p.partials + (static_cast<int64_t>(pj) * p.chunks * p.P + s) * p.out_p + col0 + 4 * lane;
          float v[4];
          fold_chunks(z, cstride, p.chunks, v);  // the linear's fold: same order, loads batched
          const int64_t orow = p.by_pick ? p.sorted_pick[s] : s;
          finish_row(v, lane, ex.svh[proj] + col0, nullptr, p.row_scale[pj][s], p.out[pj] + orow * p.ld_out + col0,
                     valid, false);
        }
        if (threadIdx.x == 0) *counter = 0;
      }
      __syncthreads();
      continue;
    }

    __syncthreads();
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int g = 0; g < NG; ++g)
#pragma unroll
        for (int i = 0; i < 4; ++i) tile[acc_row(g, lane, i) * 128 + acc_col(warp, h, lane, i)] = tot[h][g][i];
    __syncthreads();
    for (int r = warp; r < nr; r += kWarps) {
      const int s = s0 + r;
      const float4 z = *reinterpret_cast<const float4*>(tile + r * 128 + 4 * lane);
      float v[4] = {z.x, z.y, z.z, z.w};
      const int64_t orow = p.by_pick ? p.sorted_pick[s] : s;
      finish_row(v, lane, ex.svh[proj] + col0, nullptr, p.row_scale[pj][s], p.out[pj] + orow * p.ld_out + col0,
                 valid, false);
    }
    __syncthreads();
  }
}

template <int K>
void launch_moe(int cb, int grid, const MoeArgs& a, cudaStream_t stream);

}  // namespace ft::cuda::exl3dev
