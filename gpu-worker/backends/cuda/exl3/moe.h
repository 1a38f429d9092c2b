#pragma once
// Grouped EXL3 routed experts of one MoE layer on the GPU — the twin of the cpu-expert-worker's
// ExpertRunner (shared/exl3/expert_forward.h), reading the same expert blocks
// (shared/exl3/expert_block.h) from VRAM or ZERO-COPY from mapped host memory, any mix:
//   Y[p] = down_e( silu(min(gate_e·x_t, L)) ⊙ clamp(up_e·x_t, −L, L) )   for every pick p = (t, k),
// unweighted, one row per pick (moe_combine in ops/moe.h applies the routing weights in
// ascending expert order). Each projection is exactly the EXL3 linear of exl3_linear.h (same
// input transform, same reduction contract and KC, same output transform), so a pick's row has
// the same bits as three separate exl3 linears plus the SwiGLU kernel here, and the same bits
// wherever its expert's bytes live.
//
// Per call: 4–6 launches (gate/up input transforms; gate/up matmuls; SwiGLU + down input
// transform; down matmul; the matmuls in two forms where a step crowds some experts: 32-row
// batches, and 128-row tiles for experts with more than 32 picks), grids sized from n and top_k
// only (graph-capturable for a fixed n).
// Up to 64 picks the matmuls also split K over CTAs (a batch-1 layer's 8 experts are too few
// items otherwise); that changes which CTA adds the chunk sums, never their order or the bits.
// Trellis bytes are read once per (expert, 32-row batch), or per 128-row tile in the prefill
// form: 16-byte cp.async, 512 contiguous bytes per warp instruction, ~6–8 KB in flight per warp.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpu-worker/backends/cuda/ops/moe.h"
#include "shared/exl3/codebook.h"

namespace ft::cuda {

// Device-visible addresses of one expert's projections inside its block (gate, up, down).
struct Exl3ExpertPtrs {
  const uint32_t* trellis[3] = {nullptr, nullptr, nullptr};  // packed (packed.h)
  const __half* suh[3] = {nullptr, nullptr, nullptr};
  const __half* svh[3] = {nullptr, nullptr, nullptr};
};

// One MoE layer: geometry shared by all its experts, and the device table [n_experts] of where
// each expert lives (entries may be rewritten between steps, e.g. when an expert enters a VRAM
// cache slot: cudaMemcpyAsync of one Exl3ExpertPtrs).
struct Exl3MoeLayer {
  int64_t hidden = 0, inter = 0;  // logical D and moe_intermediate I
  int K[3] = {0, 0, 0};
  ft::exl3::Codebook codebook[3] = {ft::exl3::Codebook::Mul1, ft::exl3::Codebook::Mul1, ft::exl3::Codebook::Mul1};
  int n_experts = 0;
  const Exl3ExpertPtrs* table = nullptr;  // device array [n_experts]
  // Batches of at most this many picks split K over CTAs (−1: the default, 64; larger values
  // are capped at it). Any value gives the same bits; it only moves work between CTAs.
  int split_picks = -1;
  // In steps that do not split K, experts with at least this many picks run the prefill form (a
  // 128-row tile per decoded weight, exl3_moe_gemm_kernel) and the others 32-row batches (−1:
  // the default: 33, more than one batch, or FLASHTIER_EXL3_MOE_GEMM_FROM; 1: every expert). Any
  // value gives the same bits.
  int gemm_min_picks = -1;
};

// Geometry of a layer from one expert block (host view); throws ft::Error for a bad block.
Exl3MoeLayer exl3_moe_geometry(const uint8_t* host_block, int n_experts);
// Throws ft::Error naming the difference when `host_block` does not match the layer (widths, K
// or codebook of a projection: they are kernel template parameters, uniform within a layer).
void exl3_moe_check_block(const Exl3MoeLayer& layer, const uint8_t* host_block, int expert);
// Table entry for a block whose bytes are at `device_block` as the GPU sees them (a VRAM copy,
// or the device alias of mapped host memory); the header is read from `host_block`.
Exl3ExpertPtrs exl3_expert_ptrs(const uint8_t* host_block, const void* device_block);

// Zero-copy access to host memory holding expert blocks (e.g. the cpu-expert-worker's segment):
// cudaHostRegister(Mapped | ReadOnly, falling back to Mapped where ReadOnly is refused) and the
// device alias. `bytes` and `host` should be page-aligned. Throws ft::Error naming the failure.
void* exl3_map_host_experts(void* host, size_t bytes);
void exl3_unmap_host_experts(void* host);

// Scratch for up to max_n tokens (bytes). Zero it once before its first use
// (exl3_moe_workspace_init); the kernels leave their counters at zero again, so it can then be
// reused by every layer on the same stream.
size_t exl3_moe_workspace_bytes(const Exl3MoeLayer& layer, int64_t max_n, int top_k);
// The bytes its split-K counters span at the start of the workspace: the same for every step
// size, so a larger step never finds its counters on a smaller one's partial sums.
size_t exl3_moe_workspace_counters_end(const Exl3MoeLayer& layer, int64_t n, int top_k);
void exl3_moe_workspace_init(void* workspace, size_t bytes, cudaStream_t stream);

// Y[p][0 … D) for every pick p < n·top_k (rows D floats apart); x: [n, D] fp32, rows ld_x apart.
// d: the dispatch of r (ops/moe.h moe_dispatch, or any equal counting sort). limit: swiglu_limit.
void exl3_moe_experts(const Exl3MoeLayer& layer, const MoeRoutes& r, const MoeDispatch& d, const float* x,
                      int64_t ld_x, float limit, float* Y, void* workspace, cudaStream_t stream);

// Whether the current device holds the wide shape of the prefill form for a K-bit projection
// (Exl3Wide in exl3_linear.h: wide unless Off; a projection that does not fit runs narrow).
bool exl3_moe_wide_prefill_fits(int K);

// The SwiGLU + down-projection input transform alone (what exl3_moe_experts runs between its
// matmuls), for tests that rebuild an expert from separate linears: rows of g and u ([rows][ld]
// fp32, ld ≥ inter_p), suh of the down projection [inter_p] → permuted fp16 xh [rows][inter_p]
// and row_scale [rows], exactly as inside exl3_moe_experts.
void exl3_swiglu_input_transform(const float* g, const float* u, int64_t ld, int64_t rows, int64_t inter_p,
                                 float limit, const __half* suh, __half* xh, float* row_scale, cudaStream_t stream);

}  // namespace ft::cuda
