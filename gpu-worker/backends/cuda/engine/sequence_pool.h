#pragma once
// Per-sequence state on the GPU: a fixed number of slots (the batch), each with its KDA
// recurrent states and conv windows (fixed size, zeroed when a sequence opens), and the sparse
// layers' caches in blocks taken from one pool as the context grows and returned when the
// sequence closes. A sequence reserves the blocks its max_tokens needs when it opens, so a
// running sequence can never run out of cache memory mid-generation; a request that cannot be
// guaranteed is refused (EngineFull) instead.
#include <cstdint>
#include <vector>

#include "gpu-worker/backends/cuda/core/vram.h"
#include "gpu-worker/backends/cuda/ops/sparse_cache.h"
#include "shared/model/config.h"

namespace ft::cuda {

class SequencePool {
 public:
  // `n_blocks`: physical cache blocks shared by all slots; `context_size` bounds one sequence.
  // `fp32`: token entries (latents, indexer keys and gates) in fp32 (an engine in fp32
  // precision), else fp16.
  SequencePool(const ModelConfig& c, int slots, int64_t n_blocks, int64_t context_size, VramBudget& budget,
               bool fp32 = false);

  // Bytes of one cache block over all sparse layers (0 for a model without sparse layers).
  static uint64_t block_bytes(const ModelConfig& c, bool fp32 = false);
  // Bytes of one slot's KDA states and windows over all KDA layers.
  static uint64_t slot_bytes(const ModelConfig& c);

  int slots() const { return static_cast<int>(slots_.size()); }
  int64_t block_tokens() const { return geom_.block_tokens(); }
  // The most tokens one sequence can hold (its blocks, the context).
  int64_t max_tokens_per_sequence() const;

  // A free slot with room for max_tokens, its state zeroed on `stream`; throws EngineFull.
  int open(int64_t max_tokens, cudaStream_t stream);
  void close(int slot);
  // Makes the slot's block table cover tokens [0, n_tokens) (within its reservation) and
  // updates the device table row on `stream`.
  void cover(int slot, int64_t n_tokens, cudaStream_t stream);

  int64_t length(int slot) const { return slots_[slot].length; }
  void set_length(int slot, int64_t n) { slots_[slot].length = n; }

  // KDA state of layer `l` (a KDA layer): [slots][H][dl][dl] fp32, and conv windows
  // [slots][K−1][3Q] fp32.
  float* kda_state(int64_t l) const { return kda_state_[l]; }
  float* conv_window(int64_t l) const { return conv_window_[l]; }
  int64_t state_stride() const { return state_stride_; }    // floats between slots
  int64_t window_stride() const { return window_stride_; }  // floats between slots
  float* kda_state_of(int64_t l, int slot) const { return kda_state_[l] + slot * state_stride_; }
  float* conv_window_of(int64_t l, int slot) const { return conv_window_[l] + slot * window_stride_; }

  const SparseCacheLayer& sparse(int64_t l) const { return sparse_[l]; }
  const SparseCacheGeometry& geometry() const { return geom_; }
  SparseTables tables() const { return {table_d_.get(), geom_.max_blocks_per_seq}; }

  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t unreserved_blocks() const { return unreserved_; }

 private:
  struct Slot {
    bool open = false;
    int64_t length = 0;
    int64_t reserved = 0;  // blocks promised to this slot
    std::vector<int32_t> blocks;
  };
  const ModelConfig& cfg_;
  SparseCacheGeometry geom_;
  std::vector<Slot> slots_;
  std::vector<int32_t> free_;
  int64_t unreserved_ = 0, total_blocks_ = 0;
  int64_t context_size_ = 0;
  bool has_sparse_ = false;
  std::vector<float*> kda_state_, conv_window_;
  std::vector<SparseCacheLayer> sparse_;
  int64_t state_stride_ = 0, window_stride_ = 0;
  std::vector<DeviceArray<uint8_t>> storage_;
  DeviceArray<int32_t> table_d_;
  std::vector<int32_t> table_h_;  // host mirror [slots][max_blocks]
};

}  // namespace ft::cuda
