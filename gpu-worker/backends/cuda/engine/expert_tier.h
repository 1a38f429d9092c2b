#pragma once
// Routed experts of an EXL3 model served from the cpu-expert-worker's shared-memory segment
// (the expert tiers' GPU side, `--tier-mode exact`): the segment is registered with CUDA, so the
// grouped EXL3 kernel reads any expert zero-copy over PCIe from the same bytes the CPU tier
// computes from; the hot experts are copied into VRAM cache slots. Each MoE layer's table
// (Exl3ExpertPtrs per expert) says where each expert is read from — the segment or a slot — and
// the kernel reads the same bytes either way, so results never depend on the cache's state.
//
// Cache upkeep runs between steps from the experts the last step used (copied to the host inside
// the step): CLOCK admissions (gpu-worker/tiers/expert_cache.h), rate-limited per step; a new
// slot's block is copied on a copy stream and the table switches to it only once the copy is
// done (the kernel meanwhile keeps reading the segment), and an evicted expert's entry points
// back at the segment before its slot is overwritten.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "gpu-worker/backends/cuda/core/pinned.h"
#include "gpu-worker/backends/cuda/core/vram.h"
#include "gpu-worker/backends/cuda/exl3/moe.h"
#include "gpu-worker/tiers/expert_cache.h"
#include "shared/ipc/expert_segment.h"
#include "shared/model/config.h"

namespace ft::cuda {

struct ExpertTierOptions {
  uint64_t cache_bytes = 0;   // VRAM for cache slots (0 with auto_cache off: none, every expert zero-copy)
  bool auto_cache = false;    // cache_bytes 0: 90% of what the budget holds beyond keep_free
  uint64_t keep_free = 0;     // budget bytes the cache never takes (sequence states, KV cache, reserve)
  int admit_per_step = 32;    // blocks copied into the cache per step at most (PCIe is shared with zero-copy reads)
  tiers::CachePolicy cache_policy;  // admission gate (on by default)
  // Use counts of a routing-statistics file (tiers::read_routing_stats, [MoE layer][expert]): the
  // cache starts with the most used experts, copied in at load, and the gate's counts start from
  // them. Empty: start empty. warm_source names the file in the log.
  std::vector<std::vector<uint64_t>> warm_counts;
  std::string warm_source;
  int64_t max_tokens = 1;     // rows of the largest step (route buffers)
  bool forced_routes = false; // benchmarks: picks come from set_forced_routes, not the router
  // Prefill staging: steps of at least staging_min_rows rows borrow staging_slots cache slots
  // (half per buffer, two buffers) and copy each MoE layer's experts that are not in VRAM into
  // them one layer ahead on the copy stream, so a chunk reads every such expert over PCIe once
  // (a DMA copy) instead of once per 32-row batch (zero-copy). 0 slots: off.
  int64_t staging_min_rows = 512;
  int staging_slots = -1;     // −1: two MoE layers' worth, at most 3/4 of the cache
};

struct ExpertTierStats {
  tiers::CacheCounters cache;
  int slots = 0, staging_slots = 0;
  uint64_t slot_bytes = 0, pending = 0, copied_blocks = 0;
  uint64_t staged_steps = 0, staged_blocks = 0;  // prefill staging: chunks, blocks copied
  uint64_t resident = 0;  // table entries that point into VRAM now (copies switched in)
};

class GpuExpertTier {
 public:
  // Takes the attached segment; throws ft::Error when its blocks are not EXL3 or registration fails.
  GpuExpertTier(const ModelConfig& c, ipc::ExpertSegment seg, const ExpertTierOptions& o, VramBudget& budget,
                cudaStream_t compute);
  ~GpuExpertTier();
  GpuExpertTier(const GpuExpertTier&) = delete;
  GpuExpertTier& operator=(const GpuExpertTier&) = delete;

  // The grouped kernel's view of model layer `layer` (an MoE layer); its table is device memory.
  const Exl3MoeLayer& layer(int64_t layer) const;

  // Before a step of `rows` rows (eager steps only; decode graphs never stage): a large chunk
  // borrows the staging slots and starts the first two layers' copies; a small step after a
  // staged one gives the slots back and copies their old experts in again.
  void begin_step(int64_t rows, cudaStream_t compute);
  // The view MoE layer `layer` of this step reads (staged or not), waiting on `compute` for its
  // staging copies; then layer_done once its expert kernel is enqueued.
  const Exl3MoeLayer& layer_for_step(int64_t layer, cudaStream_t compute);
  void layer_done(int64_t layer, cudaStream_t compute);
  // Where the step copies model layer `layer`'s picks (n·top_k int32, mapped pinned host memory).
  int32_t* route_buffer(int64_t layer);
  int32_t* route_buffer_device(int64_t layer);  // its device address (mapped)
  void* workspace() const { return ws_.get(); }

