// to_f16_rows (ops/linear.h): the activation side of the fp16 linears. One block per row: the
// row's max |x| (exact, order-free), its power-of-two exponent, then the scaled fp16 copy with
// the padding columns zeroed. A row's bits depend on that row alone.
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/env_policy.h"
#include "gpu-worker/backends/cuda/core/programmatic.cuh"
#include "gpu-worker/backends/cuda/ops/linear.h"
#include "shared/core/error.h"

namespace ft::cuda {
namespace {

constexpr int kThreads = 256;

// e with max·2^e ∈ [2^14, 2^15) (the rule prepare_linear_f16 uses for weights); 0 for rows of
// zeros or with a non-finite max (inf stays inf, NaN stays NaN); ≤ 126 so 2^−e is normal.
__device__ __forceinline__ int row_exponent(float m) {
  if (!(m > 0.0f) || !isfinite(m)) return 0;
  int E = 0;
  frexpf(m, &E);
  const int e = 15 - E;
  return e < 126 ? e : 126;
}
__device__ __forceinline__ float pow2(int e) { return __int_as_float((127 + e) << 23); }

// fp16 of a·p and b·p (p = 2^e, one rounding each), packed low | high: two output columns.
__device__ __forceinline__ uint32_t scaled_half2(float a, float b, float p) {
  const __half lo = __float2half_rn(__fmul_rn(a, p)), hi = __float2half_rn(__fmul_rn(b, p));
  return static_cast<uint32_t>(__half_as_ushort(lo)) | (static_cast<uint32_t>(__half_as_ushort(hi)) << 16);
}

// The row's max over the block (m: this thread's part, exact and order-free), its exponent e:
// stores the row's scale 2^−e and returns 2^e. Called once by every thread of the block.
__device__ __forceinline__ float row_factor(float m, float* row_scale) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  __shared__ float warp_max[kThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  m = warp_max[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, warp_max[w]);
  const int e = row_exponent(m);
  if (threadIdx.x == 0) *row_scale = pow2(-e);
  return pow2(e);
}

template <bool VEC>
__global__ void __launch_bounds__(kThreads)
    to_f16_rows_kernel(const float* x, int64_t ld_x, int64_t cols, __half* xh, int64_t ld_xh, float* row_scale) {
  chain_start();  // core/programmatic.cuh; the linear after it may start streaming its weights
  const int64_t r = blockIdx.x;
  const float* row = x + r * ld_x;
  float m = 0.0f;  // fmaxf drops NaN, so a NaN element does not hide the row's scale
  int64_t c = 4 * static_cast<int64_t>(threadIdx.x);
  if constexpr (VEC) {
    for (; c + 4 <= cols; c += 4 * kThreads) {
      const float4 v = *reinterpret_cast<const float4*>(row + c);
      m = fmaxf(m, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
    }
  }
  for (; c < cols; c += 4 * kThreads)
    for (int k = 0; k < 4 && c + k < cols; ++k) m = fmaxf(m, fabsf(row[c + k]));
  const float p = row_factor(m, row_scale + r);

  __half* out = xh + r * ld_xh;
  for (int64_t g = 8 * static_cast<int64_t>(threadIdx.x); g < ld_xh; g += 8 * kThreads) {
    float v[8];
    if (VEC && g + 8 <= cols) {
      const float4 a = *reinterpret_cast<const float4*>(row + g);
      const float4 b = *reinterpret_cast<const float4*>(row + g + 4);
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
#pragma unroll
      for (int k = 0; k < 8; ++k) v[k] = g + k < cols ? row[g + k] : 0.0f;
    }
    *reinterpret_cast<uint4*>(out + g) = make_uint4(scaled_half2(v[0], v[1], p), scaled_half2(v[2], v[3], p),
                                                    scaled_half2(v[4], v[5], p), scaled_half2(v[6], v[7], p));
  }
}

// Rows of at most 4·NV·kThreads padded columns with float4-aligned fp32 rows: each thread loads
// its NV float4 at once (columns 4·(tid + i·kThreads)) and keeps them for the conversion, so the
// row is read once, with every load of a thread in flight together, where the loop above issues
// its loads one dependent iteration at a time and reads the row twice. The same max (order-free),
// exponent and per-element conversion: the same bits.
template <int NV>
__global__ void __launch_bounds__(kThreads)
    to_f16_rows_regs_kernel(const float* x, int64_t ld_x, int64_t cols, __half* xh, int64_t ld_xh, float* row_scale) {
  chain_start();  // core/programmatic.cuh; the linear after it may start streaming its weights
  const int64_t r = blockIdx.x;
  const float* row = x + r * ld_x;
  float4 v[NV];
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int64_t c = 4 * (static_cast<int64_t>(threadIdx.x) + i * kThreads);
    if (c + 4 <= cols) {
      v[i] = *reinterpret_cast<const float4*>(row + c);
    } else {
      v[i].x = c < cols ? row[c] : 0.0f;
      v[i].y = c + 1 < cols ? row[c + 1] : 0.0f;
      v[i].z = c + 2 < cols ? row[c + 2] : 0.0f;
      v[i].w = c + 3 < cols ? row[c + 3] : 0.0f;
    }
  }
  float m = 0.0f;  // fmaxf drops NaN, so a NaN element does not hide the row's scale
#pragma unroll
  for (int i = 0; i < NV; ++i)
    m = fmaxf(m, fmaxf(fmaxf(fabsf(v[i].x), fabsf(v[i].y)), fmaxf(fabsf(v[i].z), fabsf(v[i].w))));
  const float p = row_factor(m, row_scale + r);

  __half* out = xh + r * ld_xh;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int64_t c = 4 * (static_cast<int64_t>(threadIdx.x) + i * kThreads);
    if (c >= ld_xh) continue;  // ld_xh is a multiple of 8: a float4 is in or out whole
    *reinterpret_cast<uint2*>(out + c) = make_uint2(scaled_half2(v[i].x, v[i].y, p), scaled_half2(v[i].z, v[i].w, p));
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

std::atomic<int> g_regs{policy_from_env("FLASHTIER_F16_ROWS_REGS")};

}  // namespace

namespace lin {
void set_to_f16_rows_registers(int policy) { g_regs.store(policy, std::memory_order_relaxed); }
}  // namespace lin

void to_f16_rows(const float* x, int64_t ld_x, int64_t rows, int64_t cols, __half* xh, int64_t ld_xh, float* row_scale,
                 cudaStream_t stream) {
  if (rows < 0 || cols < 0 || ld_x < cols || ld_xh < cols || ld_xh % 8 != 0 || !aligned16(xh))
    throw Error("to_f16_rows: bad shape (rows " + std::to_string(rows) + ", cols " + std::to_string(cols) + ", ld_x " +
                std::to_string(ld_x) + ", ld_xh " + std::to_string(ld_xh) +
                "; ld_xh must be a multiple of 8 and xh 16-byte aligned)");
  if (rows == 0) return;
  const bool vec = ld_x % 4 == 0 && aligned16(x);
  const unsigned grid = static_cast<unsigned>(rows);
  if (vec && g_regs.load(std::memory_order_relaxed) == 2) {  // auto: off until a run measures it
    const int64_t per = 4 * kThreads;  // columns a float4 per thread covers
    auto regs = [&](auto kernel) {
      launch_chained(kernel, grid, kThreads, 0, stream, x, ld_x, cols, xh, ld_xh, row_scale);
      FT_CUDA_CHECK_LAUNCH();
    };
    if (ld_xh <= per) return regs(to_f16_rows_regs_kernel<1>);
    if (ld_xh <= 2 * per) return regs(to_f16_rows_regs_kernel<2>);
    if (ld_xh <= 4 * per) return regs(to_f16_rows_regs_kernel<4>);
    if (ld_xh <= 8 * per) return regs(to_f16_rows_regs_kernel<8>);
  }
  if (vec) launch_chained(to_f16_rows_kernel<true>, grid, kThreads, 0, stream, x, ld_x, cols, xh, ld_xh, row_scale);
  else launch_chained(to_f16_rows_kernel<false>, grid, kThreads, 0, stream, x, ld_x, cols, xh, ld_xh, row_scale);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
