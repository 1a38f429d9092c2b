#pragma once
// Where a MoE layer's cache misses are computed (the expert tiers' cost model): on the GPU
// reading the expert zero-copy from the host segment, or on the exact CPU tier over the shm ring.
// Both read the same bytes and give the same values (partials are added in a fixed order), so
// the split changes only the time: it is chosen to finish the layer soonest from rates measured
// at start-up on this machine.
#include <cstdint>
#include <string>
#include <vector>

namespace ft::tiers {

enum class TierMode { Fast, Exact, Cpu };  // fast: split; exact: GPU zero-copy only; cpu: CPU tier only
TierMode parse_tier_mode(const std::string& s);  // "fast" | "exact" | "cpu"; throws ft::Error otherwise
const char* tier_mode_name(TierMode m);

// Measured costs (µs). A CPU-tier expert costs cpu_expert + cpu_row·(rows − 1); a zero-copy
// expert costs zc_expert + zc_row·(rows − 1) of GPU time; VRAM hits cost hit_expert each. The
// CPU tier adds `handoff` (ring round trip) when it gets any expert at all, and `cpu_streams`
// experts run at once there (its thread pool is split across them).
struct TierRates {
  double cpu_expert = 0, cpu_row = 0;
  double zc_expert = 0, zc_row = 0;
  double hit_expert = 0;
  double handoff = 0;
};

struct Miss {
  int expert = 0;
  int rows = 1;  // tokens of the step routed to it
};

struct LayerSplit {
  std::vector<int> cpu, zero_copy;  // experts, ascending
  double cpu_us = 0, gpu_us = 0;    // each side's predicted time
  double finish_us = 0;             // max of the two
};

// The split of `misses` (any order) minimising the layer's finish time given `hits` VRAM-resident
// experts — exact when the misses fall into few row counts (every decode step), a greedy cut
// otherwise; deterministic (ties: fewer experts on the CPU). Exact/Cpu modes put everything on one side.
LayerSplit split_misses(const TierRates& r, TierMode mode, const std::vector<Miss>& misses, int hits);

}  // namespace ft::tiers
