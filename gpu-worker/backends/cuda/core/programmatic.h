#pragma once
// Whether the engine's small per-step kernels are launched to start early (programmatic
// dependent launch, core/programmatic.cuh): each then begins with chain_start(), so it touches
// nothing before the kernel ahead has finished, and lets its own dependent launch at once. What
// is saved is the launch latency between the ~1,600 dependent kernels of a decode step (H100,
// session 20: batch 1 16.66 → 16.02 ms, the same bits in the engine's bit, batch-invariance and
// greedy tests). Still off by default: the expert tier's decode graphs, where chained kernels
// follow stream-memory-operation nodes, have not run with it yet. FLASHTIER_CHAIN_PDL=on turns
// it on; sm_90+ only.
#include <cstdint>

namespace ft::cuda {

bool chain_programmatic();
void set_chain_programmatic(int policy);  // 0 off, 1 auto (= off for now), 2 on (tests, A/B)

}  // namespace ft::cuda
