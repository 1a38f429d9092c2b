#pragma once
// The engine interface the gpu-worker's scheduler drives, implemented by the fp32 reference
// engine on the CPU (cpu_engine.h) and by the CUDA engine (gpu-worker/backends/cuda/engine).
//
// A sequence is opened with its sampling settings and the most tokens it will ever hold (the
// engine reserves what that needs, or refuses); each step feeds prompt chunks and decode tokens
// of up to max_sequences() sequences and returns, for items that ask, the token the engine
// sampled (and its logprobs). Sampling happens where the logits are: a GPU step copies token
// ids to the host, not logits. Logits are returned only when an item asks for them (checkers).
#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shared/core/error.h"
#include "shared/model/config.h"
#include "shared/sampling/sampler.h"

namespace ft {

// Thrown by open() (and step()) when the engine cannot hold what is asked; the gpu-worker maps
// it to RESOURCE_EXHAUSTED. The engine's state is unchanged.
class EngineFull : public Error {
 public:
  using Error::Error;
};

// A per-sequence constraint on the tokens it may sample (grammars, min_tokens, logit_bias):
// shared/sampling/token_constraint.h.
class TokenConstraint;

struct SequenceSpec {
  SamplingConfig sampling;     // seed: reproducible whatever else is batched
  bool logprobs = false;       // report the sampled token's logprob
  int32_t top_logprobs = 0;    // and the best n (≤ 20)
  int64_t max_tokens = 0;      // prompt + new tokens this sequence may reach
  // null: unconstrained. The engine masks with it before penalties and sampling and calls
  // accept() with each sampled token; the scheduler owns it.
  std::shared_ptr<TokenConstraint> constraint;
};

// Prefix cache figures (an engine without one reports zeros).
struct PrefixCacheStats {
  uint64_t hits = 0, misses = 0;  // lookups that restored something / nothing
  uint64_t tokens_saved = 0;      // prompt tokens restored instead of prefilled
  uint64_t snapshots = 0;         // held now
  uint64_t bytes = 0, budget = 0; // memory held / allowed
  uint64_t evictions = 0;
};

enum class LogitsWanted : uint8_t { None, Last, All };

struct StepItem {
  uint64_t seq = 0;
  std::span<const int32_t> tokens;  // appended to the sequence now
  bool prompt = true;               // prompt tokens (the repetition penalty looks at them)
  bool sample = false;              // sample the token that follows `tokens`
  LogitsWanted logits = LogitsWanted::None;
};

// A decode item: `token`, one generated token of `seq`, with the next one sampled. The item
// points at `token`, which must outlive the step (hence no temporaries).
inline StepItem decode_item(uint64_t seq, const int32_t& token, LogitsWanted logits = LogitsWanted::None) {
  StepItem it;
  it.seq = seq;
  it.tokens = std::span<const int32_t>(&token, 1);
  it.prompt = false;
  it.sample = true;
  it.logits = logits;
  return it;
}
StepItem decode_item(uint64_t seq, const int32_t&& token, LogitsWanted logits = LogitsWanted::None) = delete;

struct StepResult {
  int32_t token = -1;  // when sampled
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
  std::vector<float> logits;  // [rows, V] when asked
};

struct EngineStats {
  std::string backend;  // "cpu" or "cuda:0 NVIDIA H200 ..."
  // VRAM (or host memory for the CPU engine) in use per category, bytes.
  std::vector<std::pair<std::string, uint64_t>> memory;
  uint64_t memory_budget = 0;
  // Backend-specific counters (the expert tier's cache hits, misses, copies, graph replays …).
  std::vector<std::pair<std::string, uint64_t>> counters;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual const ModelConfig& config() const = 0;
  virtual int max_sequences() const = 0;
  // Prefill chunks that do not finish a prompt should be cut at multiples of this many tokens,
  // so a prompt's results do not depend on how it was chunked (1: any cut is fine).
  virtual int64_t prefill_alignment() const { return 1; }
  // The most tokens one sequence can hold when it runs alone (memory permitting); a request
  // beyond it can never run and is refused at once.
  virtual int64_t max_tokens_per_sequence() const { return std::numeric_limits<int64_t>::max(); }
  // Whether open() honours SequenceSpec::constraint (the scheduler refuses constrained requests
  // on an engine that would ignore them).
  virtual bool supports_constraints() const { return false; }

  // Throws EngineFull when max_tokens cannot be guaranteed, ft::Error for bad settings.
  virtual uint64_t open(const SequenceSpec& spec) = 0;
  virtual void close(uint64_t seq) = 0;

  // Runs the items (each sequence at most once per step) and fills results[i] for item i.
  // Throws ft::Error for a bad token id before any state changes; after a failure inside the
  // step (an expert tier that went away) the sequences of the step are unusable and must be closed.
  virtual void step(std::span<const StepItem> items, std::vector<StepResult>& results) = 0;

  virtual EngineStats stats() const = 0;

  // Writes the routed experts' use counts as a routing-statistics file (a VRAM expert cache's
  // warm start reads it); false when this engine keeps none. Not while a step runs.
  virtual bool write_routing_stats(const std::string& path) {
    (void)path;
    return false;
  }

  // Prefix cache. restore_prefix, right after open(): restores the longest cached prefix of
  // `prompt` (fewer than prompt.size() tokens, so at least one is left to compute the first
  // logits) into the sequence and returns its length (0: nothing cached). keep_prefix: the
  // sequence's state (every token fed so far) may be kept for later requests. Results of a
  // restored sequence are bit-identical to a cold run.
  virtual int64_t restore_prefix(uint64_t seq, std::span<const int32_t> prompt) { return 0; }
  virtual void keep_prefix(uint64_t seq) {}
  virtual PrefixCacheStats prefix_stats() const { return {}; }
};

}  // namespace ft
