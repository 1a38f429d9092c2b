// to_f16_rows (ops/linear.h): the activation side of the fp16 linears. One block per row: the
// row's max |x| (exact, order-free), its power-of-two exponent, then the scaled fp16 copy with
// the padding columns zeroed. A row's bits depend on that row alone.
#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
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
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  __shared__ float warp_max[kThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  m = warp_max[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, warp_max[w]);
  const int e = row_exponent(m);
  const float p = pow2(e);
  if (threadIdx.x == 0) row_scale[r] = pow2(-e);

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
    uint32_t packed[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const __half lo = __float2half_rn(__fmul_rn(v[2 * k], p));
      const __half hi = __float2half_rn(__fmul_rn(v[2 * k + 1], p));
      packed[k] = static_cast<uint32_t>(__half_as_ushort(lo)) | (static_cast<uint32_t>(__half_as_ushort(hi)) << 16);
    }
    *reinterpret_cast<uint4*>(out + g) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

void to_f16_rows(const float* x, int64_t ld_x, int64_t rows, int64_t cols, __half* xh, int64_t ld_xh, float* row_scale,
                 cudaStream_t stream) {
  if (rows < 0 || cols < 0 || ld_x < cols || ld_xh < cols || ld_xh % 8 != 0 || !aligned16(xh))
    throw Error("to_f16_rows: bad shape (rows " + std::to_string(rows) + ", cols " + std::to_string(cols) + ", ld_x " +
                std::to_string(ld_x) + ", ld_xh " + std::to_string(ld_xh) +
                "; ld_xh must be a multiple of 8 and xh 16-byte aligned)");
  if (rows == 0) return;
  const bool vec = ld_x % 4 == 0 && aligned16(x);
  const unsigned grid = static_cast<unsigned>(rows);
  if (vec) launch_chained(to_f16_rows_kernel<true>, grid, kThreads, 0, stream, x, ld_x, cols, xh, ld_xh, row_scale);
  else launch_chained(to_f16_rows_kernel<false>, grid, kThreads, 0, stream, x, ld_x, cols, xh, ld_xh, row_scale);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
