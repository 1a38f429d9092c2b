#include "gpu-worker/tiers/routing_trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>

#include "shared/core/error.h"

namespace ft::tiers {

SyntheticTrace::SyntheticTrace(const TraceShape& shape, const SyntheticTraceOptions& o)
    : shape_(shape), o_(o), rng_(o.seed) {
  if (shape.top_k < 1 || shape.top_k > shape.experts) throw Error("routing trace: top_k must be in [1, experts]");
  perm_.resize(static_cast<size_t>(shape.layers));
  std::mt19937_64 popularity(o.popularity_seed);
  for (auto& p : perm_) {
    p.resize(static_cast<size_t>(shape.experts));
    std::iota(p.begin(), p.end(), 0);
    if (o.popularity_seed) std::shuffle(p.begin(), p.end(), popularity);
    else std::shuffle(p.begin(), p.end(), rng_);
  }
  cdf_.resize(static_cast<size_t>(shape.experts));
  double acc = 0;
  for (int r = 0; r < shape.experts; ++r) cdf_[r] = (acc += 1.0 / std::pow(r + 1.0, o.zipf_s));
  for (double& c : cdf_) c /= acc;
}

TokenRoute SyntheticTrace::next() {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  TokenRoute t(static_cast<size_t>(shape_.layers));
  for (int l = 0; l < shape_.layers; ++l) {
    std::vector<int>& pick = t[l];
    if (!prev_.empty())
      for (int e : prev_[l])
        if (u(rng_) < o_.locality) pick.push_back(e);
    while (static_cast<int>(pick.size()) < shape_.top_k) {
      const int rank = static_cast<int>(std::lower_bound(cdf_.begin(), cdf_.end(), u(rng_)) - cdf_.begin());
      const int e = perm_[l][std::min(rank, shape_.experts - 1)];
      if (std::find(pick.begin(), pick.end(), e) == pick.end()) pick.push_back(e);
    }
    std::sort(pick.begin(), pick.end());
  }
  prev_ = t;
  return t;
}

void write_trace(const std::string& path, const TraceShape& shape, const std::vector<TokenRoute>& tokens) {
  std::ofstream f(path);
  if (!f) throw Error(path + ": cannot write the routing trace");
  f << "flashtier-routing-trace 1 " << shape.layers << " " << shape.experts << " " << shape.top_k << "\n";
  for (const TokenRoute& t : tokens) {
    bool first = true;
    for (const auto& layer : t)
      for (int e : layer) {
        f << (first ? "" : " ") << e;
        first = false;
      }
    f << "\n";
  }
}

std::vector<TokenRoute> read_trace(const std::string& path, TraceShape* shape) {
  std::ifstream f(path);
  if (!f) throw Error(path + ": cannot open the routing trace");
  std::string magic;
  int version = 0;
  TraceShape s;
  std::string line;
  if (!std::getline(f, line)) throw Error(path + ": empty routing trace");
  {
    std::istringstream h(line);
    if (!(h >> magic >> version >> s.layers >> s.experts >> s.top_k) || magic != "flashtier-routing-trace" ||
        version != 1 || s.layers < 1 || s.experts < 1 || s.top_k < 1 || s.top_k > s.experts)
      throw Error(path + ":1: expected 'flashtier-routing-trace 1 <layers> <experts> <top_k>'");
  }
  std::vector<TokenRoute> out;
  int lineno = 1;
  while (std::getline(f, line)) {
    ++lineno;
    if (line.empty()) continue;
    std::istringstream ss(line);
    TokenRoute t(static_cast<size_t>(s.layers));
    for (int l = 0; l < s.layers; ++l)
      for (int k = 0; k < s.top_k; ++k) {
        int e = -1;
        if (!(ss >> e) || e < 0 || e >= s.experts)
          throw Error(path + ":" + std::to_string(lineno) + ": expected " + std::to_string(s.layers * s.top_k) +
                      " expert ids in [0, " + std::to_string(s.experts) + ")");
        if (!t[l].empty() && e <= t[l].back())
          throw Error(path + ":" + std::to_string(lineno) + ": layer " + std::to_string(l) +
                      "'s experts must be distinct and ascending");
        t[l].push_back(e);
      }
    out.push_back(std::move(t));
  }
  if (shape) *shape = s;
  return out;
}

}  // namespace ft::tiers
