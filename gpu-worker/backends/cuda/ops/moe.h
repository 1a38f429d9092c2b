#pragma once
// Routed experts of one MoE layer on the GPU (the twin of the expert part of shared/ops +
// shared/engine/local_experts): picks from the router are grouped by expert (dispatch), each
// expert runs the clamped SwiGLU MLP on its rows (grouped kernels, one launch over all experts),
// and each token sums its experts' outputs in ascending expert order (combine). Because the
// expert kernels obey the linear reduction contract (ops/linear.h) and the combine order is
// fixed, a token's result does not depend on which other tokens picked the same experts.
//
// This header holds the pieces every expert format shares (dispatch, combine) and the dense
// fp16 format (experts resident in VRAM as LinearF16: the tiny fixtures, the bf16 benchmark
// model). EXL3 experts (VRAM or mapped host memory) live in exl3/moe.h and use the same
// dispatch and combine.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu-worker/backends/cuda/ops/linear.h"

namespace ft::cuda {

// Router output for n tokens: pick p = t·top_k + k, experts strictly ascending within each token
// (distinct: decode-sized calls of moe_dense_experts take each active expert as one tile of at
// most n rows, which relies on it).
struct MoeRoutes {
  const int32_t* expert = nullptr;  // [n·top_k]
  const float* weight = nullptr;    // [n·top_k], routing weights (already normalised and scaled)
  int64_t n = 0;
  int top_k = 0;
};

// Picks grouped by expert: a counting sort (expert-major, picks ascending inside an expert).
// Device arrays, sized for the largest n the caller will pass (moe_dispatch_alloc_counts).
struct MoeDispatch {
  int32_t* offsets = nullptr;      // [E + 1]: expert e's picks are sorted_pick[offsets[e] … offsets[e+1])
  int32_t* sorted_pick = nullptr;  // [n·top_k]: pick indices p
  int32_t* active = nullptr;       // [min(E, n·top_k)]: experts with ≥ 1 pick, ascending
  int32_t* n_active = nullptr;     // [1]
};
struct MoeDispatchSizes {
  int64_t offsets, sorted_pick, active, n_active;  // element counts (int32)
};
MoeDispatchSizes moe_dispatch_sizes(int64_t max_n, int top_k, int n_experts);

// Fills `d` from the routes (deterministic, no atomics whose order matters). One block; its
// shared memory is 33·n_experts int32 (n_experts ≤ ~1700 on sm_90, ~750 on sm_86). Picks with an
// expert id outside [0, n_experts) are left out of every list (their Y rows are not written).
void moe_dispatch(const MoeRoutes& r, int n_experts, const MoeDispatch& d, cudaStream_t stream);

// out[t] (=, or += with Accumulate) Σ_k weight[t·top_k + k]·Y[t·top_k + k] summed in ascending
// k (= ascending expert), fp32; Y is [n·top_k, D] (one row per pick), out rows ld_out apart.
void moe_combine(const float* Y, const float* weight, int64_t n, int top_k, int64_t D, float* out, int64_t ld_out,
                 LinearStore store, cudaStream_t stream);

// Y[pick[i]] = rows[i] for i < n (rows [n, D], Y rows D floats apart): picks computed elsewhere
// (the CPU expert tier's answers; rows and pick may be mapped pinned host memory) put into the
// pick-ordered expert outputs, so moe_combine adds them in the same fixed order as the GPU's own.
// Rows whose pick is negative are skipped.
void moe_place_rows(const float* rows, const int32_t* pick, int64_t n, int64_t D, float* Y, cudaStream_t stream);

// One expert in VRAM, dense fp16 (gate, up: [I, D]; down: [D, I]), as prepare_linear_f16 lays
// them out. moe_dense_experts uses linear_k_chunk(D, I) / linear_k_chunk(I, D) for the chunks
// (the k_chunk fields must hold those values for a pick to equal a linear_f16 call bit for bit).
struct DenseExpert {
  LinearF16 gate, up, down;
};

// One expert's weights as the copy engine reads them (sm_90 prefill, the sorted-row form of
// moe_dense_experts): gate and up in boxes of 64 rows, down in boxes of 128, all 64 halves wide.
// Kept in device memory next to the DenseExpert table, one entry per expert.
struct DenseExpertMaps {  // 64-byte aligned, as CUtensorMap is
  CUtensorMap gate, up, down;
};
// Encodes `expert`'s maps (host copy of a DenseExpert whose pointers are device memory). False
// where the driver offers no tensor maps or the weights' layout does not allow them; the caller
// then passes no maps and the experts run in the gathered form.
bool moe_dense_expert_maps(const DenseExpert& expert, DenseExpertMaps& out);

// Workspace of moe_dense_experts for up to max_n tokens (bytes); `sorted_rows`: room for the
// sorted-row form too (x's rows in dispatch order: max_n·top_k rows of D halves), which calls
// with maps need.
size_t moe_dense_workspace_bytes(int64_t max_n, int top_k, int64_t D, int64_t I, bool sorted_rows = false);

// Y[p] = down_e(silu(min(gate_e·x_t, limit)) ⊙ clamp(up_e·x_t, −limit, limit)) for every pick
// p = (t, k) with expert e = routes.expert[p] (unweighted: moe_combine applies the weights).
// experts: device array [n_experts] of DenseExpert. x: [n, D] fp32 (ld_x floats apart). Y:
// [n·top_k, D] fp32. Grid sizes depend on n and top_k only (graph-capturable for a fixed n).
// Launches: to_f16_rows(x), the tile list, gate/up + SwiGLU (grouped), to_f16_rows(h), down
// (grouped); the grouped kernels are persistent grids that read the tile count on the device.
// Calls of ≤ 32 tokens (one tile per active expert) read the dispatch directly: no tile list.
// maps (device array [n_experts], optional; the workspace then from moe_dense_workspace_bytes(…,
// true)): prefill-sized calls on an sm_90 device copy x's rows into sorted order and run both
// grouped steps on the copy engine's kernel. Same bits with or without.
void moe_dense_experts(const DenseExpert* experts, const MoeRoutes& r, const MoeDispatch& d, const float* x,
                       int64_t ld_x, int64_t D, int64_t I, float limit, float* Y, void* workspace,
                       cudaStream_t stream, const DenseExpertMaps* maps = nullptr);

// One expert in VRAM for an engine in fp32 precision: fp32 or bf16 weights (gate, up: [I, D];
// down: [D, I]), no bias.
struct DenseExpertF32 {
  LinearF32 gate, up, down;
};

// Workspace of moe_dense_experts_f32 for up to max_n tokens (bytes).
size_t moe_dense_f32_workspace_bytes(int64_t max_n, int top_k, int64_t I);

// moe_dense_experts in fp32 (fp32 activations, fp32 FMAs): the same Y for every pick of
// `r` (experts: device array [n_experts]; picks with an expert outside [0, n_experts) get zero
// rows). Two launches whose grids depend on n and top_k only (graph-capturable); no dispatch
// needed. I ≤ 12288.
void moe_dense_experts_f32(const DenseExpertF32* experts, int n_experts, const MoeRoutes& r, const float* x,
                           int64_t ld_x, int64_t D, int64_t I, float limit, float* Y, void* workspace,
                           cudaStream_t stream);

}  // namespace ft::cuda
