#pragma once
// The fused decode + matmul of one pair of output tiles (32 columns) by one warp, and the output
// transform of a 128-column block: the pieces the skinny linear kernel (gemv.cu) and the grouped
// MoE kernel (moe.cu) are both made of, so a row gets the same bits from either.
//
// Reduction (the contract of ops/linear.h): for every output the input dimension is cut into
// chunks of KC (exl3_k_chunk(in_p, out_p)); chunk c is one chain of mma.m16n8k16 over its k16
// steps in ascending order starting from zero, and the chunk sums are added left to right in
// fp32. Rows sit in the mma's N dimension (8 per group), decoded weights in M, so an output's
// value never depends on the other rows of its group.
//
// Data flow per warp: the pair's packed stream (shared/exl3/packed.h: one pair's tile-rows are
// contiguous, 64·K bytes per k16 step) is copied by cp.async in stages of 8 steps (32·K 16-byte
// chunks, K per lane, 512 contiguous bytes per instruction) into a private ring of S stages; the
// activations' B fragments come straight from the permuted fp16 rows (one 16-byte load per lane,
// group and two steps, from L1/L2), loaded one step pair ahead.
#include "gpu-worker/backends/cuda/exl3/device.cuh"

namespace ft::cuda::exl3dev {

constexpr int kStageSteps = 8;
constexpr int kWarps = 4;  // per CTA: the four pairs of one 128-column block

// Ring stages per warp: ~6–8 KB of trellis in flight per warp whatever K is.
template <int K>
constexpr int ring_stages() {
  return K <= 3 ? 4 : (K == 4 ? 3 : 2);
}
template <int K>
constexpr int stage_dwords() {
  return kStageSteps * LaneBits<K>::kStepDwords;
}

template <int K, int CB, int NGMAX>
struct WarpPair {
  static constexpr int S = ring_stages<K>();
  static constexpr int kStage = stage_dwords<K>();
  static constexpr int kStep = LaneBits<K>::kStepDwords;

  // tot[h][g][i] = Σ_chunks (left to right) of the chunk's mma chain, over steps [0, n_steps) of
  // `src` (the pair's stream at the item's first step), chunks of kc_steps steps (a multiple of
  // 8; n_steps a multiple of kc_steps). xrow[g]: this lane's activation row of group g at the
  // item's first input (already offset by the lane quad's 8 halves); groups g ≥ ng are skipped.
  __device__ __forceinline__ static void run(const uint32_t* __restrict__ src, int n_steps, int kc_steps,
                             const __half* const (&xrow)[NGMAX], int ng, uint32_t* ring, const LaneGeom<K>& geo,
                             int lane, float (&tot)[2][NGMAX][4]) {
    const int n_stages = n_steps / kStageSteps;
    const int kc_stages = kc_steps / kStageSteps;
    auto issue = [&](int s) {
      uint32_t* dst = ring + (s % S) * kStage;
      const uint32_t* from = src + static_cast<int64_t>(s) * kStage;
#pragma unroll
      for (int j = 0; j < K; ++j) {
        const uint32_t q = static_cast<uint32_t>(j * 32 + lane);
        cp_async16(dst + q * 4, from + q * 4);
      }
    };
#pragma unroll
    for (int s = 0; s < S; ++s) {
      if (s < n_stages) issue(s);
      cp_async_commit();
    }
    // Weights never change; the activations are the previous kernel's output (a no-op unless
    // this grid was launched as a programmatic dependent).
    grid_dependency_wait();
    float acc[2][NGMAX][4];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int g = 0; g < NGMAX; ++g)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[h][g][i] = 0.0f, tot[h][g][i] = 0.0f;
    const int n_pairs = n_steps / 2;
    uint4 bnext[NGMAX];
#pragma unroll
    for (int g = 0; g < NGMAX; ++g) bnext[g] = g < ng ? ldcg_v4(xrow[g]) : make_uint4(0, 0, 0, 0);

