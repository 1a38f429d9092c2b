#pragma once
// The CUDA engine: the whole glm5_next forward pass on one GPU behind the Engine interface
// (shared/engine/engine.h), with the per-sequence state in VRAM (sequence_pool.h), every buffer
// counted against --vram-budget-gb (core/vram.h), decode steps replayed from CUDA graphs
// captured per batch size, and sampling next to the logits.
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <memory>
#include <unordered_map>
#include <vector>

#include "gpu-worker/backends/cuda/core/device.h"
#include "gpu-worker/backends/cuda/core/vram.h"
#include "gpu-worker/backends/cuda/engine/decode_graphs.h"
#include "gpu-worker/tiers/split_model.h"
#include "shared/engine/engine.h"
#include "shared/engine/expert_backend.h"
#include "shared/engine/weights.h"

namespace ft::cuda {

struct DeviceModel;
class SequencePool;
struct StepBuffers;
class ForwardPass;
class DecodeGraphs;
class GpuSampler;
class OpProfile;
class GpuExpertTier;
class CpuTierSplit;

struct CudaEngineOptions {
  int device = 0;
  uint64_t vram_budget_bytes = 0;  // 0: the card's free memory
  int max_sequences = 8;
  int64_t max_tokens_per_step = 8192;
  int64_t context_size = 32768;
  // Arithmetic of the dense parts (DeviceModel::fp32): "fp32" (fp32 activations, FMAs and sparse
  // caches: the reference's results, routing and selections included), "fp16" (fp16 operands,
  // fp32 accumulation: tensor cores), or "auto": fp32 for a dense (bf16/fp32) checkpoint, fp16
  // when the checkpoint's linears are EXL3 (their weights are fp16 already and their error is
  // the quantization's; fp32 precision computes them from their decoded dense weights, which
  // only small models afford).
  std::string precision = "auto";
  bool graphs = true;              // replay decode steps from CUDA graphs
  // Tests: every allocation starts as 0xFF bytes (NaN in fp32 and fp16), so a kernel that reads
  // memory before anything wrote it shows in the results instead of depending on what the card
  // held before (fresh pages are zero; memory a previous engine freed is not).
  bool poison_vram = false;
  int max_graph_batch = 32;        // decode batches up to this size get a graph
  // Independent launches of decode-sized steps (the shared expert, KDA's gate projections) on a
  // side stream (engine/side_stream.h); false, or FLASHTIER_BRANCHES=off: one stream. Same bits.
  bool branches = true;
  uint64_t reserve_bytes = 512ull << 20;  // left for CUDA's own allocations (graphs, library workspaces)
  // Remote routed experts: the cpu-expert-worker's segment name (from its Info), read by the GPU
  // zero-copy with a VRAM cache, unless tier_mode is "cpu" (every MoE layer a host round trip).
  std::string expert_segment;
  // fast: misses split between zero-copy reads and the CPU tier (host_experts) by the calibrated
  // cost model; exact: zero-copy only; cpu: the CPU tier computes every miss (VRAM hits stay on
  // the GPU). Without host_experts, fast and cpu run as exact.
  std::string tier_mode = "fast";
  int64_t split_max_rows = 32;      // steps with more rows run exact (prefill chunks stage instead)
  bool calibrate_split = true;      // time both sides at start-up; false: split_rates as given
  bool freeze_split_rates = false;  // never refit from observed layers (tests, forced splits)
  tiers::TierRates split_rates;
  uint64_t expert_cache_bytes = 0;  // 0: what the budget leaves after weights, activations and the KV cache
  bool auto_expert_cache = true;    // false: expert_cache_bytes 0 means no cache (every expert zero-copy)
  int admit_per_step = 32;
  // The cache's admission gate (tiers::CachePolicy): a miss replaces CLOCK's victim only if it was
  // used at least as often lately; false, or FLASHTIER_CACHE_GATE=off: plain CLOCK.
  bool expert_cache_gate = true;
  std::string expert_stats;  // routing-statistics file the cache warm-starts from ("": none)
  bool forced_routes = false;       // benchmarks: expert_tier()->set_forced_routes replaces the router's picks
  // Prefill staging (expert_tier.h): chunks of at least this many rows copy their layers'
  // non-resident experts into borrowed cache slots one layer ahead.
  int64_t staging_min_rows = 512;
  int staging_slots = -1;           // −1: two MoE layers' worth, at most 3/4 of the cache; 0: off
};

class CudaEngine final : public Engine {
 public:
  // Uploads `w` (EXL3 linears kept quantized) and plans VRAM; throws ft::Error (VramExhausted
  // when it does not fit the budget, naming what did not fit).
  CudaEngine(const ModelWeights& w, ExpertBackend* host_experts, const CudaEngineOptions& o);
  ~CudaEngine() override;

