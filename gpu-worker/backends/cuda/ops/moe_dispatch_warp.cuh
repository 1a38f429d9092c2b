#pragma once
// moe_dispatch's result (ops/moe.h) for at most 32 picks, computed by one warp with one pick per
// lane — what the router kernel does after a decode step's routing (router.cu), so small steps
// need no dispatch launch. Every output is an integer count, defined exactly as moe_dispatch
// defines it (offsets[e] = valid picks with a lower expert; a pick's position = its expert's
// offset + the picks of that expert before it; active = experts with a pick, ascending; picks
// with an expert outside [0, E) are left out), so the two give the same arrays. nvcc only.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "gpu-worker/backends/cuda/ops/moe.h"

namespace ft::cuda {

// Called by all 32 lanes of one warp; expert[0 … picks) is visible to it (picks ≤ 32).
__device__ __forceinline__ void dispatch_picks_warp(const int32_t* expert, int picks, int n_experts,
                                                    const MoeDispatch& d, int lane) {
  const int32_t raw = lane < picks ? expert[lane] : -1;
  const bool ok = raw >= 0 && raw < n_experts;
  const int32_t e = ok ? raw : INT_MAX;  // left out: never below a valid expert
  int below = 0, before = 0;             // valid picks with a lower expert; same expert, lower pick
  bool first = ok;                       // the first pick of its expert
  for (int q = 0; q < 32; ++q) {
    const int32_t eq = __shfl_sync(0xffffffffu, e, q);
    below += eq < e ? 1 : 0;
    if (q < lane && eq == e) ++before, first = false;
  }
  const unsigned firsts = __ballot_sync(0xffffffffu, first);
  int distinct_below = 0;  // experts with a pick below e
  for (int q = 0; q < 32; ++q) {
    const int32_t eq = __shfl_sync(0xffffffffu, e, q);
    distinct_below += ((firsts >> q) & 1u) && eq < e ? 1 : 0;
  }
  if (ok) d.sorted_pick[below + before] = lane;
  if (first) d.active[distinct_below] = e;
  if (lane == 0) *d.n_active = __popc(firsts);
  // Whole-warp rounds (every lane takes part in every shuffle): offsets[x] for x = x0 + lane.
  for (int x0 = 0; x0 <= n_experts; x0 += 32) {
    const int x = x0 + lane;
    int count = 0;
    for (int q = 0; q < 32; ++q) count += __shfl_sync(0xffffffffu, e, q) < x ? 1 : 0;
    if (x <= n_experts) d.offsets[x] = count;
  }
}

}  // namespace ft::cuda
