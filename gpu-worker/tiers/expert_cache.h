#pragma once
// The VRAM expert cache's policy (no CUDA here: the engine owns the arena and copies blocks in):
// a fixed number of slots, each able to hold one routed expert's block, filled and replaced by
// CLOCK with per-step pinning — an expert a step uses is pinned until the step ends, so a step
// never evicts what it is about to read — and admission that can be switched off for large
// prefill chunks (they touch almost every expert once; admitting them would flush the hot set).
// Counts hits, misses and evictions per MoE layer for the metrics.
//
// Admission is frequency-gated (TinyLFU's filter on CLOCK's victim): every lookup counts a use
// of (layer, expert), the counts halve every `age_every` lookups (a sliding estimate of recent
// popularity), and a miss takes the victim's slot only if it was used at least as often as the
// victim. Without the gate, CLOCK under a per-step copy budget fills the cache with whichever
// misses came last, and a one-off pick evicts a popular expert; with it, the cache converges to
// the popular set (tools/tier-sim: docs/perf.md "The cache's admission gate"), and fewer copies
// compete with the zero-copy reads for PCIe.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ft::tiers {

struct CacheCounters {
  uint64_t hits = 0, misses = 0, admissions = 0, evictions = 0;
};

struct CachePolicy {
  bool frequency_gate = true;  // false: plain CLOCK over every slot (every miss may evict)
  int age_every = 0;           // lookups between halvings of the use counts; 0: 64 × slots
  // Share of the slots in a recency window (W-TinyLFU): misses enter it ungated, and its victims
  // compete with the main region's. 0 (default): every miss faces the gate. A window helps
  // traffic whose hits come from recency rather than popularity, at a copy per admitted miss
  // (docs/perf.md "The cache's admission gate").
  double window = 0.0;
};

class ExpertCache {
 public:
  // `layers` MoE layers (dense indices 0 … layers−1) of `experts` experts each, `slots` slots.
  ExpertCache(int layers, int experts, int slots, CachePolicy policy = {});

  int slots() const { return static_cast<int>(slot_owner_.size()); }
  int layers() const { return layers_; }
  int experts() const { return experts_; }

  // One step: begin, then per layer the experts it uses (lookup), then end. `admit`: misses of
  // this step may take slots (decode steps); false for large prefill chunks.
  void begin_step(bool admit);
  // The slot holding (layer, expert), pinned for the rest of the step; nullopt on a miss.
  std::optional<int> lookup(int layer, int expert);
  // After a miss: a slot for (layer, expert), chosen by CLOCK among unpinned slots, pinned;
  // `evicted` receives what the slot held ((-1, -1) when it was empty). nullopt when admission is
  // off this step or every slot is pinned, or when the gate keeps CLOCK's victim (its use count
  // above the candidate's): then *declined is set, and other misses may still be admitted. The
  // caller copies the block in before reading it.
  std::optional<int> admit(int layer, int expert, std::pair<int, int>* evicted = nullptr, bool* declined = nullptr);
  // Recent uses of (layer, expert) as the gate counts them.
  uint32_t uses(int layer, int expert) const { return uses_[key(layer, expert)]; }
  // Every lookup since construction, [layers][experts], never aged: a routing-statistics file's
  // counts (write_routing_stats) for a later warm start.
  std::vector<std::vector<uint64_t>> use_counts() const;
  void end_step();

  // Warm start: fills empty slots with the most used experts first (counts [layers][experts],
  // e.g. a routing-statistics file); returns the (slot, layer, expert) placements to copy in. The
  // counts also seed the gate's use counts, scaled to half an ageing window in all, so the
  // placed experts are not evicted by the first misses and real traffic takes over as they age.
  std::vector<std::pair<int, std::pair<int, int>>> warm_start(const std::vector<std::vector<uint64_t>>& counts);

  // Prefill staging borrows the last `n` slots (clamped to the cache): their experts leave the
  // cache (returned, so the caller points them back at the host copy) and no admission uses the
  // slots until give_back, which empties them and hands back the experts that were evicted, so
  // the caller can copy them in again and place them with restore(). Lending while lent first
  // gives back nothing: the lent range stays as it is.
  std::vector<std::pair<int, int>> lend(int n);
  std::vector<std::pair<int, int>> give_back();
  int lent() const { return slots() - usable_; }
  int first_lent_slot() const { return usable_; }
  // Places (layer, expert) in empty usable slot `slot` (a given-back expert copied in again).
  // False when the slot is taken or lent, or the expert is already cached.
  bool restore(int slot, int layer, int expert);

  std::optional<int> slot_of(int layer, int expert) const;
  std::pair<int, int> owner(int slot) const { return slot_owner_[slot]; }
  const CacheCounters& counters(int layer) const { return counters_[layer]; }
  CacheCounters totals() const;
  uint64_t declined() const { return declined_; }

 private:
  int key(int layer, int expert) const { return layer * experts_ + expert; }
  int layers_, experts_;
  std::vector<int> where_;                        // [layer·E + expert] → slot, −1 when absent
  std::vector<std::pair<int, int>> slot_owner_;   // slot → (layer, expert), (−1, −1) when empty
  std::vector<uint8_t> ref_;                      // CLOCK reference bits
  std::vector<uint32_t> pinned_at_;               // step number a slot was pinned in
  uint32_t step_ = 0;
  bool admit_ = true;
  int hand_ = 0;
  int usable_ = 0;                                // slots [usable_, slots) are lent
  std::vector<std::pair<int, int>> lent_owners_;  // what the lent slots held
  std::vector<CacheCounters> counters_;
  CachePolicy policy_;
  std::vector<uint32_t> uses_;  // [layer·E + expert]: lookups since the last halvings
  std::vector<uint64_t> total_uses_;  // [layer·E + expert]: every lookup
  std::vector<uint8_t> in_window_;  // per slot: in the recency window (else the main region)
  int window_slots_ = 0;
  int window_hand_ = 0;
  int clock_victim(bool window);
  void place(int slot, int layer, int expert, std::pair<int, int>* evicted);
  uint64_t lookups_ = 0;        // since the last halving
  uint64_t declined_ = 0;
};

// One step's cache upkeep between begin_step and end_step: every expert each MoE layer used
// (`used[layer]`, ascending and unique) is looked up first — hits pin their slots, so no
// admission of this step evicts an expert the step used — then misses are admitted one per
// layer in turn, starting at layer `*first_layer` and wrapping, while `budget` lasts (a miss
// the gate declines costs no budget). When the
// misses outnumber the budget, visiting layers in a fixed order would give the first layers
// every admission and the last ones none; the caller keeps *first_layer, which is left at the
// layer after the last one served, so successive steps go round all layers.
struct Admission {
  int layer = 0, expert = 0, slot = 0;
  std::pair<int, int> evicted{-1, -1};  // what the slot held
};
std::vector<Admission> admit_step(ExpertCache& cache, const std::vector<std::vector<int32_t>>& used, int budget,
                                  int* first_layer);

// A routing-statistics file: one line per MoE layer, `layer e0 e1 … e(E−1)` with use counts.
std::vector<std::vector<uint64_t>> read_routing_stats(const std::string& path, int layers, int experts);
void write_routing_stats(const std::string& path, const std::vector<std::vector<uint64_t>>& counts);

}  // namespace ft::tiers
