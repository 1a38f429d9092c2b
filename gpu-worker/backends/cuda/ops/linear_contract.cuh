#pragma once
// The reduction contract of ops/linear.h in code, shared by every fp16 linear kernel (skinny,
// tiled, grouped MoE): where the K chunks lie, how many 64-wide shared-memory stages and k16
// steps each has, and the epilogue that turns a folded sum into the output. Every kernel takes
// these from here, so they cannot disagree on a boundary or on the order of the final scaling.
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu-worker/backends/cuda/ops/linear_mma.cuh"

namespace ft::cuda::lin {

// Chunks per output the skinny kernel can fold (8 warps × 2 chunk accumulators each);
// linear_k_chunk never makes more.
constexpr int kMaxChunks = 16;

// The K geometry of one weight shape.
struct KGeom {
  int64_t in = 0;   // true input width: the last chunk ends here
  int64_t in8 = 0;  // in rounded up to 8: weight row stride, and where real data ends
  int kc = 0;       // KC (a multiple of kStageK)
  int chunks = 0;   // ⌈in / KC⌉
};

inline KGeom make_kgeom(int64_t in, int kc) {
  KGeom g;
  g.in = in;
  g.in8 = (in + 7) / 8 * 8;
  g.kc = kc;
  g.chunks = static_cast<int>((in + kc - 1) / kc);
  return g;
}

__host__ __device__ __forceinline__ int64_t chunk_end(const KGeom& g, int c) {
  const int64_t e = static_cast<int64_t>(c + 1) * g.kc;
  return e < g.in ? e : g.in;
}
// 64-wide stages of chunk c (all but the last chunk have kc / 64).
__host__ __device__ __forceinline__ int chunk_stages(const KGeom& g, int c) {
  return static_cast<int>((chunk_end(g, c) - static_cast<int64_t>(c) * g.kc + kStageK - 1) / kStageK);
}
// Stages over all chunks: chunks are contiguous, so stage s covers k ∈ [64 s, 64 s + 64).
__host__ __device__ __forceinline__ int total_stages(const KGeom& g) {
  return (g.chunks - 1) * (g.kc / kStageK) + chunk_stages(g, g.chunks - 1);
}

// The value stored for one output: acc·row_scale·w_scale (two exact power-of-two products
// unless the result under/overflows), then + bias. Kept as written (_rn intrinsics) so no kernel
// contracts it differently.
__device__ __forceinline__ float linear_value(float acc, float row_scale, float w_scale, const float* bias, int64_t n) {
  float v = __fmul_rn(__fmul_rn(acc, row_scale), w_scale);
  if (bias) v = __fadd_rn(v, bias[n]);
  return v;
}
__device__ __forceinline__ void store_value(float* dst, float v, bool accumulate) {
  *dst = accumulate ? __fadd_rn(*dst, v) : v;
}

// The clamped SwiGLU of the MoE epilogue, operation for operation the one of ops/swiglu.cu
// (swiglu_rows), so a fused expert gives the bits of the separate gate/up/swiglu path:
// std::min / std::clamp spelled out, sigmoid as 1 / (1 + expf(−g)) with IEEE division.
__device__ __forceinline__ float swiglu_value(float g, float u, float limit) {
  g = limit < g ? limit : g;
  u = u < -limit ? -limit : (limit < u ? limit : u);
  const float sig = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-g)));
  return __fmul_rn(__fmul_rn(g, sig), u);
}

// One unit of work of a linear kernel: a block of outputs for up to BM rows of one weight.
// Dense calls fill it from the grid position, grouped (MoE) calls from a device tile list.
struct LinItem {
  int64_t n0 = 0;              // first output (SwiGLU: first h column) of the block
  int64_t base = 0;            // dense: first row; grouped: first position in the dispatch's sorted_pick
  int64_t g = 0;               // dense: batch group; grouped: expert
  int rows = 0;                // rows in this item (≤ the kernel's rows per item)
  const __half* w0 = nullptr;  // the weight (SwiGLU: gate)
  const __half* w1 = nullptr;  // SwiGLU: up
  float ws0 = 1.0f, ws1 = 1.0f;
  const float* bias0 = nullptr;
  const float* bias1 = nullptr;
};

}  // namespace ft::cuda::lin
