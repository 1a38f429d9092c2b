#include "shared/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ft {

void apply_penalties(std::span<float> logits, const TokenHistory& h, const SamplingConfig& c) {
  const int64_t V = static_cast<int64_t>(logits.size());
  if (c.repetition_penalty > 0.0f && c.repetition_penalty != 1.0f) {
    auto penalise = [&](int32_t t) {
      if (t < 0 || t >= V) return;
      float& l = logits[t];
      l = l > 0.0f ? l / c.repetition_penalty : l * c.repetition_penalty;
    };
    for (const auto& [t, n] : h.prompt) penalise(t);
    for (const auto& [t, n] : h.generated)
      if (!h.prompt.count(t)) penalise(t);
  }
  if (c.presence_penalty != 0.0f || c.frequency_penalty != 0.0f)
    for (const auto& [t, n] : h.generated)
      if (t >= 0 && t < V) logits[t] -= c.frequency_penalty * static_cast<float>(n) + c.presence_penalty;
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(logits.size()); ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

int32_t sample_from(std::span<float> logits, const TokenHistory& h, const SamplingConfig& c, double u01) {
  apply_penalties(logits, h, c);
  if (c.temperature <= 0.0f) return argmax(logits);
  const int32_t V = static_cast<int32_t>(logits.size());
  // Candidates sorted by logit (ties: lower id first) so every filter and the draw walk one order.
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  int32_t keep = V;
  if (c.top_k > 0 && c.top_k < V) keep = c.top_k;
  auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), better);
  order.resize(keep);
  const float inv_t = 1.0f / c.temperature;
  const double mx = static_cast<double>(logits[order[0]]) * inv_t;
  std::vector<double> p(keep);
  double sum = 0.0;
  for (int32_t i = 0; i < keep; ++i) sum += (p[i] = std::exp(static_cast<double>(logits[order[i]]) * inv_t - mx));
  for (double& x : p) x /= sum;
  if (c.min_p > 0.0f) {
    const double floor = c.min_p * p[0];
    int32_t n = 1;
    while (n < keep && p[n] >= floor) ++n;
    keep = n;
  }
  if (c.top_p > 0.0f && c.top_p < 1.0f) {
    double cum = 0.0;
    int32_t n = 0;
    while (n < keep) {
      cum += p[n++];
      if (cum >= c.top_p) break;
    }
    keep = n;
  }
  double total = 0.0;
  for (int32_t i = 0; i < keep; ++i) total += p[i];
  const double u = u01 * total;
  double cum = 0.0;
  for (int32_t i = 0; i < keep; ++i) {
    cum += p[i];
    if (u < cum) return order[i];
  }
  return order[keep - 1];
}

Sampler::Sampler(const SamplingConfig& c) : c_(c), rng_(c.seed ? *c.seed : std::random_device{}()) {}

int32_t Sampler::sample(std::span<float> logits, const TokenHistory& h) {
  // A 53-bit uniform from the sequence's own stream; greedy tokens draw none, as before the
  // draw was separable, so a seeded stream gives the same generation it always did.
  const double u01 = c_.temperature <= 0.0f ? 0.0 : std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  return sample_from(logits, h, c_, u01);
}

}  // namespace ft
