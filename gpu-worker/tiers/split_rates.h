#pragma once
// The split's cost model, kept calibrated while serving: start-up measurements give the first
// TierRates; every split layer then reports what each side really took, and the per-expert rates
// follow it as exponential moving averages (recent layers count most):
//   CPU tier:  cpu_expert ← (t − handoff) / (experts + ρ·Σ(rows − 1)),  ρ = cpu_row / cpu_expert
//   GPU:       zc_expert  ← (t − hit_expert·hits) / (zero_copy + ρ'·Σ(rows − 1)), layers with
//              zero-copy work; hit_expert ← t / hits, layers with hits only
// The hand-off and the per-row ratios stay at their start-up values: a layer's two numbers cannot
// tell a fixed cost from a per-expert one when the expert count barely varies (every decode step
// of one batch size), and a fit that tried drifted far on such data. One sample moves a rate by
// at most a factor 4 (a stalled call, a page-fault storm), so an outlier cannot lock a side out.
#include "gpu-worker/tiers/split_model.h"

namespace ft::tiers {

class SplitRates {
 public:
  // alpha: weight of the newest observation (0.1: about the last ten layers matter).
  explicit SplitRates(const TierRates& start, double alpha = 0.1);

  const TierRates& rates() const { return r_; }
  // Frozen rates (tests, benchmarks that force a split) ignore observations.
  void freeze(bool on) { frozen_ = on; }
  bool frozen() const { return frozen_; }

  void observe_cpu(int experts, int extra_rows, double us);
  void observe_gpu(int hits, int zero_copy, int extra_rows, double us);
  uint64_t observations() const { return n_obs_; }

 private:
  double follow(double current, double sample) const;

  TierRates r_;
  double alpha_, cpu_rho_ = 0, zc_rho_ = 0;
  bool frozen_ = false;
  uint64_t n_obs_ = 0;
};

}  // namespace ft::tiers
