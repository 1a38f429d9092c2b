#include "gpu-worker/tiers/split_rates.h"

#include <algorithm>

namespace ft::tiers {

namespace {
constexpr double kMinUs = 1e-3;  // rates stay positive, so a side is never free
constexpr double kMaxStep = 4.0;
}  // namespace

SplitRates::SplitRates(const TierRates& start, double alpha) : r_(start), alpha_(alpha) {
  r_.cpu_expert = std::max(r_.cpu_expert, kMinUs);
  r_.zc_expert = std::max(r_.zc_expert, kMinUs);
  r_.hit_expert = std::max(r_.hit_expert, 0.0);
  cpu_rho_ = std::max(0.0, r_.cpu_row) / r_.cpu_expert;
  zc_rho_ = std::max(0.0, r_.zc_row) / r_.zc_expert;
}

double SplitRates::follow(double current, double sample) const {
  const double lo = current / kMaxStep, hi = current * kMaxStep;
  const double s = std::clamp(sample, std::max(lo, kMinUs), std::max(hi, kMinUs));
  return (1 - alpha_) * current + alpha_ * s;
}

void SplitRates::observe_cpu(int experts, int extra_rows, double us) {
  if (frozen_ || experts <= 0 || !(us >= 0)) return;
  ++n_obs_;
  const double units = experts + cpu_rho_ * extra_rows;
  r_.cpu_expert = follow(r_.cpu_expert, (us - r_.handoff) / units);
  r_.cpu_row = cpu_rho_ * r_.cpu_expert;
}

void SplitRates::observe_gpu(int hits, int zero_copy, int extra_rows, double us) {
  if (frozen_ || hits + zero_copy <= 0 || !(us >= 0)) return;
  ++n_obs_;
  if (zero_copy > 0) {
    const double units = zero_copy + zc_rho_ * extra_rows;
    r_.zc_expert = follow(r_.zc_expert, (us - r_.hit_expert * hits) / units);
    r_.zc_row = zc_rho_ * r_.zc_expert;
  } else {
    r_.hit_expert = r_.hit_expert > 0 ? follow(r_.hit_expert, us / hits) : us / hits;
  }
}

}  // namespace ft::tiers
