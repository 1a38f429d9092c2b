#pragma once
// The Engine interface over the fp32 reference engine: the gpu-worker's CPU backend (and the
// oracle the CUDA engine is checked against). Sampling uses shared/sampling on the host.
#include <cstdint>
#include <memory>
#include <unordered_map>

#include "shared/engine/engine.h"
#include "shared/engine/helper_thread.h"
#include "shared/engine/reference_engine.h"
#include "shared/engine/state_snapshots.h"

namespace ft {

struct PrefixCacheOptions {
  uint64_t bytes = 0;           // memory for snapshots; 0: no prefix cache
  int64_t snapshot_stride = 0;  // also keep a snapshot whenever a prompt's prefill crosses a multiple of this (0: only at the end of requests)
};

class CpuEngine final : public Engine {
 public:
  // `max_sequences` bounds open sequences (the scheduler's batch size).
  CpuEngine(const ModelWeights& w, ExpertBackend* experts, int max_sequences, const PrefixCacheOptions& pc = {});

  const ModelConfig& config() const override { return ref_.config(); }
  int max_sequences() const override { return max_sequences_; }
  bool supports_constraints() const override { return true; }
  uint64_t open(const SequenceSpec& spec) override;
  void close(uint64_t seq) override;
  void step(std::span<const StepItem> items, std::vector<StepResult>& results) override;
  EngineStats stats() const override;
  int64_t restore_prefix(uint64_t seq, std::span<const int32_t> prompt) override;
  void keep_prefix(uint64_t seq) override;
  PrefixCacheStats prefix_stats() const override;

  ReferenceEngine& reference() { return ref_; }

 private:
  struct Seq {
    SequenceSpec spec;
    SequenceState state;
    Sampler sampler;
    TokenHistory history;
    std::vector<int32_t> tokens;  // every token fed so far (the prefix cache's key)
  };
  ReferenceEngine ref_;
  int max_sequences_;
  PrefixCacheOptions pc_;
  StateSnapshots snapshots_;
  HelperThread helper_;  // constraint masks, while the forward pass runs
  uint64_t next_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<Seq>> seqs_;
};

}  // namespace ft
