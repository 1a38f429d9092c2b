// The cache writes of ReferenceEngine::sparse_layer step 1: each new token's latent (and, on
// own-indexer layers, its indexer key and gate logits) joins the sparse cache as fp16.
#include <cuda_fp16.h>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/programmatic.cuh"
#include "gpu-worker/backends/cuda/ops/mla.h"
#include "shared/core/error.h"

namespace ft::cuda {
namespace {

constexpr int kAppendThreads = 128;

// A cache entry from its fp32 value: fp16 round to nearest, or as it is.
__device__ __forceinline__ void put(__half* dst, float v) { *dst = __float2half_rn(v); }
__device__ __forceinline__ void put(float* dst, float v) { *dst = v; }

// Row r's entries into one cache's arrays (all fp16 or all fp32); key null: no indexer.
template <class T>
__device__ __forceinline__ void append_row(T* lat_c, T* key_c, T* gate_c, int64_t row, int64_t Rkv, int64_t ID,
                                           const float* latent, const float* key, const float* gate) {
  for (int64_t c = threadIdx.x; c < Rkv; c += kAppendThreads) put(lat_c + row * Rkv + c, latent[c]);
  if (!key_c) return;
  for (int64_t c = threadIdx.x; c < ID; c += kAppendThreads) {
    put(key_c + row * ID + c, key[c]);
    put(gate_c + row * ID + c, gate[c]);
  }
}

__global__ void __launch_bounds__(kAppendThreads)
    append_kernel(SparseCacheLayer cache, int64_t Rkv, int64_t ID, int kpool, SparseTables t, const int32_t* slots,
                  const int32_t* positions, const float* latent, int64_t ld_latent, const float* key,
                  const float* gate, int64_t ld_index) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  const int64_t r = blockIdx.x;
  const int64_t bt = static_cast<int64_t>(kPoolsPerBlock) * kpool;
  const int64_t s = positions[r];
  const int64_t row = static_cast<int64_t>(t.block_table[slots[r] * t.max_blocks_per_seq + s / bt]) * bt + s % bt;
  const float* lr = latent + r * ld_latent;
  const float* kr = key ? key + r * ld_index : nullptr;
  const float* gr = gate ? gate + r * ld_index : nullptr;
  if (cache.fp32()) append_row(cache.latent32, cache.key32, cache.gate32, row, Rkv, ID, lr, kr, gr);
  else append_row(cache.latent, cache.key, cache.gate, row, Rkv, ID, lr, kr, gr);
}

}  // namespace

void sparse_cache_append(const SparseCacheLayer& cache, const SparseCacheGeometry& g, const SparseTables& t,
                         const SparseRows& rows, const float* latent, int64_t ld_latent, const float* key,
                         const float* gate, int64_t ld_index, cudaStream_t stream) {
  if (rows.n <= 0) return;
  if (cache.has_indexer() && (!key || !gate || (cache.key && !cache.gate) || (cache.key32 && !cache.gate32)))
    throw Error("sparse_cache_append: indexer cache without inputs");
  if (cache.fp32() == (cache.latent != nullptr) || (cache.fp32() && cache.key) || (!cache.fp32() && cache.key32))
    throw Error("sparse_cache_append: a cache is all fp16 or all fp32");
  launch_chained(append_kernel, static_cast<unsigned>(rows.n), kAppendThreads, 0, stream, cache, g.latent, g.index_dim,
                 g.kpool, t, rows.slot, rows.pos, latent, ld_latent, key, gate, ld_index);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
