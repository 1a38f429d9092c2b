// GPU twin of shared/ops/indexer.cpp: pool keys of the pools a step completes, pool scores per
// query row, and the selection (scores → ops/topk.cu). Each kernel mirrors the reference loop
// order (pool softmax over slots j ascending; per score the 8-lane dot of shared/ops/linear.cpp
// and the heads summed in ascending order), so results differ from it by FMA rounding only.
#include "gpu-worker/backends/cuda/ops/indexer.h"

#include <cmath>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/programmatic.cuh"
#include "gpu-worker/backends/cuda/ops/topk.h"
#include "shared/core/error.h"

namespace ft::cuda {
namespace {

constexpr int kPoolKeyThreads = 128;

// sparse_token_row without SparseCacheGeometry::block_tokens(), which is host-only.
__device__ __forceinline__ int64_t token_row(const SparseTables& t, int kpool, int32_t slot, int64_t s) {
  const int64_t bt = static_cast<int64_t>(kPoolsPerBlock) * kpool;
  return static_cast<int64_t>(t.block_table[slot * t.max_blocks_per_seq + s / bt]) * bt + s % bt;
}

// One block per row; rows that do not complete a pool exit. Channels are independent.
__global__ void __launch_bounds__(kPoolKeyThreads)
    pool_keys_kernel(SparseCacheLayer cache, SparseCacheGeometry g, SparseTables t, const int32_t* slots,
                     const int32_t* positions, const float* ape) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  const int64_t r = blockIdx.x;
  const int64_t pos = positions[r];
  const int kp = g.kpool;
  if ((pos + 1) % kp != 0) return;
  const int32_t slot = slots[r];
  const int64_t p = (pos + 1) / kp - 1;
  const int64_t ID = g.index_dim;
  // A pool never straddles a block, so its κ tokens are consecutive rows of one block.
  const int64_t first = token_row(t, kp, slot, p * kp);
  const int64_t base = first * ID;
  // The cache's entries as fp32 (an fp16 cache widens exactly).
  auto kI = [&](int64_t i) { return cache.key32 ? cache.key32[base + i] : __half2float(cache.key[base + i]); };
  auto gI = [&](int64_t i) { return cache.gate32 ? cache.gate32[base + i] : __half2float(cache.gate[base + i]); };
  float* pk = cache.pool_keys + sparse_pool_row(t, slot, p) * ID;
  for (int64_t c = threadIdx.x; c < ID; c += kPoolKeyThreads) {
    float mx = -INFINITY;
    for (int j = 0; j < kp; ++j) mx = fmaxf(mx, gI(j * ID + c) + ape[j * ID + c]);
    float den = 0.0f, num = 0.0f;
    for (int j = 0; j < kp; ++j) {
      const float e = expf(gI(j * ID + c) + ape[j * ID + c] - mx);
      den += e;
      num += e * kI(j * ID + c);
    }
    pk[c] = num / den;
  }
}

// Scores: one block per (row, 64-pool tile = one cache block of pool keys). The tile's keys and
// the row's queries sit in shared memory; thread (pool, head group) computes the dots of its
// pool with kHpt heads; the per-head terms are then summed per pool in ascending head order.
constexpr int kScoreThreads = 256;
constexpr int kScoreHeadGroups = kScoreThreads / kPoolsPerBlock;  // 4

struct ScoreSmem {
  int64_t q, omega, pk, part, bytes;  // float offsets and total bytes
  int64_t pk_ld;
};
__host__ __device__ inline ScoreSmem score_smem(int64_t IH, int64_t ID) {
  ScoreSmem s;
  s.pk_ld = ID + 4;  // rows 16 B apart modulo 128 B: a quarter-warp's float4 loads hit distinct banks
  s.q = 0;
  s.omega = IH * ID;
  s.pk = (s.omega + IH + 3) / 4 * 4;
  s.part = s.pk + kPoolsPerBlock * s.pk_ld;
  s.bytes = (s.part + IH * kPoolsPerBlock) * 4;
  return s;
}

template <int kHpt>
__global__ void __launch_bounds__(kScoreThreads)
    pool_scores_kernel(IndexerShape s, const float* pool_keys, SparseTables t, const int32_t* slots,
                       const int32_t* positions, const float* qI, int64_t ld_qI, const float* omega,
                       int64_t ld_omega, float* scores, int64_t ld_scores, float inv_sqrt_dim) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  const int64_t r = blockIdx.y;
  const int64_t nvis = (static_cast<int64_t>(positions[r]) + 1) / s.kpool;
  const int64_t p0 = static_cast<int64_t>(blockIdx.x) * kPoolsPerBlock;
  if (nvis <= s.pool_budget || p0 >= nvis) return;
  const int IH = static_cast<int>(s.heads), ID = static_cast<int>(s.dim);
  const ScoreSmem L = score_smem(IH, ID);
  float* q = smem + L.q;
  float* w = smem + L.omega;
  float* pk = smem + L.pk;
  float* part = smem + L.part;
  const int npool = static_cast<int>(nvis - p0 < kPoolsPerBlock ? nvis - p0 : kPoolsPerBlock);

