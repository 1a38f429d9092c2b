#pragma once
// The sparse (MLA + DSA) layers' per-sequence caches on the GPU, shared by the kernels in
// mla.h / indexer.h and the engine that allocates them.
//
// Every sequence's tokens live in fixed-size blocks of BLK = 64·κ tokens (so a block holds
// exactly 64 indexer pools and no pool straddles two blocks). A sequence's block table maps
// logical block j (tokens [j·BLK, (j+1)·BLK)) to a physical block id; all sparse layers share
// the table, each layer has its own pools of blocks. Blocks are taken as the context grows and
// returned when the sequence ends.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ft::cuda {

constexpr int kPoolsPerBlock = 64;

struct SparseCacheGeometry {
  int64_t latent = 0;      // Rkv
  int64_t index_dim = 0;   // ID
  int kpool = 1;           // κ
  __host__ __device__ int64_t block_tokens() const { return kPoolsPerBlock * static_cast<int64_t>(kpool); }
  int64_t max_blocks_per_seq = 0;  // columns of the block table
};

// One sparse layer's block pools (device memory). Token entries are fp16 (an engine in fp16
// precision) or fp32 (fp32 precision: the *32 pointers set, the fp16 ones null).
struct SparseCacheLayer {
  __half* latent = nullptr;    // [n_blocks][BLK][Rkv]: normalised kv latent c_s
  __half* key = nullptr;       // [n_blocks][BLK][ID]: indexer keys kI_s (null on shared-indexer layers)
  __half* gate = nullptr;      // [n_blocks][BLK][ID]: pool-gate logits gI_s (null on shared-indexer layers)
  float* pool_keys = nullptr;  // [n_blocks][64][ID]: keys PK_p of completed pools (null on shared-indexer layers)
  float* latent32 = nullptr;   // fp32 twins of latent, key, gate
  float* key32 = nullptr;
  float* gate32 = nullptr;
  __host__ __device__ bool fp32() const { return latent32 != nullptr; }
  __host__ __device__ bool has_indexer() const { return key != nullptr || key32 != nullptr; }
};

// The query rows of one step (device arrays of n entries): row r is the token at absolute
// position pos[r] of the sequence in slot slot[r]. Decode steps and prefill chunks use the
// same form, so one kernel serves both and a token's result does not depend on which it was.
struct SparseRows {
  const int32_t* slot = nullptr;
  const int32_t* pos = nullptr;
  int64_t n = 0;
};

// block_table: int32 [slots][max_blocks_per_seq] (device).
struct SparseTables {
  const int32_t* block_table = nullptr;
  int64_t max_blocks_per_seq = 0;
};

// Where token s of the sequence in `slot` lives: block id, then row inside the block.
__host__ __device__ inline int64_t sparse_token_row(const SparseTables& t, const SparseCacheGeometry& g, int32_t slot,
                                                    int64_t s) {
  const int64_t bt = g.block_tokens();
  return static_cast<int64_t>(t.block_table[slot * t.max_blocks_per_seq + s / bt]) * bt + s % bt;
}
// Where pool p (tokens [p·κ, (p+1)·κ)) of that sequence keeps its key: block id · 64 + index.
__host__ __device__ inline int64_t sparse_pool_row(const SparseTables& t, int32_t slot, int64_t p) {
  return static_cast<int64_t>(t.block_table[slot * t.max_blocks_per_seq + p / kPoolsPerBlock]) * kPoolsPerBlock +
         p % kPoolsPerBlock;
}

}  // namespace ft::cuda
