// Dense copies of an EXL3 linear (exl3_linear.h), the twins of decode_trellis_f16 and
// dense_weight in shared/exl3: Wq straight from the decode path the matmul kernels use (staged by
// cp.async into 128-byte-aligned stages, the same lane fragments), and W_eff with fp32 Hadamards.
#include <string>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/exl3/exl3_linear.h"
#include "gpu-worker/backends/cuda/exl3/gemv.cuh"
#include "shared/core/error.h"

namespace ft::cuda {
namespace {

using namespace exl3dev;

// Tile position (row r = input, column c = output) of weight u of lane `lane` (spec §4.7).
__device__ __forceinline__ int pos_row(int lane, int u) { return 2 * (lane & 3) + (u & 1) + 8 * ((u >> 1) & 1); }
__device__ __forceinline__ int pos_col(int lane, int u) { return (lane >> 2) + 8 * (u >> 2); }

// One warp per (pair, stage of 8 tile-rows): stage it exactly as WarpPair does, decode each tile
// into its fragment and scatter the halves.
template <int K, int CB>
__global__ void __launch_bounds__(32) decode_wq_kernel(const uint32_t* trellis, int64_t in_p, int64_t out_p,
                                                       __half* wq) {
  __shared__ __align__(16) uint32_t stage[stage_dwords<K>()];
  const int lane = threadIdx.x;
  const int64_t pair = blockIdx.x, st = blockIdx.y;
  const uint32_t* from = trellis + pair * (in_p / 16) * LaneBits<K>::kStepDwords + st * stage_dwords<K>();
#pragma unroll
  for (int j = 0; j < K; ++j) {
    const uint32_t q = static_cast<uint32_t>(j * 32 + lane);
    cp_async16(stage + q * 4, from + q * 4);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncwarp();
  LaneGeom<K> geo;
  geo.init(lane);
  for (int s = 0; s < kStageSteps; ++s) {
    const int64_t a = st * kStageSteps + s;
    for (int h = 0; h < 2; ++h) {
      uint32_t f[4];
      lane_fragment<K, CB>(stage + s * LaneBits<K>::kStepDwords, geo, h, f);
      const int64_t b = 2 * pair + h;
      const uint32_t us[8] = {f[0] & 0xFFFFu, f[0] >> 16, f[2] & 0xFFFFu, f[2] >> 16,
                              f[1] & 0xFFFFu, f[1] >> 16, f[3] & 0xFFFFu, f[3] >> 16};
#pragma unroll
      for (int u = 0; u < 8; ++u)
        wq[(16 * a + pos_row(lane, u)) * out_p + 16 * b + pos_col(lane, u)] =
            __ushort_as_half(static_cast<unsigned short>(us[u]));
    }
  }
}

// One CTA per 128 × 128 block (input block I, output block O): Wq into shared memory (fp32),
// unnormalised FWHT down the columns, then along the rows, then ·suh·svh/128, transposed out.
constexpr int kDenseThreads = 256;
constexpr int kPitch = 129;

__device__ void fwht128_strided(float* v, int stride) {
  for (int w = 1; w < 128; w *= 2)
    for (int i = 0; i < 128; i += 2 * w)
      for (int j = i; j < i + w; ++j) {
        const float a = v[j * stride], b = v[(j + w) * stride];
        v[j * stride] = __fadd_rn(a, b);
        v[(j + w) * stride] = __fsub_rn(a, b);
      }
}

template <int K, int CB>
__global__ void __launch_bounds__(kDenseThreads)
    decode_dense_kernel(const uint32_t* trellis, const __half* suh, const __half* svh, int64_t in, int64_t out,
                        int64_t in_p, int64_t out_p, float* w) {
  extern __shared__ float sw[];  // [128][kPitch]: rows = inputs, columns = outputs
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t I = blockIdx.x, O = blockIdx.y;
  LaneGeom<K> geo;
  geo.init(lane);
  // 8 tile-rows × 4 pairs; warp `warp` takes tile-row `warp` of every pair.
  for (int pp = 0; pp < 4; ++pp) {
    const int64_t pair = 4 * O + pp, a = 8 * I + warp;
    const uint32_t* step = trellis + (pair * (in_p / 16) + a) * LaneBits<K>::kStepDwords;
    for (int h = 0; h < 2; ++h) {
      uint32_t f[4];
      lane_fragment<K, CB>(step, geo, h, f);
      const uint32_t us[8] = {f[0] & 0xFFFFu, f[0] >> 16, f[2] & 0xFFFFu, f[2] >> 16,
                              f[1] & 0xFFFFu, f[1] >> 16, f[3] & 0xFFFFu, f[3] >> 16};
#pragma unroll
      for (int u = 0; u < 8; ++u)
        sw[(16 * warp + pos_row(lane, u)) * kPitch + 32 * pp + 16 * h + pos_col(lane, u)] =
            __half2float(__ushort_as_half(static_cast<unsigned short>(us[u])));
    }
  }
  __syncthreads();
  if (threadIdx.x < 128) fwht128_strided(sw + threadIdx.x, kPitch);  // down column threadIdx.x
  __syncthreads();
  if (threadIdx.x < 128) fwht128_strided(sw + threadIdx.x * kPitch, 1);  // along row threadIdx.x
  __syncthreads();
  for (int idx = threadIdx.x; idx < 128 * 128; idx += kDenseThreads) {
    const int o = idx / 128, i = idx % 128;  // consecutive threads: consecutive inputs of one output
    const int64_t gi = 128 * I + i, go = 128 * O + o;
    if (gi >= in || go >= out) continue;
    const float s = __fmul_rn(__half2float(suh[gi]), 1.0f / 128.0f);
    w[go * in + gi] = __fmul_rn(__fmul_rn(sw[i * kPitch + o], s), __half2float(svh[go]));
  }
}

template <int K>
void decode_launch(const Exl3LinearDev& L, __half* wq, float* w, cudaStream_t stream) {
  const int cb = static_cast<int>(L.codebook);
  auto go = [&]<int CB>() {
    if (wq) {
      const dim3 grid(static_cast<unsigned>(L.out_p / 32), static_cast<unsigned>(L.in_p / 16 / kStageSteps));
      decode_wq_kernel<K, CB><<<grid, 32, 0, stream>>>(L.trellis, L.in_p, L.out_p, wq);
    } else {
      constexpr size_t smem = 128 * kPitch * sizeof(float);
      FT_CUDA_CHECK(cudaFuncSetAttribute(decode_dense_kernel<K, CB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem)));
      const dim3 grid(static_cast<unsigned>(L.in_p / 128), static_cast<unsigned>(L.out_p / 128));
      decode_dense_kernel<K, CB><<<grid, kDenseThreads, smem, stream>>>(L.trellis, L.suh, L.svh, L.in, L.out, L.in_p,
                                                                        L.out_p, w);
    }
    FT_CUDA_CHECK_LAUNCH();
  };
  if (cb == 0) go.template operator()<0>();
  else if (cb == 1) go.template operator()<1>();
  else go.template operator()<2>();
}

void decode_any(const Exl3LinearDev& L, __half* wq, float* w, cudaStream_t stream) {
  if (L.K < 1 || L.K > 8 || L.in_p % 128 || L.out_p % 128 || !L.trellis)
    throw Error("exl3 decode: bad linear description (K " + std::to_string(L.K) + ")");
  switch (L.K) {
    case 1: return decode_launch<1>(L, wq, w, stream);
    case 2: return decode_launch<2>(L, wq, w, stream);
    case 3: return decode_launch<3>(L, wq, w, stream);
    case 4: return decode_launch<4>(L, wq, w, stream);
    case 5: return decode_launch<5>(L, wq, w, stream);
    case 6: return decode_launch<6>(L, wq, w, stream);
    case 7: return decode_launch<7>(L, wq, w, stream);
    default: return decode_launch<8>(L, wq, w, stream);
  }
}

}  // namespace

void exl3_decode_wq(const Exl3LinearDev& L, __half* wq, cudaStream_t stream) { decode_any(L, wq, nullptr, stream); }

void exl3_decode_dense(const Exl3LinearDev& L, float* w, cudaStream_t stream) {
  if (!L.suh || !L.svh) throw Error("exl3_decode_dense: suh/svh missing");
  decode_any(L, nullptr, w, stream);
}

}  // namespace ft::cuda
