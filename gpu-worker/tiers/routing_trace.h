#pragma once
// Routing traces for the expert-tier benchmark: which experts each token picks per MoE layer.
// A synthetic generator with the two properties that decide a cache's hit rate — per-layer
// popularity skew (a Zipf law over a per-layer random permutation of the experts) and temporal
// locality (a token re-picks each of the previous token's experts in that layer with a given
// probability) — and a text format to record and replay real traces.
//
// File format (text): a header line `flashtier-routing-trace 1 <layers> <experts> <top_k>`, then
// one line per token: layers × top_k expert ids, layer by layer, ascending within a layer.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace ft::tiers {

struct TraceShape {
  int layers = 42, experts = 288, top_k = 8;
};

struct SyntheticTraceOptions {
  double zipf_s = 0.8;     // popularity skew: P(rank r) ∝ 1 / (r + 1)^s; 0: uniform
  double locality = 0.3;   // probability each of the previous token's picks is kept
  uint64_t seed = 1;
  // Non-zero: the popularity ranking comes from this seed instead of `seed`, so several streams
  // (one per sequence, each with its own `seed`) share one model's popular experts.
  uint64_t popularity_seed = 0;
};

using TokenRoute = std::vector<std::vector<int>>;  // [layer][k], ascending

class SyntheticTrace {
 public:
  SyntheticTrace(const TraceShape& shape, const SyntheticTraceOptions& o);
  TokenRoute next();  // the next token's picks
  const TraceShape& shape() const { return shape_; }

 private:
  TraceShape shape_;
  SyntheticTraceOptions o_;
  std::mt19937_64 rng_;
  std::vector<std::vector<int>> perm_;  // per layer: popularity rank → expert
  std::vector<double> cdf_;             // over ranks
  TokenRoute prev_;
};

void write_trace(const std::string& path, const TraceShape& shape, const std::vector<TokenRoute>& tokens);
// Throws ft::Error naming the file and line for a malformed trace.
std::vector<TokenRoute> read_trace(const std::string& path, TraceShape* shape);

}  // namespace ft::tiers
