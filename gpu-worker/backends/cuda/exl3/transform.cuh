#pragma once
// Input transform of one row by one CTA (internal header): v = load(c) ⊙ suh for the row's in_p
// columns, the 128-point Hadamard per block (lane-of-4 form, hadamard.cpp's order), the row's
// power-of-two exponent (to_f16_rows' rule) and the permuted fp16 row (device.cuh).
// A warp per 128-column block (transform_threads: up to 32 warps), so a row costs two passes of
// one block each instead of a loop over the row: a batch-1 call is one CTA, and its latency is
// the GEMV's fixed cost (ncu, H200: 9.2 µs with 4 warps for a 4096-wide row, docs/perf.md). The
// first kCachedBlocks blocks of each warp keep their values in registers between the passes;
// wider rows recompute the rest (the same bits). The row maximum is a max, so neither the warp
// count nor the order changes it: the output bits do not depend on the CTA size.
#include "gpu-worker/backends/cuda/exl3/device.cuh"

namespace ft::cuda::exl3dev {

constexpr int kTransformMaxThreads = 1024;
constexpr int kCachedBlocks = 4;

// Threads of the CTA that transforms a row of in_p (a multiple of 128) columns.
inline int transform_threads(int64_t in_p) {
  const int64_t blocks = in_p / 128;
  return 32 * static_cast<int>(blocks < 1 ? 1 : blocks > kTransformMaxThreads / 32 ? kTransformMaxThreads / 32 : blocks);
}

// load(c) → fp32 input value of column c (0 for columns past the logical width). Any CTA of
// whole warps up to kTransformMaxThreads threads.
template <class Load>
__device__ __forceinline__ void transform_row(const Load& load, const __half* __restrict__ suh, int64_t in_p,
                                              __half* __restrict__ out_row, float* row_scale) {
  __shared__ float s_max[kTransformMaxThreads / 32];
  __shared__ __align__(16) __half s_perm[kTransformMaxThreads / 32][128];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t nblk = in_p / 128;
  auto block = [&](int64_t b, float (&v)[4]) {
    const int64_t c0 = 128 * b + 4 * lane;
    const uint2 s2 = *reinterpret_cast<const uint2*>(suh + c0);
    const __half2 sa = *reinterpret_cast<const __half2*>(&s2.x), sb = *reinterpret_cast<const __half2*>(&s2.y);
    const float sv[4] = {__low2float(sa), __high2float(sa), __low2float(sb), __high2float(sb)};
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = __fmul_rn(load(c0 + i), sv[i]);
    hadamard128_lane4(v, lane);
  };
  float m = 0.0f;  // fmaxf drops NaN, as to_f16_rows
  float keep[kCachedBlocks][4];
#pragma unroll
  for (int j = 0; j < kCachedBlocks; ++j) {
    const int64_t b = warp + static_cast<int64_t>(j) * warps;  // warp-uniform: the shuffles see every lane
    if (b < nblk) {
      block(b, keep[j]);
#pragma unroll
      for (int i = 0; i < 4; ++i) m = fmaxf(m, fabsf(keep[j][i]));
    }
  }
  for (int64_t b = warp + static_cast<int64_t>(kCachedBlocks) * warps; b < nblk; b += warps) {
    float v[4];
    block(b, v);
#pragma unroll
    for (int i = 0; i < 4; ++i) m = fmaxf(m, fabsf(v[i]));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0) s_max[warp] = m;
  __syncthreads();
  m = s_max[0];
  for (int w = 1; w < warps; ++w) m = fmaxf(m, s_max[w]);
  const int e = row_exponent(m);
  const float up = pow2(e);
  if (threadIdx.x == 0) *row_scale = pow2(-e);
  __half* perm = s_perm[warp];
  auto store = [&](int64_t b, const float (&v)[4]) {
    const int kb = lane >> 3;
#pragma unroll
    for (int i = 0; i < 4; ++i) perm[kb * 32 + permuted_pos(4 * (lane & 7) + i)] = __float2half_rn(__fmul_rn(v[i], up));
    __syncwarp();
    *reinterpret_cast<uint2*>(out_row + 128 * b + 4 * lane) = *reinterpret_cast<const uint2*>(perm + 4 * lane);
    __syncwarp();
  };
#pragma unroll
  for (int j = 0; j < kCachedBlocks; ++j) {
    const int64_t b = warp + static_cast<int64_t>(j) * warps;
    if (b < nblk) store(b, keep[j]);
  }
  for (int64_t b = warp + static_cast<int64_t>(kCachedBlocks) * warps; b < nblk; b += warps) {
    float v[4];
    block(b, v);
    store(b, v);
  }
  __syncthreads();  // s_max is reused by the next row of a looping caller
}

}  // namespace ft::cuda::exl3dev
