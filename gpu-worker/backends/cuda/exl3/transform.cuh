#pragma once
// Input transform of one row by one CTA of 128 threads (internal header): v = load(c) ⊙ suh for
// the row's in_p columns, the 128-point Hadamard per block (lane-of-4 form, hadamard.cpp's order),
// the row's power-of-two exponent (to_f16_rows' rule) and the permuted fp16 row (device.cuh).
// Two passes over the row (the second recomputes the first's bits) so any width fits without
// shared memory for the values.
#include "gpu-worker/backends/cuda/exl3/device.cuh"

namespace ft::cuda::exl3dev {

constexpr int kTransformThreads = 128;

// load(c) → fp32 input value of column c (0 for columns past the logical width).
template <class Load>
__device__ __forceinline__ void transform_row(const Load& load, const __half* __restrict__ suh, int64_t in_p,
                                              __half* __restrict__ out_row, float* row_scale) {
  __shared__ float s_max[kTransformThreads / 32];
  __shared__ __align__(16) __half s_perm[kTransformThreads / 32][128];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
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
  for (int64_t b = warp; b < nblk; b += kTransformThreads / 32) {
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
#pragma unroll
  for (int w = 1; w < kTransformThreads / 32; ++w) m = fmaxf(m, s_max[w]);
  const int e = row_exponent(m);
  const float up = pow2(e);
  if (threadIdx.x == 0) *row_scale = pow2(-e);
  __half* perm = s_perm[warp];
  for (int64_t b = warp; b < nblk; b += kTransformThreads / 32) {
    float v[4];
    block(b, v);
    const int kb = lane >> 3;
#pragma unroll
    for (int i = 0; i < 4; ++i) perm[kb * 32 + permuted_pos(4 * (lane & 7) + i)] = __float2half_rn(__fmul_rn(v[i], up));
    __syncwarp();
    *reinterpret_cast<uint2*>(out_row + 128 * b + 4 * lane) = *reinterpret_cast<const uint2*>(perm + 4 * lane);
    __syncwarp();
  }
  __syncthreads();  // s_max is reused by the next row of a looping caller
}

}  // namespace ft::cuda::exl3dev
