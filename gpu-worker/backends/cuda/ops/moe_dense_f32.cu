// moe_dense_experts_f32 (ops/moe.h): routed experts resident in VRAM as fp32/bf16, computed in
// fp32 for an engine in fp32 precision — the GPU twin of the per-pick swiglu_mlp calls of
// shared/engine/local_experts.cpp at the reference's precision.
//
// Per pick p = (t, k), expert e: a warp per output; lane j sums k ≡ j (mod 32) ascending in one
// fma chain, then the lanes' partials fold by a butterfly (every lane ends with the same bits).
// The order is a function of the widths only, so a pick's bits never depend on the step's other
// picks, on which kernel sibling ran, or on the number of tokens (batch invariant).
//   1. G[p] = [gate_e·x_t | up_e·x_t]                      (2I outputs)
//   2. Y[p] = down_e·swiglu(G[p])                          (D outputs; h staged in shared memory)
#include <cstdint>
#include <string>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/ops/misc_device.cuh"
#include "gpu-worker/backends/cuda/ops/moe.h"
#include "shared/core/error.h"

namespace ft::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;

__device__ __forceinline__ float weight(const LinearF32& L, int64_t i) {
  if (L.w_bf16) return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(L.w)[i]) << 16);
  return static_cast<const float*>(L.w)[i];
}

// Σ_k W[n][k]·v[k] over the warp (lane-strided chains, butterfly fold).
__device__ __forceinline__ float warp_dot(const LinearF32& L, int64_t n, const float* v, int64_t in, int lane) {
  float acc = 0.0f;
  const int64_t row = n * in;
  for (int64_t k = lane; k < in; k += 32) acc = __fmaf_rn(weight(L, row + k), v[k], acc);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, o));
  return acc;
}

__device__ __forceinline__ bool valid_expert(int32_t e, int n_experts) { return e >= 0 && e < n_experts; }

__global__ void __launch_bounds__(kThreads)
    gate_up_kernel(const DenseExpertF32* experts, int n_experts, const int32_t* pick_expert, int top_k,
                   const float* x, int64_t ld_x, int64_t D, int64_t I, float* G) {
  const int64_t p = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * kWarps + warp;
  if (j >= 2 * I) return;
  const int32_t e = pick_expert[p];
  float v = 0.0f;
  if (valid_expert(e, n_experts)) {
    const DenseExpertF32& ex = experts[e];
    const float* xt = x + (p / top_k) * ld_x;
    v = j < I ? warp_dot(ex.gate, j, xt, D, lane) : warp_dot(ex.up, j - I, xt, D, lane);
  }
  if (lane == 0) G[p * 2 * I + j] = v;
}

__device__ __forceinline__ float swiglu_one(float g, float u, float limit) {
  g = limit < g ? limit : g;
  u = u < -limit ? -limit : (limit < u ? limit : u);
  return __fmul_rn(__fmul_rn(g, misc::sigmoid_ref(g)), u);
}

__global__ void __launch_bounds__(kThreads)
    down_kernel(const DenseExpertF32* experts, int n_experts, const int32_t* pick_expert, const float* G, int64_t D,
                int64_t I, float limit, float* Y) {
  extern __shared__ float h[];
  const int64_t p = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float* g = G + p * 2 * I;
  for (int64_t i = threadIdx.x; i < I; i += kThreads) h[i] = swiglu_one(g[i], g[I + i], limit);
  __syncthreads();
  const int64_t n = static_cast<int64_t>(blockIdx.y) * kWarps + warp;
  if (n >= D) return;
  const int32_t e = pick_expert[p];
  const float v = valid_expert(e, n_experts) ? warp_dot(experts[e].down, n, h, I, lane) : 0.0f;
  if (lane == 0) Y[p * D + n] = v;
}

}  // namespace

size_t moe_dense_f32_workspace_bytes(int64_t max_n, int top_k, int64_t I) {
  return static_cast<size_t>(max_n * top_k * 2 * I) * sizeof(float);
}

void moe_dense_experts_f32(const DenseExpertF32* experts, int n_experts, const MoeRoutes& r, const float* x,
                           int64_t ld_x, int64_t D, int64_t I, float limit, float* Y, void* workspace,
                           cudaStream_t stream) {
  if (r.n <= 0) return;
  if (!experts || !workspace || r.top_k <= 0 || D <= 0 || I <= 0 || ld_x < D)
    throw Error("moe_dense_experts_f32: bad arguments (D " + std::to_string(D) + ", I " + std::to_string(I) + ")");
  const int64_t picks = r.n * r.top_k;
  if (picks > 0x7fffffff) throw Error("moe_dense_experts_f32: too many picks");
  const size_t smem = static_cast<size_t>(I) * sizeof(float);
  if (smem > 48 * 1024) throw Error("moe_dense_experts_f32: intermediate size " + std::to_string(I) + " too large");
  float* G = static_cast<float*>(workspace);
  const dim3 g1(static_cast<unsigned>(picks), static_cast<unsigned>((2 * I + kWarps - 1) / kWarps));
  gate_up_kernel<<<g1, kThreads, 0, stream>>>(experts, n_experts, r.expert, r.top_k, x, ld_x, D, I, G);
  FT_CUDA_CHECK_LAUNCH();
  const dim3 g2(static_cast<unsigned>(picks), static_cast<unsigned>((D + kWarps - 1) / kWarps));
  down_kernel<<<g2, kThreads, smem, stream>>>(experts, n_experts, r.expert, G, D, I, limit, Y);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
