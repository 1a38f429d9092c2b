// GPU twin of shared/ops/mla.cpp (mla_attend): attention in the latent space over each row's
// selection. A row's selection is cut into splits of kMlaSplitTokens; one block computes a
// split's softmax partial (running max m, sum l, unnormalised Σ p·c) for a group of heads, and
// a second kernel merges a row's partials in ascending split order. This file holds the SIMT
// path (fp32 FMAs, the exact one), the merge and the launcher; mla_mma.cu the tensor-core path.
#include <cuda_fp16.h>

#include <cmath>
#include <string>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/programmatic.cuh"
#include "gpu-worker/backends/cuda/ops/mla.h"
#include "shared/core/error.h"

namespace ft::cuda {
namespace detail {
// mla_mma.cu: the tensor-core partials, same workspace layout as the SIMT ones.
void mla_attend_mma_partials(const MlaAttendShape& s, const __half* latent, const SparseTables& t,
                             const SparseRows& rows, const int32_t* sel_pools, const int32_t* sel_count,
                             const float* q_abs, float* part_acc, float* part_ml, cudaStream_t stream);
}  // namespace detail

namespace {

constexpr int kSimtHeads = 8;  // one warp per head
constexpr int kSimtThreads = 32 * kSimtHeads;
constexpr int kSimtTile = 32;       // tokens per shared-memory tile: one per lane when scoring
constexpr int kSimtMaxChunks = 16;  // Rkv / 32 value channels per lane, Rkv ≤ 512

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Butterfly: every lane ends with the same bits (each step adds the same pair in either order).
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Cache rows in shared memory are padded by 16 bytes (conflict-free rows).
template <class T>
__host__ __device__ constexpr int64_t simt_ldc(int64_t Rkv) {
  return Rkv + 16 / static_cast<int64_t>(sizeof(T));
}
template <class T>
__host__ __device__ inline int64_t simt_smem_bytes(int64_t Rkv) {
  return kSimtHeads * Rkv * 4 + kSimtTile * simt_ldc<T>(Rkv) * static_cast<int64_t>(sizeof(T)) + kSimtTile * 8;
}

// Eight consecutive cache entries as fp32 (16-byte aligned).
__device__ __forceinline__ void load8(const __half* p, float (&v)[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const float2 c01 = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
  const float2 c23 = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
  const float2 c45 = __half22float2(*reinterpret_cast<const __half2*>(&u.z));
  const float2 c67 = __half22float2(*reinterpret_cast<const __half2*>(&u.w));
  v[0] = c01.x, v[1] = c01.y, v[2] = c23.x, v[3] = c23.y, v[4] = c45.x, v[5] = c45.y, v[6] = c67.x, v[7] = c67.y;
}
__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  const float4 b = *reinterpret_cast<const float4*>(p + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ float to_f32(__half h) { return __half2float(h); }
__device__ __forceinline__ float to_f32(float f) { return f; }

// Block (row, split, head group). Each warp keeps one head's online softmax over the split's
// tokens, 32 at a time: lane j scores token j (the 8-lane dot of shared/ops/linear.cpp), then
// every lane accumulates its channels lane + 32·i over the tile's tokens in order. T: the
// cache's element type (fp16, or fp32 for an engine in fp32 precision).
template <class T>
__global__ void __launch_bounds__(kSimtThreads, 1)
    attend_simt_kernel(MlaAttendShape s, const T* latent, SparseTables t, const int32_t* slots,
                       const int32_t* positions, const int32_t* sel_pools, const int32_t* sel_count,
                       const float* q_abs, float* part_acc, float* part_ml, int max_splits) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  extern __shared__ float4 smem4[];
  const int64_t r = blockIdx.x;
  const int split = blockIdx.y;
  const int h0 = blockIdx.z * kSimtHeads;
  const int32_t pos = positions[r], cnt = sel_count[r];
  const int kp = s.kpool;
  const int64_t nsel = mla_selection_size(pos, cnt, kp, s.tail);
  const int64_t begin = static_cast<int64_t>(split) * kMlaSplitTokens;
  if (begin >= nsel) return;
  const int64_t end = nsel < begin + kMlaSplitTokens ? nsel : begin + kMlaSplitTokens;
  const int Rkv = static_cast<int>(s.latent), nch = (Rkv + 31) / 32, ldc = static_cast<int>(simt_ldc<T>(Rkv));
  const int NH = static_cast<int>(s.heads);
  float* qs = reinterpret_cast<float*>(smem4);          // [8][Rkv]
  T* cs = reinterpret_cast<T*>(qs + kSimtHeads * Rkv);  // [32][ldc]
  int64_t* trow = reinterpret_cast<int64_t*>(cs + kSimtTile * ldc);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int h = h0 + warp;
  const bool active = h < NH;

  const float* qsrc = q_abs + (r * NH + h0) * Rkv;
  for (int i = threadIdx.x; i < kSimtHeads * Rkv; i += kSimtThreads)
    qs[i] = h0 + i / Rkv < NH ? qsrc[i] : 0.0f;
  const int32_t* pools = sel_pools + r * s.pool_budget;
  const int32_t slot = slots[r];
  const int64_t bt = static_cast<int64_t>(kPoolsPerBlock) * kp;

  float m = -INFINITY, l = 0.0f, acc[kSimtMaxChunks];
#pragma unroll
  for (int i = 0; i < kSimtMaxChunks; ++i) acc[i] = 0.0f;

  for (int64_t t0 = begin; t0 < end; t0 += kSimtTile) {
    const int nt = static_cast<int>(end - t0 < kSimtTile ? end - t0 : kSimtTile);
    __syncthreads();  // the previous tile is consumed
    if (threadIdx.x < nt) {
      const int64_t tok = mla_selected_token(pools, cnt, pos, kp, t0 + threadIdx.x);
      trow[threadIdx.x] =
          static_cast<int64_t>(t.block_table[slot * t.max_blocks_per_seq + tok / bt]) * bt + tok % bt;
    }
    __syncthreads();
    constexpr int per16 = 16 / static_cast<int>(sizeof(T));  // entries per 16-byte load
    const int vec = Rkv / per16;
    for (int i = threadIdx.x; i < nt * vec; i += kSimtThreads) {
      const int j = i / vec, c = i % vec;
      *reinterpret_cast<uint4*>(cs + j * ldc + c * per16) =
          *reinterpret_cast<const uint4*>(latent + trow[j] * Rkv + c * per16);
    }
    __syncthreads();
    if (!active) continue;

    float sc = -INFINITY;
    if (lane < nt) {
      const T* cj = cs + lane * ldc;
      const float* qh = qs + warp * Rkv;
      float d[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int c = 0; c < Rkv; c += 8) {
        float cv[8];
        load8(cj + c, cv);
        const float4 qa = *reinterpret_cast<const float4*>(qh + c);
        const float4 qb = *reinterpret_cast<const float4*>(qh + c + 4);
        d[0] = fmaf(qa.x, cv[0], d[0]);
        d[1] = fmaf(qa.y, cv[1], d[1]);
        d[2] = fmaf(qa.z, cv[2], d[2]);
        d[3] = fmaf(qa.w, cv[3], d[3]);
        d[4] = fmaf(qb.x, cv[4], d[4]);
        d[5] = fmaf(qb.y, cv[5], d[5]);
        d[6] = fmaf(qb.z, cv[6], d[6]);
        d[7] = fmaf(qb.w, cv[7], d[7]);
      }
      sc = (((d[0] + d[4]) + (d[1] + d[5])) + ((d[2] + d[6]) + (d[3] + d[7]))) * s.scale;
    }
    const float m_new = fmaxf(m, warp_max(sc));
    const float corr = expf(m - m_new);  // 0 on the first tile (m = −inf)
    const float p = lane < nt ? expf(sc - m_new) : 0.0f;
    l = l * corr + warp_sum(p);
#pragma unroll
    for (int i = 0; i < kSimtMaxChunks; ++i) acc[i] *= corr;
    for (int j = 0; j < nt; ++j) {
      const float pj = __shfl_sync(0xffffffffu, p, j);
      const T* cj = cs + j * ldc + lane;
#pragma unroll
      for (int i = 0; i < kSimtMaxChunks; ++i)
        if (i < nch && lane + 32 * i < Rkv) acc[i] = fmaf(pj, to_f32(cj[32 * i]), acc[i]);
    }
    m = m_new;
  }
  if (!active) return;
  const int64_t idx = (r * NH + h) * max_splits + split;
#pragma unroll
  for (int i = 0; i < kSimtMaxChunks; ++i)
    if (i < nch && lane + 32 * i < Rkv) part_acc[idx * Rkv + lane + 32 * i] = acc[i];
  if (lane == 0) {
    part_ml[idx * 2] = m;
    part_ml[idx * 2 + 1] = l;
  }
}

constexpr int kMergeThreads = 128;

// ctx = Σ_k w_k·acc_k / Σ_k w_k·l_k with w_k = exp(m_k − max m), splits k ascending; a row with
// an empty selection has no splits and gets zeros.
__global__ void __launch_bounds__(kMergeThreads)
    merge_kernel(MlaAttendShape s, const int32_t* positions, const int32_t* sel_count, const float* part_acc,
                 const float* part_ml, int max_splits, float* ctx) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  const int64_t r = blockIdx.x;
  const int h = blockIdx.y;
  const int64_t Rkv = s.latent;
  const int64_t nsel = mla_selection_size(positions[r], sel_count[r], s.kpool, s.tail);
  const int nsplit = static_cast<int>((nsel + kMlaSplitTokens - 1) / kMlaSplitTokens);
  const int64_t idx0 = (r * s.heads + h) * max_splits;
  float* out = ctx + (r * s.heads + h) * Rkv;
  if (nsplit == 0) {
    for (int64_t c = threadIdx.x; c < Rkv; c += kMergeThreads) out[c] = 0.0f;
    return;
  }
  float M = -INFINITY;
  for (int k = 0; k < nsplit; ++k) M = fmaxf(M, part_ml[(idx0 + k) * 2]);
  float L = 0.0f;
  for (int k = 0; k < nsplit; ++k) L += expf(part_ml[(idx0 + k) * 2] - M) * part_ml[(idx0 + k) * 2 + 1];
  for (int64_t c = threadIdx.x; c < Rkv; c += kMergeThreads) {
    float num = 0.0f;
    for (int k = 0; k < nsplit; ++k) num += expf(part_ml[(idx0 + k) * 2] - M) * part_acc[(idx0 + k) * Rkv + c];
    out[c] = num / L;
  }
}

// Workspace: partial sums [rows][NH][max_splits][Rkv], then (m, l) [rows][NH][max_splits][2].
int64_t acc_floats(int64_t rows, const MlaAttendShape& s) {
  return (rows * s.heads * s.max_splits() * s.latent + 63) / 64 * 64;
}

}  // namespace

size_t mla_attend_workspace_bytes(int64_t rows, const MlaAttendShape& s) {
  rows = std::max<int64_t>(rows, 0);
  return static_cast<size_t>(acc_floats(rows, s) + rows * s.heads * s.max_splits() * 2) * sizeof(float);
}

void mla_attend(const MlaAttendShape& s, const SparseCacheLayer& cache, const SparseCacheGeometry& g,
                const SparseTables& t, const SparseRows& rows, const int32_t* sel_pools, const int32_t* sel_count,
                const float* q_abs, float* ctx, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                MlaAttendPath path) {
  if (rows.n <= 0) return;
  if (s.latent <= 0 || s.latent % 8 != 0 || s.latent > 32 * kSimtMaxChunks)
    throw Error("mla_attend: Rkv must be a multiple of 8 up to 512 (this model has " + std::to_string(s.latent) + ")");
  if (cache.fp32() == (cache.latent != nullptr)) throw Error("mla_attend: the cache needs exactly one latent array");
  // The tensor-core path needs an fp16 cache and Rkv a multiple of 32; elsewhere the SIMT path
  // runs (the choice is a function of the shape and the cache only: batch invariant).
  if (cache.fp32() || s.latent % 32 != 0) path = MlaAttendPath::Simt;
  if (s.heads <= 0 || s.kpool < 1 || s.pool_budget < 0) throw Error("mla_attend: bad shape");
  if (s.latent != g.latent || s.kpool != g.kpool) throw Error("mla_attend: shape and cache geometry disagree");
  const int64_t ms = s.max_splits();
  if (ms > 65535) throw Error("mla_attend: selection budget too large");
  int64_t per_pass = rows.n;
  if (ms > 0) {
    const size_t per_row = mla_attend_workspace_bytes(1, s);
    per_pass = std::min<int64_t>(rows.n, static_cast<int64_t>(workspace_bytes / per_row));
    while (per_pass > 0 && mla_attend_workspace_bytes(per_pass, s) > workspace_bytes) --per_pass;
    if (per_pass < 1) throw Error("mla_attend: workspace smaller than one row's partials");
  }
  const bool f32 = cache.fp32();
  const int64_t smem = f32 ? simt_smem_bytes<float>(s.latent) : simt_smem_bytes<__half>(s.latent);
  if (ms > 0 && path == MlaAttendPath::Simt) {
    const void* k = f32 ? reinterpret_cast<const void*>(attend_simt_kernel<float>)
                        : reinterpret_cast<const void*>(attend_simt_kernel<__half>);
    FT_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  for (int64_t o = 0; o < rows.n; o += per_pass) {
    const int64_t m = std::min(per_pass, rows.n - o);
    const SparseRows part{rows.slot + o, rows.pos + o, m};
    float* acc = static_cast<float*>(workspace);
    float* ml = acc + acc_floats(m, s);
    const float* q = q_abs + o * s.heads * s.latent;
    const int32_t* pools = sel_pools + o * s.pool_budget;
    if (ms > 0) {
      if (path == MlaAttendPath::Simt) {
        const dim3 grid(static_cast<unsigned>(m), static_cast<unsigned>(ms),
                        static_cast<unsigned>((s.heads + kSimtHeads - 1) / kSimtHeads));
        if (f32)
          launch_chained(attend_simt_kernel<float>, grid, kSimtThreads, smem, stream, s, cache.latent32, t, part.slot,
                         part.pos, pools, sel_count + o, q, acc, ml, static_cast<int>(ms));
        else
          launch_chained(attend_simt_kernel<__half>, grid, kSimtThreads, smem, stream, s, cache.latent, t, part.slot,
                         part.pos, pools, sel_count + o, q, acc, ml, static_cast<int>(ms));
        FT_CUDA_CHECK_LAUNCH();
      } else {
        detail::mla_attend_mma_partials(s, cache.latent, t, part, pools, sel_count + o, q, acc, ml, stream);
      }
    }
    launch_chained(merge_kernel, dim3(static_cast<unsigned>(m), static_cast<unsigned>(s.heads)), kMergeThreads, 0,
                   stream, s, part.pos, sel_count + o, acc, ml, static_cast<int>(ms), ctx + o * s.heads * s.latent);
    FT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace ft::cuda
