#pragma once
// The fp32 reference forward pass of glm5_next (spec §3–§6): prefill over many tokens and cached
// decode one token at a time, for a batch of independent sequences. Every token's computation is
// independent of what else is in the batch, so results do not depend on batching.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "shared/engine/expert_backend.h"
#include "shared/engine/state.h"
#include "shared/engine/weights.h"

namespace ft {

// Hooks to look inside a forward pass (the fixture checker's --internals). Positions are absolute.
class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  virtual void on_layer_out(int64_t layer, size_t item, int64_t pos, const float* streams) {}  // [HC, D]
  virtual void on_routing(int64_t layer, size_t item, int64_t pos, const Routing& r) {}
  virtual void on_selection(int64_t layer, size_t item, int64_t pos, const std::vector<int32_t>& sel) {}
};

struct ForwardItem {
  SequenceState* state = nullptr;
  std::span<const int32_t> tokens;  // appended to the sequence
  bool all_logits = false;          // logits for every token, else for the last one only
  std::vector<float> logits;        // out: [rows, V]
};

class ReferenceEngine {
 public:
  // `experts` computes routed experts; null = in-process from the loaded weights.
  explicit ReferenceEngine(const ModelWeights& w, ExpertBackend* experts = nullptr);

  const ModelConfig& config() const { return w_.cfg; }
  SequenceState new_state() const { return new_sequence_state(w_.cfg); }

  // Runs every item's tokens through the model, appending them to its state. Throws ft::Error
  // (before touching any state) for an out-of-range token id.
  void forward(std::span<ForwardItem> items, ForwardObserver* obs = nullptr);

  // Convenience: prefill returns [n, V] (all_logits) or [1, V]; decode returns [V].
  std::vector<float> prefill(SequenceState& s, std::span<const int32_t> tokens, bool all_logits = true,
                             ForwardObserver* obs = nullptr);
  std::vector<float> decode(SequenceState& s, int32_t token, ForwardObserver* obs = nullptr);

 private:
  using Selections = std::vector<std::vector<int32_t>>;  // per token of one item
  void kda_layer(int64_t l, KdaState& st, const float* A, int64_t n, float* O) const;
  void sparse_layer(int64_t l, SparseState& st, int64_t T0, const float* A, int64_t n, float* O, Selections& sel,
                    ForwardObserver* obs, size_t item) const;
  void mlp_layer(int64_t l, const float* A, int64_t n, float* O, ForwardObserver* obs,
                 const std::vector<std::pair<size_t, int64_t>>& where) const;

  const ModelWeights& w_;
  std::unique_ptr<ExpertBackend> own_experts_;
  ExpertBackend* experts_;
};

}  // namespace ft
