#pragma once
// Device pieces the sampling kernels share (penalties, softmax weights, histogram bins, block
// reductions). Every function here is the one definition of its step: the histogram pass, the
// selection and the tests' penalty kernel call the same code, so they agree bit for bit.
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu-worker/backends/cuda/sampling/order_key.h"
#include "gpu-worker/backends/cuda/sampling/sampler.h"

namespace ft::cuda::sampling_detail {

// 64-bit integers the kernels add atomically or shuffle: CUDA's overloads take unsigned long long.
using ull = unsigned long long;
constexpr ull kNoKey = ~0ull;

// apply_penalties (shared/sampling/sampler.cpp) for one token: repetition over prompt and
// generated tokens, then presence/frequency over generated ones. The _rn intrinsics keep nvcc
// from fusing fp·n + pp into an FMA, which the CPU (plain SSE, no contraction) does not do.
__device__ __forceinline__ float penalise(float l, int32_t count, bool in_prompt, const SamplingRowParams& p) {
  const float rp = p.repetition_penalty;
  if (rp > 0.0f && rp != 1.0f && (in_prompt || count > 0)) l = l > 0.0f ? __fdiv_rn(l, rp) : __fmul_rn(l, rp);
  if ((p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) && count > 0)
    l = __fsub_rn(l, __fadd_rn(__fmul_rn(p.frequency_penalty, static_cast<float>(count)), p.presence_penalty));
  return l;
}
// A row reads penalty state only when it has a slot and a penalty that changes something.
__device__ __forceinline__ bool has_penalties(const SamplingRowParams& p, int64_t slots) {
  const float rp = p.repetition_penalty;
  return p.slot >= 0 && p.slot < slots &&
         ((rp > 0.0f && rp != 1.0f) || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f);
}
__device__ __forceinline__ bool is_greedy(const SamplingRowParams& p) { return p.temperature <= 0.0f; }

// Row-wide softmax constants of a sampled row.
struct Softmax {
  float y_max;     // largest penalised logit
  float inv_t;     // 1/T in fp32, as the CPU computes it
  float w_scale;   // 2^F
};
// t = (y − y_max) · (1/T) ≤ 0: the log-weight relative to the best candidate. Monotone in y.
__device__ __forceinline__ float log_weight(float y, const Softmax& s) {
  return __fmul_rn(__fsub_rn(y, s.y_max), s.inv_t);
}
// w = ⌊expf(t) · 2^F⌋; NaN (a NaN or +inf logit) weighs nothing.
__device__ __forceinline__ ull weight_of(float t, const Softmax& s) {
  const float e = expf(t);
  return e > 0.0f ? __float2ull_rz(e * s.w_scale) : 0ull;
}
__device__ __forceinline__ ull weight_of_key(ull ck, const Softmax& s) {
  return weight_of(log_weight(candidate_value(ck), s), s);
}

// First-level histogram bins: 1/32 nat of t each, best first; the last bin holds every t below
// −(kBins−1)/32 ≈ −32, whose weight is 0 for F ≤ 45. Monotone in the candidate order, so each
// bin is a contiguous run of candidate keys.
constexpr int kBins = 1024;
constexpr int kOverflowBin = kBins - 1;
__device__ __forceinline__ int bin_of(float t) {
  const float u = -t * 32.0f;
  return u < static_cast<float>(kOverflowBin) ? static_cast<int>(u) : kOverflowBin;
}

// Block-wide minimum of a uint64 (exact, order-free). `red` holds ≥ blockDim/32 entries; every
// thread gets the result.
__device__ __forceinline__ ull umin64(ull a, ull b) { return a < b ? a : b; }
__device__ __forceinline__ ull umax64(ull a, ull b) { return a > b ? a : b; }
__device__ __forceinline__ ull block_min_u64(ull v, ull* red) {
  for (int o = 16; o > 0; o >>= 1) v = umin64(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < warps ? red[lane] : kNoKey;
  for (int o = 16; o > 0; o >>= 1) v = umin64(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ ull block_max_u64(ull v, ull* red) {
  return ~block_min_u64(~v, red);
}
// Block-wide sum of a uint64 (exact).
__device__ __forceinline__ ull block_sum_u64(ull v, ull* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < warps ? red[lane] : 0ull;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

}  // namespace ft::cuda::sampling_detail
