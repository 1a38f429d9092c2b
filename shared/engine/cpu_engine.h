#pragma once
// The Engine interface over the fp32 reference engine: the gpu-worker's CPU backend (and the
// oracle the CUDA engine is checked against). Sampling uses shared/sampling on the host.
#include <cstdint>
#include <memory>
#include <unordered_map>

#include "shared/engine/engine.h"
#include "shared/engine/reference_engine.h"

namespace ft {

class CpuEngine final : public Engine {
 public:
  // `max_sequences` bounds open sequences (the scheduler's batch size).
  CpuEngine(const ModelWeights& w, ExpertBackend* experts, int max_sequences);

  const ModelConfig& config() const override { return ref_.config(); }
  int max_sequences() const override { return max_sequences_; }
  uint64_t open(const SequenceSpec& spec) override;
  void close(uint64_t seq) override;
  void step(std::span<const StepItem> items, std::vector<StepResult>& results) override;
  EngineStats stats() const override;

  ReferenceEngine& reference() { return ref_; }

 private:
  struct Seq {
    SequenceSpec spec;
    SequenceState state;
    Sampler sampler;
    TokenHistory history;
  };
  ReferenceEngine ref_;
  int max_sequences_;
  uint64_t next_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<Seq>> seqs_;
};

}  // namespace ft