  // After a step (synchronised) of `n` rows: switches finished copies in, updates the cache from
  // the picks the step left in the route buffers, schedules copies. `admit`: false for large
  // prefill chunks. Launches only small table writes on `compute`.
  void after_step(int64_t n, bool admit, cudaStream_t compute);

  ExpertTierStats stats() const;
  // The cache's use counts as a routing-statistics file (what warm_counts come from). Not while a step
  // runs.
  void write_stats(const std::string& path) const;

  // For the CPU/zero-copy split (tier_split.h): the MoE index of a model layer (−1: not MoE),
  // whether an expert's table entry points at VRAM now (what this step's kernel reads), whether
  // this step stages, and the segment the CPU tier computes from.
  int moe_index(int64_t layer) const { return moe_of_layer_.at(static_cast<size_t>(layer)); }
  bool in_vram(int moe, int expert) const { return in_vram_[static_cast<size_t>(moe) * E_ + expert] != 0; }
  bool staged() const { return staged_; }
  const ipc::ExpertSegment& segment() const { return seg_; }

  // Benchmarks replaying a routing trace (options.forced_routes): the next steps use these picks
  // instead of the router's — host [n_moe][rows·top_k], ascending within a row; the router's
  // weights stay. forced_routes(layer) is the device copy a step reads (null when not forced).
  void set_forced_routes(const int32_t* host, int64_t rows);
  const int32_t* forced_routes(int64_t layer) const;

 private:
  struct Pending {
    int moe = 0, expert = 0, slot = 0;
    uint64_t seq = 0;  // the slot's copy count when this copy was issued
    cudaEvent_t done = nullptr;
  };
  void write_entry(int moe, int expert, const Exl3ExpertPtrs& e, cudaStream_t s);
  void stage(int moe);  // enqueues MoE layer moe's staging copies into buffer moe % 2
  void copy_in(int moe, int expert, int slot);  // a block into a slot; its entry switches once done
  Exl3ExpertPtrs segment_entry(int moe, int expert) const;
  Exl3ExpertPtrs slot_entry(int moe, int expert, int slot) const;

  const ModelConfig& cfg_;
  // The segment's registration, the copy stream and the events (the destructor, and a
  // constructor that throws part-way).
  void release() noexcept;

  ipc::ExpertSegment seg_;
  void* seg_dev_ = nullptr;  // device alias of the segment
  ExpertTierOptions o_;
  int n_moe_ = 0, E_ = 0, TK_ = 0;
  std::vector<int> moe_of_layer_;  // model layer → MoE index, −1
  std::vector<Exl3MoeLayer> layers_;
  DeviceArray<Exl3ExpertPtrs> table_;  // [n_moe][E]
  PinnedArray<Exl3ExpertPtrs> table_h_;  // pinned mirror (each entry's last written value)
  DeviceArray<uint8_t> slots_mem_, ws_;
  uint64_t slot_bytes_ = 0;
  tiers::ExpertCache cache_;
  PinnedArray<int32_t> routes_h_;  // mapped [n_moe][max_tokens·top_k]
  DeviceArray<int32_t> forced_;  // [n_moe][max_tokens·top_k] when routes are forced
  PinnedArray<int32_t> forced_h_;  // its pinned staging: uploaded on the compute stream, in step order
  cudaStream_t compute_ = nullptr;
  cudaStream_t copy_ = nullptr;
  cudaEvent_t tables_written_ = nullptr;
  std::vector<Pending> pending_;
  // Copies issued into each slot so far. A finished copy switches its entry in only if it is the
  // slot's latest: an older copy of the same expert into the same slot (evicted and admitted
  // again meanwhile) may finish while a copy of another expert into that slot is still queued.
  std::vector<uint64_t> slot_copies_;
  int admit_from_ = 0;  // the MoE layer the next step's admissions start at
  std::vector<cudaEvent_t> free_events_;
  uint64_t copied_ = 0;
  // Prefill staging.
  int staging_slots_ = 0;         // per buffer: staging_slots_ / 2
  bool staged_ = false;           // this step stages
  std::vector<uint8_t> in_vram_;  // [n_moe][E]: the table entry points at a cache slot
  PinnedArray<Exl3ExpertPtrs> stage_h_;         // pinned [n_moe][E]: each layer's staged table
  DeviceArray<Exl3ExpertPtrs> stage_table_;     // [2][E]
  std::vector<Exl3MoeLayer> stage_layers_;      // [n_moe]: views on stage_table_
  cudaEvent_t stage_ready_[2] = {nullptr, nullptr}, stage_free_[2] = {nullptr, nullptr};
  uint64_t staged_steps_ = 0, staged_blocks_ = 0;
};

}  // namespace ft::cuda
