#pragma once
// The per-op-group table the GPU benchmarks print for a profiled step (OpProfile's totals).
#include <algorithm>
#include <cstdio>

#include "gpu-worker/backends/cuda/engine/op_profile.h"

namespace ft::cuda::bench {

inline void print_profile(const char* title, const OpProfile& prof, double step_ms) {
  std::printf("\n### %s\n\n| op group | ms | share |\n|---|---|---|\n", title);
  double sum = 0;
  for (const auto& [name, ms] : prof.totals()) sum += ms;
  for (const auto& [name, ms] : prof.totals())
    std::printf("| %s | %.3f | %.1f%% |\n", name.c_str(), ms, 100.0 * ms / std::max(sum, 1e-9));
  std::printf("| (sum of groups / step wall time) | %.3f / %.3f | |\n", sum, step_ms);
}

}  // namespace ft::cuda::bench
