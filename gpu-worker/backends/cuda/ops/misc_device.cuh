#pragma once
// Device helpers of the per-token kernels (norms, mHC, router, SwiGLU, final norm): the
// reference's sigmoid, a sum of squares as exact as the reference's double sum, the fixed split
// of a row over a thread group, and fixed reduction trees. A row's bits depend only on the row
// and the width, never on the number of rows, the grid, or which load path (float4 or scalar)
// ran. CUDA-only: included by the .cu files of this group.
#include <cuda_runtime.h>

#include <cstdint>

namespace ft::cuda::misc {

// ft::sigmoid (shared/ops/activations.h): 1 / (1 + exp(−z)) with IEEE division; expf is within
// 2 ulp of the host's std::exp.
__device__ __forceinline__ float sigmoid_ref(float z) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-z))); }

// Float-float accumulator of squares. x² splits exactly into p + e (FMA), p enters hi through
// TwoSum and every rounding error lands in lo, so hi + lo carries the sum to ~2^-46: equal to the
// reference's double sum after the final rounding of r to fp32, at ~9 fp32 ops per value instead
// of a DFMA (which runs at 1/64 rate on sm_86). Explicit _rn intrinsics keep nvcc from
// contracting p into the TwoSum (which would break the error term).
struct SumSq {
  float hi = 0.0f, lo = 0.0f;
  __device__ __forceinline__ void add(float x) {
    const float p = __fmul_rn(x, x);
    const float e = __fmaf_rn(x, x, -p);
    const float s = __fadd_rn(hi, p);
    const float bp = __fsub_rn(s, hi);
    const float err = __fadd_rn(__fsub_rn(hi, __fsub_rn(s, bp)), __fsub_rn(p, bp));
    hi = s;
    lo = __fadd_rn(lo, __fadd_rn(err, e));
  }
  __device__ __forceinline__ double value() const { return static_cast<double>(hi) + static_cast<double>(lo); }
};

// r = 1/√(ss/n + eps) exactly as shared/ops/norms.cpp forms it (double, then one rounding).
__device__ __forceinline__ float inv_rms(double ss, int64_t n, float eps) {
  return static_cast<float>(1.0 / sqrt(ss / static_cast<double>(n) + static_cast<double>(eps)));
}

// Butterfly sum over a warp: lane l adds v_l + v_{l^o}, its partner v_{l^o} + v_l (the same bits),
// so every lane ends with the identical total.
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over WARPS warps of one group: warp totals go to `partial` (shared, WARPS slots, used once
// per call site), `sync` is the group's barrier, then every thread adds the totals in warp order.
template <int WARPS, class Sync>
__device__ __forceinline__ double group_sum(double v, double* partial, Sync sync) {
  v = warp_sum(v);
  if constexpr (WARPS == 1) {
    return v;
  } else {
    const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) % WARPS;
    if (lane == 0) partial[warp] = v;
    sync();
    double s = partial[0];
#pragma unroll
    for (int w = 1; w < WARPS; ++w) s += partial[w];
    return s;
  }
}

// The split of a row of n values over T threads: chunks of 4 consecutive values, chunk c to
// thread c mod T, each thread walking its chunks in ascending order and the values of a chunk in
// order. VEC loads a chunk as one float4 (row 16-byte aligned, n % 4 == 0); the scalar path walks
// the same values in the same order, so both give the same bits.
template <bool VEC>
__device__ __forceinline__ int load_chunk(const float* row, int64_t n, int64_t c, float (&v)[4]) {
  const int64_t i = 4 * c;
  if constexpr (VEC) {
    const float4 q = reinterpret_cast<const float4*>(row)[c];
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    return 4;
  } else {
    const int cnt = n - i < 4 ? static_cast<int>(n - i) : 4;
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = k < cnt ? row[i + k] : 0.0f;
    return cnt;
  }
}

template <bool VEC>
__device__ __forceinline__ void store_chunk(float* row, int64_t n, int64_t c, const float (&v)[4]) {
  const int64_t i = 4 * c;
  if constexpr (VEC) {
    reinterpret_cast<float4*>(row)[c] = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    const int cnt = n - i < 4 ? static_cast<int>(n - i) : 4;
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (k < cnt) row[i + k] = v[k];
  }
}

// Walks this thread's chunks c = tid, tid + T, … < ⌈n/4⌉ in ascending order, reading chunk c of
// each of the R rows (same width n) and calling f(c, v, cnt) with v[r][k] = rows[r][4c + k] for
// k < cnt. The loads of U consecutive chunks are issued before any f runs: one block per row
// (decode) is latency-bound, and a row written in place (f storing where rows[0] was read) keeps
// the compiler from hoisting the next chunk's loads above this chunk's stores. Chunks are
// thread-private, so reading ahead of one's own stores is safe; the order f sees is unchanged.
template <int U, bool VEC, int R, class F>
__device__ __forceinline__ void for_each_chunk(const float* const* rows, int64_t n, int64_t tid, int64_t T, F f) {
  const int64_t nc = (n + 3) / 4;
  for (int64_t c0 = tid; c0 < nc; c0 += U * T) {
    float v[U][R][4];
    int cnt[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + u * T;
      cnt[u] = 0;
      if (c < nc)
#pragma unroll
        for (int r = 0; r < R; ++r) cnt[u] = load_chunk<VEC>(rows[r], n, c, v[u][r]);
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (c0 + u * T < nc) f(c0 + u * T, v[u], cnt[u]);
  }
}

// Named barrier for a subset of the block (warp-specialised kernels): `threads` is a multiple of 32.
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Whether a float pointer can take the float4 path.
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace ft::cuda::misc