    for (int st = 0; st < n_stages; ++st) {
      cp_async_wait<S - 1>();
      __syncwarp();
      const uint32_t* slot = ring + (st % S) * kStage;
#pragma unroll
      for (int sp = 0; sp < kStageSteps / 2; ++sp) {
        uint4 bcur[NGMAX];
        const int next = st * (kStageSteps / 2) + sp + 1;
#pragma unroll
        for (int g = 0; g < NGMAX; ++g) {
          bcur[g] = bnext[g];
          if (g < ng && next < n_pairs) bnext[g] = ldcg_v4(xrow[g] + 32 * next);
        }
#pragma unroll
        for (int si = 0; si < 2; ++si) {
          const uint32_t* step = slot + (2 * sp + si) * kStep;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            uint32_t a[4];
            lane_fragment<K, CB>(step, geo, h, a);
#pragma unroll
            for (int g = 0; g < NGMAX; ++g)
              if (g < ng) mma_16816(acc[h][g], a, si ? bcur[g].z : bcur[g].x, si ? bcur[g].w : bcur[g].y);
          }
        }
      }
      if ((st + 1) % kc_stages == 0) {  // chunk done: fold it into the running sum, left to right
        const bool first = st + 1 == kc_stages;
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int g = 0; g < NGMAX; ++g)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              tot[h][g][i] = first ? acc[h][g][i] : __fadd_rn(tot[h][g][i], acc[h][g][i]);
              acc[h][g][i] = 0.0f;
            }
      }
      __syncwarp();
      if (st + S < n_stages) issue(st + S);
      cp_async_commit();
    }
    cp_async_wait<0>();
  }
};

// Where the lane's accumulator element (h, g, i) lies in the 32 × 128 tile of its CTA's block:
// row 8g + 2(l%4) + (i&1), column 32·warp + 16h + l/4 + 8(i>>1).
__device__ __forceinline__ int acc_row(int g, int lane, int i) { return 8 * g + 2 * (lane & 3) + (i & 1); }
__device__ __forceinline__ int acc_col(int warp, int h, int lane, int i) {
  return 32 * warp + 16 * h + (lane >> 2) + 8 * (i >> 1);
}

// Split-K fold: v = Σ_{c < chunks} z[c·cstride + 0…3], added left to right in fp32 (the reduction
// contract). The loads of 8 chunks are issued before their adds: the chain of dependent L2 reads
// (~0.5 µs each) would otherwise cost the finishing CTA several µs at 16–32 chunks.
__device__ __forceinline__ void fold_chunks(const float* z, int64_t cstride, int chunks, float (&v)[4]) {
  constexpr int kBatch = 8;
  float4 a = __ldcg(reinterpret_cast<const float4*>(z));
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  for (int c0 = 1; c0 < chunks; c0 += kBatch) {
    float4 b[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (c0 + j < chunks) b[j] = __ldcg(reinterpret_cast<const float4*>(z + (c0 + j) * cstride));
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (c0 + j < chunks) {
        v[0] = __fadd_rn(v[0], b[j].x), v[1] = __fadd_rn(v[1], b[j].y);
        v[2] = __fadd_rn(v[2], b[j].z), v[3] = __fadd_rn(v[3], b[j].w);
      }
  }
}

// Output transform of one row of a 128-column block whose chunk-summed values the warp holds as
// v[0..3] = columns 4·lane … 4·lane+3: Hadamard, ·svh, ·row_scale, + bias, then store the columns
// below `valid` (or add them to dst with accumulate).
__device__ __forceinline__ void finish_row(float (&v)[4], int lane, const __half* __restrict__ svh,
                                           const float* __restrict__ bias, float row_scale, float* dst, int valid,
                                           bool accumulate) {
  hadamard128_lane4(v, lane);
  const int c0 = 4 * lane;
  const uint2 s2 = *reinterpret_cast<const uint2*>(svh + c0);
  const __half2 sa = *reinterpret_cast<const __half2*>(&s2.x), sb = *reinterpret_cast<const __half2*>(&s2.y);
  const float sv[4] = {__low2float(sa), __high2float(sa), __low2float(sb), __high2float(sb)};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float b = bias ? bias[c0 + i] : 0.0f;
    const float o = output_value(v[i], sv[i], row_scale, b);
    if (c0 + i < valid) dst[c0 + i] = accumulate ? __fadd_rn(dst[c0 + i], o) : o;
  }
}

}  // namespace ft::cuda::exl3dev
