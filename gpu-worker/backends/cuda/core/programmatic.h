#pragma once
// Whether the engine's small per-step kernels are launched to start early (programmatic
// dependent launch, core/programmatic.cuh): each then begins with chain_start(), so it touches
// nothing before the kernel ahead has finished, and lets its own dependent launch at once. What
// is saved is the launch latency between the ~1,600 dependent kernels of a decode step (H100,
// session 20: batch 1 16.66 → 16.02 ms), with the same bits (the engine's bit, batch-invariance
// and greedy tests; session 21: the whole gpu suite, the expert tier's decode graphs included).
// On by default on sm_90+ (Auto and On); FLASHTIER_CHAIN_PDL=off for A/B.
#include <cuda_runtime.h>

namespace ft::cuda {

bool chain_programmatic();
void set_chain_programmatic(int policy);  // 0 off, 1 auto (= on), 2 on (tests, A/B)

// A stream memory operation (core/stream_memops.h) marks its stream for the calling thread; the
// next launch there through launch_maybe_early starts plainly whatever it asked, and clears the
// mark. So no early start ever hangs on a memory-operation node: only kernel nodes have
// programmatic ports, and a grid that started early must have a kernel ahead of it to wait for.
void note_stream_memop(cudaStream_t s);
bool take_stream_memop(cudaStream_t s);  // whether `s` was marked (the mark is cleared)
// What a launch on `s` that would start early (`want`) may do: start early unless a memory
// operation is ahead there (the mark is taken either way).
inline bool may_start_early(cudaStream_t s, bool want) { return !take_stream_memop(s) && want; }

}  // namespace ft::cuda
