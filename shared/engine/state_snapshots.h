#pragma once
// The reference engine's prefix cache: snapshots of sequence states keyed by the tokens they
// cover (prefix_index.h), in a memory budget with least-recently-used eviction.
//
// A snapshot copies the fixed-size part of a state (KDA recurrent states and conv windows, the
// completed indexer pool keys) and shares the per-token sparse-layer caches by blocks: block j
// holds tokens [j·B, (j+1)·B) of every sparse layer's latent / indexer key / gate caches and is
// immutable once whole, so snapshots of one conversation at turn 1, 2, 3 … hold its history once.
// A block is shared only after its token prefix is compared, so a hash collision cannot mix
// conversations. The reference engine is exactly position-wise (a token's math never depends on
// how the sequence was chunked), so a restored sequence continues bit-identically to a cold run.
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "shared/engine/engine.h"
#include "shared/engine/prefix_index.h"
#include "shared/engine/state.h"
#include "shared/model/config.h"

namespace ft {

class StateSnapshots {
 public:
  StateSnapshots(const ModelConfig& c, uint64_t budget_bytes, int64_t block_tokens = 64);
  ~StateSnapshots();
  StateSnapshots(const StateSnapshots&) = delete;
  StateSnapshots& operator=(const StateSnapshots&) = delete;

  // Keeps `s`, the state after `tokens`, unless it alone exceeds the budget; evicts the least
  // recently used snapshots until everything fits.
  void keep(std::span<const int32_t> tokens, const SequenceState& s);
  // Restores the longest kept prefix of `prompt` with at most max_len tokens into `s` (a fresh
  // state) and returns its length; 0 (and `s` untouched) when there is none.
  int64_t restore(std::span<const int32_t> prompt, int64_t max_len, SequenceState& s);

  PrefixCacheStats stats() const;
  uint64_t bytes() const { return own_bytes_ + block_bytes_; }

 private:
  struct Block;
  struct Snapshot;
  std::shared_ptr<const Block> block_for(const PrefixIndex::Tokens& tokens, int64_t j, uint64_t chain,
                                         const SequenceState& s);
  void evict_to_fit();

  const ModelConfig& cfg_;
  const uint64_t budget_;
  const int64_t B_;
  PrefixIndex index_;
  // Whole blocks alive in some snapshot, by (chain hash of tokens [0, (j+1)·B), j).
  std::map<std::pair<uint64_t, int64_t>, std::weak_ptr<const Block>> blocks_;
  std::shared_ptr<uint64_t> live_block_bytes_;  // updated by the blocks' deleters
  uint64_t own_bytes_ = 0, block_bytes_ = 0;
  PrefixCacheStats st_;
};

}  // namespace ft
