#pragma once
// The Hopper (sm_90a) form of the tiled fp16 linear (linear_f16_wgmma.cuh), compiled in its own
// translation unit for sm_90a only: the launcher asks linear_wgmma() and falls back to the
// mma.sync kernel on every other device. Same bits either way (the reduction contract).
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ft::cuda {

struct DenseProblem;
struct GateUpProblem;
struct DownProblem;
struct GateUpSortedProblem;
struct DownSortedProblem;

namespace lin {
// Whether tiled linears run on wgmma here: a compute capability 9.0 device, an sm_90a image of
// the kernel in this build, and policy on (FLASHTIER_LINEAR_WGMMA=off turns it off;
// set_linear_wgmma for tests and A/B: 0 off, else on).
bool linear_wgmma();
void set_linear_wgmma(int policy);
// Whether the dense problem's wgmma kernel takes its stages from the copy engine (tensor maps,
// the default) where the operands allow it, or from per-thread cp.async copies
// (FLASHTIER_LINEAR_TMA=off; set_linear_tma: 0 off, else on). Same bits either way.
void set_linear_tma(int policy);
// Whether the sorted-row grouped problems can run here (linear_wgmma(), the copy engine's form
// on, its shared memory available).
bool grouped_sorted_wgmma();
}  // namespace lin

// Launches the dense problem (rows_per_item, block_n, … filled here) on the wgmma kernel.
void launch_dense_wgmma(const DenseProblem& pr, int64_t batch, cudaStream_t stream);
// The dense MoE's grouped problems (moe_dense_problems.cuh) on a persistent grid of at most
// tiles_bound × output blocks, tiles of ≤ 128 rows.
void launch_grouped_wgmma(const GateUpProblem& pr, int64_t tiles_bound, cudaStream_t stream);
void launch_grouped_wgmma(const DownProblem& pr, int64_t tiles_bound, cudaStream_t stream);
// The same problems with rows in sorted order (moe_dense_problems.cuh, SortedRows) on the copy
// engine's kernel: `rows` is the map of their A operand (xh or hh in sorted order, tiles of 128
// rows × 64 halves); each expert's weights come through pr.maps. Only where
// grouped_sorted_wgmma().
void launch_grouped_sorted_wgmma(const GateUpSortedProblem& pr, int64_t tiles_bound, const CUtensorMap& rows,
                                 cudaStream_t stream);
void launch_grouped_sorted_wgmma(const DownSortedProblem& pr, int64_t tiles_bound, const CUtensorMap& rows,
                                 cudaStream_t stream);

}  // namespace ft::cuda