  const float* qrow = qI + r * ld_qI;
  for (int i = threadIdx.x; i < IH * ID; i += kScoreThreads) q[i] = qrow[i];
  for (int i = threadIdx.x; i < IH; i += kScoreThreads) w[i] = omega[r * ld_omega + i];
  const float* src = pool_keys + static_cast<int64_t>(t.block_table[slots[r] * t.max_blocks_per_seq + blockIdx.x]) *
                                     kPoolsPerBlock * ID;
  const int vec = ID / 4;
  for (int i = threadIdx.x; i < npool * vec; i += kScoreThreads) {
    const int p = i / vec, c4 = i % vec;
    *reinterpret_cast<float4*>(pk + p * L.pk_ld + c4 * 4) = reinterpret_cast<const float4*>(src + p * ID)[c4];
  }
  __syncthreads();

  const int pool = threadIdx.x % kPoolsPerBlock;
  const int h0 = (threadIdx.x / kPoolsPerBlock) * kHpt;  // warp-uniform: q reads are broadcasts
  if (pool < npool) {
    float acc[kHpt][8];
#pragma unroll
    for (int i = 0; i < kHpt; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;
    const float* kp = pk + pool * L.pk_ld;
    for (int c = 0; c < ID; c += 8) {
      const float4 ka = *reinterpret_cast<const float4*>(kp + c);
      const float4 kb = *reinterpret_cast<const float4*>(kp + c + 4);
      const float kv[8] = {ka.x, ka.y, ka.z, ka.w, kb.x, kb.y, kb.z, kb.w};
#pragma unroll
      for (int i = 0; i < kHpt; ++i) {
        if (h0 + i >= IH) break;
        const float4 qa = *reinterpret_cast<const float4*>(q + (h0 + i) * ID + c);
        const float4 qb = *reinterpret_cast<const float4*>(q + (h0 + i) * ID + c + 4);
        const float qv[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(qv[j], kv[j], acc[i][j]);
      }
    }
#pragma unroll
    for (int i = 0; i < kHpt; ++i) {
      const int h = h0 + i;
      if (h >= IH) break;
      const float d = ((acc[i][0] + acc[i][4]) + (acc[i][1] + acc[i][5])) + ((acc[i][2] + acc[i][6]) + (acc[i][3] + acc[i][7]));
      part[h * kPoolsPerBlock + pool] = w[h] * fmaxf(d * inv_sqrt_dim, 0.0f);
    }
  }
  __syncthreads();
  if (threadIdx.x < npool) {
    float sum = 0.0f;
    for (int h = 0; h < IH; ++h) sum += part[h * kPoolsPerBlock + threadIdx.x];
    scores[r * ld_scores + p0 + threadIdx.x] = sum;
  }
}

template <int kHpt>
void launch_scores(const IndexerShape& s, const SparseCacheLayer& cache, const SparseTables& t,
                   const SparseRows& rows, const float* qI, int64_t ld_qI, const float* omega, int64_t ld_omega,
                   float* scores, int64_t ld_scores, cudaStream_t stream) {
  const ScoreSmem L = score_smem(s.heads, s.dim);
  FT_CUDA_CHECK(cudaFuncSetAttribute(pool_scores_kernel<kHpt>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(L.bytes)));
  const float inv = 1.0f / std::sqrt(static_cast<float>(s.dim));  // as the reference computes it
  const int64_t tiles = (s.max_pools + kPoolsPerBlock - 1) / kPoolsPerBlock;
  constexpr int64_t kMaxGridY = 65535;
  for (int64_t o = 0; o < rows.n; o += kMaxGridY) {
    const int64_t m = std::min(kMaxGridY, rows.n - o);
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(m));
    launch_chained(pool_scores_kernel<kHpt>, grid, kScoreThreads, L.bytes, stream, s, cache.pool_keys, t, rows.slot + o,
                   rows.pos + o, qI + o * ld_qI, ld_qI, omega + o * ld_omega, ld_omega, scores + o * ld_scores,
                   ld_scores, inv);
    FT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void indexer_pool_keys(const SparseCacheLayer& cache, const SparseCacheGeometry& g, const SparseTables& t,
                       const SparseRows& rows, const float* ape, cudaStream_t stream) {
  if (rows.n <= 0) return;
  if (!cache.has_indexer() || !cache.pool_keys) throw Error("indexer_pool_keys: layer has no indexer cache");
  if (g.kpool < 1) throw Error("indexer_pool_keys: kpool must be ≥ 1");
  launch_chained(pool_keys_kernel, static_cast<unsigned>(rows.n), kPoolKeyThreads, 0, stream, cache, g, t, rows.slot,
                 rows.pos, ape);
  FT_CUDA_CHECK_LAUNCH();
}

void indexer_pool_scores(const IndexerShape& s, const SparseCacheLayer& cache, const SparseTables& t,
                         const SparseRows& rows, const float* qI, int64_t ld_qI, const float* omega,
                         int64_t ld_omega, float* scores, int64_t ld_scores, cudaStream_t stream) {
  if (rows.n <= 0 || s.max_pools <= s.pool_budget) return;  // no row needs scores
  if (s.dim % 8 != 0 || s.dim <= 0) throw Error("indexer_pool_scores: ID must be a positive multiple of 8");
  if (s.kpool < 1) throw Error("indexer_pool_scores: kpool must be ≥ 1");
  if (ld_scores < s.max_pools) throw Error("indexer_pool_scores: score rows shorter than max_pools");
  if (score_smem(s.heads, s.dim).bytes > 99 * 1024)
    throw Error("indexer_pool_scores: IH·ID too large for one block's shared memory");
  const int64_t hpt = (s.heads + kScoreHeadGroups - 1) / kScoreHeadGroups;
  if (hpt <= 1)
    launch_scores<1>(s, cache, t, rows, qI, ld_qI, omega, ld_omega, scores, ld_scores, stream);
  else if (hpt <= 2)
    launch_scores<2>(s, cache, t, rows, qI, ld_qI, omega, ld_omega, scores, ld_scores, stream);
  else if (hpt <= 4)
    launch_scores<4>(s, cache, t, rows, qI, ld_qI, omega, ld_omega, scores, ld_scores, stream);
  else if (hpt <= 8)
    launch_scores<8>(s, cache, t, rows, qI, ld_qI, omega, ld_omega, scores, ld_scores, stream);
  else
    throw Error("indexer_pool_scores: more than 32 indexer heads");
}

size_t indexer_select_workspace_bytes(int64_t rows, const IndexerShape& s) {
  return static_cast<size_t>(std::max<int64_t>(rows, 0)) * static_cast<size_t>(std::max<int64_t>(s.max_pools, 1)) *
         sizeof(float);
}

void indexer_select(const IndexerShape& s, const SparseCacheLayer& cache, const SparseTables& t,
                    const SparseRows& rows, const float* qI, int64_t ld_qI, const float* omega, int64_t ld_omega,
                    int32_t* sel_pools, int32_t* sel_count, void* workspace, size_t workspace_bytes,
                    cudaStream_t stream) {
  if (rows.n <= 0) return;
  const int64_t ld = std::max<int64_t>(s.max_pools, 1);
  const int64_t per_pass = static_cast<int64_t>(workspace_bytes / (static_cast<size_t>(ld) * sizeof(float)));
  if (per_pass < 1) throw Error("indexer_select: workspace smaller than one row of scores");
  float* scores = static_cast<float*>(workspace);
  for (int64_t o = 0; o < rows.n; o += per_pass) {
    const int64_t m = std::min(per_pass, rows.n - o);
    const SparseRows part{rows.slot + o, rows.pos + o, m};
    indexer_pool_scores(s, cache, t, part, qI + o * ld_qI, ld_qI, omega + o * ld_omega, ld_omega, scores, ld, stream);
    topk_pool_ids(scores, ld, part.pos, m, s.kpool, s.pool_budget, sel_pools + o * s.pool_budget, sel_count + o,
                  stream);
  }
}

}  // namespace ft::cuda
