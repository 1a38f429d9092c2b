#include "gpu-worker/tiers/split_model.h"

#include <algorithm>

#include "shared/core/error.h"

namespace ft::tiers {

TierMode parse_tier_mode(const std::string& s) {
  if (s == "fast") return TierMode::Fast;
  if (s == "exact") return TierMode::Exact;
  if (s == "cpu") return TierMode::Cpu;
  throw Error("unknown tier mode '" + s + "' (expected fast, exact or cpu)");
}

const char* tier_mode_name(TierMode m) {
  switch (m) {
    case TierMode::Fast: return "fast";
    case TierMode::Exact: return "exact";
    case TierMode::Cpu: return "cpu";
  }
  return "?";
}

LayerSplit split_misses(const TierRates& r, TierMode mode, const std::vector<Miss>& misses, int hits) {
  // Experts with the same row count cost the same on either side, so a split is a count per row
  // class. Decode steps have few classes (rows 1 … batch): every combination of counts is tried
  // (the exact optimum); long prefills with many classes fall back to a greedy cut of the misses
  // sorted by rows (the GPU's cost barely grows with rows, the CPU's does).
  std::vector<Miss> m = misses;
  std::sort(m.begin(), m.end(), [](const Miss& a, const Miss& b) {
    return a.rows > b.rows || (a.rows == b.rows && a.expert < b.expert);
  });
  struct Class {
    int rows, count, first;  // first index in m
  };
  std::vector<Class> cls;
  for (int i = 0; i < static_cast<int>(m.size()); ++i)
    if (cls.empty() || cls.back().rows != m[i].rows) cls.push_back({m[i].rows, 1, i});
    else ++cls.back().count;
  const double base = hits * r.hit_expert;
  auto zc = [&](int rows) { return r.zc_expert + r.zc_row * (rows - 1); };
  auto cpu = [&](int rows) { return r.cpu_expert + r.cpu_row * (rows - 1); };
  // to_cpu[c]: how many of class c go to the CPU tier.
  std::vector<int> best(cls.size(), 0), cur(cls.size(), 0);
  auto eval = [&](const std::vector<int>& k, double& g, double& c) {
    g = base;
    c = 0;
    int on_cpu = 0;
    for (size_t i = 0; i < cls.size(); ++i) {
      g += (cls[i].count - k[i]) * zc(cls[i].rows);
      c += k[i] * cpu(cls[i].rows);
      on_cpu += k[i];
    }
    if (on_cpu > 0) c += r.handoff;
    return on_cpu;
  };
  if (mode == TierMode::Cpu) {
    for (size_t i = 0; i < cls.size(); ++i) best[i] = cls[i].count;
  } else if (mode == TierMode::Fast) {
    double combos = 1;
    for (const Class& c : cls) combos *= c.count + 1;
    double best_f = 0;
    int best_cpu = 0;
    bool have = false;
    auto consider = [&](const std::vector<int>& k) {
      double g, c;
      const int n_cpu = eval(k, g, c);
      const double f = std::max(g, c);
      if (!have || f < best_f || (f == best_f && n_cpu < best_cpu)) {
        best = k, best_f = f, best_cpu = n_cpu, have = true;
      }
    };
    if (combos <= 1e5) {
      // Odometer over every count vector.
      while (true) {
        consider(cur);
        size_t i = 0;
        while (i < cls.size() && cur[i] == cls[i].count) cur[i++] = 0;
        if (i == cls.size()) break;
        ++cur[i];
      }
    } else {
      // Greedy cut: the last j misses in row order go to the CPU, for every j.
      const int n = static_cast<int>(m.size());
      for (int j = 0; j <= n; ++j) {
        std::vector<int> k(cls.size(), 0);
        int left = j;
        for (size_t i = cls.size(); i-- > 0 && left > 0;) {
          k[i] = std::min(left, cls[i].count);
          left -= k[i];
        }
        consider(k);
      }
    }
  }
  LayerSplit s;
  double g, c;
  eval(best, g, c);
  s.gpu_us = g;
  s.cpu_us = c;
  s.finish_us = std::max(g, c);
  // Within a class the lower expert ids go to the CPU (any choice costs the same).
  for (size_t i = 0; i < cls.size(); ++i)
    for (int j = 0; j < cls[i].count; ++j) {
      const int e = m[cls[i].first + j].expert;
      (j < best[i] ? s.cpu : s.zero_copy).push_back(e);
    }
  std::sort(s.zero_copy.begin(), s.zero_copy.end());
  std::sort(s.cpu.begin(), s.cpu.end());
  return s;
}

}  // namespace ft::tiers
