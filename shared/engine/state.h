#pragma once
// Per-sequence decode state of the reference engine (spec §6.1): KDA conv windows and fp32
// recurrent states, the sparse layers' normalised kv latents, and the indexer's per-token keys,
// gate logits and completed pool keys. Nothing grows with context except the per-token caches.
#include <cstdint>
#include <vector>

#include "shared/model/config.h"

namespace ft {

struct KdaState {
  std::vector<float> conv_window;  // [K−1, 3Q] raw pre-conv inputs, oldest first
  std::vector<float> S;            // [Hl, dl, dl] recurrent state, rows = key channels
};

struct SparseState {
  std::vector<float> latent;     // [T, Rkv] normalised kv latent c_s
  std::vector<float> kI, gI;     // [T, ID] indexer keys and pool-gate logits (own-indexer layers)
  std::vector<float> pool_keys;  // [P, ID] keys of completed pools
};

struct SequenceState {
  int64_t n_tokens = 0;
  std::vector<KdaState> kda;        // indexed by layer; empty entries for sparse layers
  std::vector<SparseState> sparse;  // indexed by layer; empty entries for KDA layers

  // Bytes held, for accounting and tests of the O(context) growth.
  size_t bytes() const;
};

SequenceState new_sequence_state(const ModelConfig& cfg);

}  // namespace ft