  const ModelConfig& config() const override { return cfg_; }
  int max_sequences() const override { return opts_.max_sequences; }
  int64_t prefill_alignment() const override { return 64; }
  int64_t max_tokens_per_sequence() const override;
  uint64_t open(const SequenceSpec& spec) override;
  bool supports_constraints() const override { return true; }  // masks in GpuSampler
  void close(uint64_t seq) override;
  void step(std::span<const StepItem> items, std::vector<StepResult>& results) override;
  EngineStats stats() const override;
  bool write_routing_stats(const std::string& path) override;

  const DeviceInfo& device() const { return dev_; }
  VramBudget& budget() { return *budget_; }
  // Events around every op group of the following steps (which then run eagerly); null: off.
  void set_profile(OpProfile* p);
  // Decode steps since start that ran from a graph / eagerly.
  uint64_t graph_steps() const { return graph_steps_; }
  bool fp32() const;  // the precision the engine runs (CudaEngineOptions::precision resolved)
  uint64_t eager_steps() const { return eager_steps_; }
  // Nodes, kernels and edges of the decode graph of `rows` rows (plain steps; zeros until one ran).
  GraphShape decode_graph_shape(int rows) const;
  // Tests: a callback after every layer of the following (eager) steps; see ForwardPass.
  void set_layer_probe(std::function<void(int64_t, const StepBuffers&, int64_t, cudaStream_t)> p);
  // The zero-copy expert tier (null when the experts are in VRAM or on the CPU tier).
  GpuExpertTier* expert_tier() { return tier_.get(); }
  // The CPU/zero-copy split (fast and cpu tier modes with a CPU tier; null otherwise).
  CpuTierSplit* tier_split() { return split_.get(); }

 private:
  struct Seq;
  void run_step(std::span<const StepItem> items, std::vector<StepResult>& results);

  CudaEngineOptions opts_;
  ModelConfig cfg_;
  DeviceInfo dev_;
  ExpertBackend* host_experts_ = nullptr;
  cudaStream_t stream_ = nullptr;
  // Recorded after a split step's forward pass: the host sleeps on it (blocking sync) instead of
  // spinning through the step beside the CPU tier's threads.
  cudaEvent_t forward_done_ = nullptr;
  std::unique_ptr<VramBudget> budget_;
  std::unique_ptr<DeviceModel> model_;
  std::unique_ptr<SequencePool> pool_;
  std::unique_ptr<StepBuffers> bufs_;
  std::unique_ptr<ForwardPass> fwd_;
  std::unique_ptr<DecodeGraphs> graphs_;
  std::unique_ptr<GpuSampler> sampler_;
  std::unique_ptr<GpuExpertTier> tier_;
  std::unique_ptr<CpuTierSplit> split_;
  std::unordered_map<uint64_t, std::unique_ptr<Seq>> seqs_;
  uint64_t next_ = 1;
  uint64_t graph_steps_ = 0, eager_steps_ = 0;
  bool profiling_ = false, probing_ = false;
  // Pinned host staging of the step's row descriptors.
  int32_t* host_rows_ = nullptr;
  int64_t host_rows_len_ = 0;
};

}  // namespace ft::cuda
