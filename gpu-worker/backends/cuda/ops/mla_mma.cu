// Tensor-core path of mla_attend (mla.cu has the SIMT path, the merge and the launcher): the same
// split partials, with q_abs·c and p·c on mma.sync m16n8k16 (fp16 × fp16 → fp32).
//
// Block (row, split, group of 32 heads), 8 warps, 32 selected tokens per shared-memory tile. The
// split's cache rows are looked up once, and tile i+1 streams in (cp.async, two buffers) while
// tile i is computed, so the gather's latency is off the tile loop (the loop was latency-bound:
// docs/perf.md, session 17):
//   1. S[32 heads][32 tokens] = Q̃·Cᵀ: warp w computes the 16×8 tile (w/4, w%4) over all Rkv;
//   2. online softmax per head (fp32): 8 lanes per head, p rounded to fp16 and summed as rounded;
//   3. O[16 heads][Rkv/4] = corr·O + P·C: warp w owns heads 16·(w/4)…, channels (w%4)·Rkv/4….
// Q̃ = fp16(q_abs_h·2^e_h) with e_h per (row, head) putting max|q_abs_h| in [2^14, 2^15); the true
// score is S·(scale·2^−e_h). Every reduction is a fixed chain (mma k-steps ascending, tiles
// ascending), so a row's bits depend on its own selection only.
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/programmatic.cuh"
#include "gpu-worker/backends/cuda/ops/linear_mma.cuh"
#include "gpu-worker/backends/cuda/ops/mla.h"
#include "shared/core/error.h"

namespace ft::cuda {
namespace {

constexpr int kHeads = 32;  // heads per block (64 per block measured 3.5% slower at prefill: docs/perf.md)
constexpr int kTile = 32;   // tokens per tile
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxNtiles = 16;  // 8-channel n-tiles per warp in step 3: Rkv/32 ≤ 16
constexpr int kSld = kTile + 1;  // fp32 S row stride
constexpr int kPld = kTile + 8;  // fp16 P row stride: 80 B rows, ldmatrix conflict-free

static_assert(kMlaSplitTokens % kTile == 0, "a split is whole tiles");

struct MmaSmem {
  int64_t ld;                                    // halves per Q / C row: Rkv + 8 (16 B pad)
  int64_t q, c, s, p, m, l, corr, qscale, trow;  // byte offsets (c: two tile buffers)
  int64_t bytes;
};
__host__ __device__ inline MmaSmem mma_smem(int64_t Rkv, int nbuf) {
  MmaSmem L;
  L.ld = Rkv + 8;
  L.q = 0;
  L.c = L.q + kHeads * L.ld * 2;
  L.s = L.c + nbuf * kTile * L.ld * 2;
  L.p = L.s + kHeads * kSld * 4;
  L.p = (L.p + 15) / 16 * 16;
  L.m = L.p + kHeads * kPld * 2;
  L.l = L.m + kHeads * 4;
  L.corr = L.l + kHeads * 4;
  L.qscale = L.corr + kHeads * 4;
  L.trow = L.qscale + kHeads * 4;
  L.bytes = L.trow + kMlaSplitTokens * 8;
  return L;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// NBUF: C tile buffers, 2 (tile i + 1 streams in under tile i) where the part's shared memory
// holds them (~109 KB at Rkv 512: sm_90's 227 KB, not sm_86's 99 KB), else 1 (fetch, then
// compute). The arithmetic is the same either way: the bits do not depend on NBUF.
template <int NBUF>
__global__ void __launch_bounds__(kThreads, 2)
    attend_mma_kernel(MlaAttendShape s, const __half* latent, SparseTables t, const int32_t* slots,
                      const int32_t* positions, const int32_t* sel_pools, const int32_t* sel_count,
                      const float* q_abs, float* part_acc, float* part_ml, int max_splits) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  extern __shared__ float4 smem4[];
  char* smem = reinterpret_cast<char*>(smem4);
  const int64_t r = blockIdx.x;
  const int split = blockIdx.y;
  const int h0 = blockIdx.z * kHeads;
  const int32_t pos = positions[r], cnt = sel_count[r];
  const int kp = s.kpool;
  const int64_t nsel = mla_selection_size(pos, cnt, kp, s.tail);
  const int64_t begin = static_cast<int64_t>(split) * kMlaSplitTokens;
  if (begin >= nsel) return;
  const int64_t end = nsel < begin + kMlaSplitTokens ? nsel : begin + kMlaSplitTokens;
  const int Rkv = static_cast<int>(s.latent), NH = static_cast<int>(s.heads);
  const MmaSmem L = mma_smem(Rkv, NBUF);
  const int ld = static_cast<int>(L.ld);
  __half* qs = reinterpret_cast<__half*>(smem + L.q);
  __half* cs = reinterpret_cast<__half*>(smem + L.c);
  float* ss = reinterpret_cast<float*>(smem + L.s);
  __half* ps = reinterpret_cast<__half*>(smem + L.p);
  float* m_s = reinterpret_cast<float*>(smem + L.m);
  float* l_s = reinterpret_cast<float*>(smem + L.l);
  float* corr_s = reinterpret_cast<float*>(smem + L.corr);
  float* qscale_s = reinterpret_cast<float*>(smem + L.qscale);
  int64_t* trow = reinterpret_cast<int64_t*>(smem + L.trow);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;

  // Q̃: warp w converts heads 4w … 4w+3 (zeros past NH: they score 0 and are never written).
  for (int i = 0; i < kHeads / kWarps; ++i) {
    const int hl = warp * (kHeads / kWarps) + i, h = h0 + hl;
    const float* q = q_abs + (r * NH + h) * Rkv;
    float amax = 0.0f;
    if (h < NH)
      for (int c = lane; c < Rkv; c += 32) amax = fmaxf(amax, fabsf(q[c]));
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    int e = 0;
    if (amax > 0.0f && amax <= 3.0e38f) {
      int x;
      frexpf(amax, &x);  // amax ∈ [2^(x−1), 2^x)
      e = 15 - x;
      e = e < -126 ? -126 : (e > 126 ? 126 : e);
    }
    for (int c = lane; c < Rkv; c += 32) qs[hl * ld + c] = __float2half_rn(h < NH ? ldexpf(q[c], e) : 0.0f);
    if (lane == 0) {
      qscale_s[hl] = ldexpf(s.scale, -e);
      m_s[hl] = -INFINITY;
      l_s[hl] = 0.0f;
    }
  }

  const int32_t* pools = sel_pools + r * s.pool_budget;
  const int32_t slot = slots[r];
  const int64_t bt = static_cast<int64_t>(kPoolsPerBlock) * kp;
  // The split's cache rows, once (−1 past its end: those rows read as zeros, never NaN into P·C).
  for (int j = threadIdx.x; j < kMlaSplitTokens; j += kThreads) {
    int64_t row = -1;
    if (begin + j < end) {
      const int64_t tok = mla_selected_token(pools, cnt, pos, kp, begin + j);
      row = static_cast<int64_t>(t.block_table[slot * t.max_blocks_per_seq + tok / bt]) * bt + tok % bt;
    }
    trow[j] = row;
  }
  const int mt = warp / 4;                   // 16-head row tile of steps 1 and 3
  const int nt1 = warp % 4;                  // step 1: 8-token column tile
  const int ntiles = Rkv / 32;               // step 3: 8-channel tiles per warp
  const int ch0 = (warp % 4) * (Rkv / 4);    // step 3: first channel
  float o[kMaxNtiles][4];
#pragma unroll
  for (int i = 0; i < kMaxNtiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;

  // Tile i (tokens begin + 32 i …) into buffer i % NBUF; one commit group per tile.
  const int vec = Rkv / 8;
  auto fetch = [&](int64_t i) {
    __half* dst = cs + (i % NBUF) * kTile * ld;
    const int64_t* rows = trow + i * kTile;
    for (int k = threadIdx.x; k < kTile * vec; k += kThreads) {
      const int j = k / vec, c8 = k % vec;
      const int64_t row = rows[j];
      lin::cp_async_ca16(lin::smem_addr(dst + j * ld + c8 * 8), latent + (row < 0 ? 0 : row * Rkv + c8 * 8), row >= 0);
    }
    lin::cp_async_commit();
  };
  const int64_t n_tiles = (end - begin + kTile - 1) / kTile;
  __syncthreads();  // trow
  if (NBUF == 2) fetch(0);

  for (int64_t ti = 0; ti < n_tiles; ++ti) {
    const int64_t t0 = begin + ti * kTile;
    const int nt = static_cast<int>(end - t0 < kTile ? end - t0 : kTile);
    // Every warp is past tile ti − 1's step 3, the last reader of the buffer this fetch fills.
    __syncthreads();
    if constexpr (NBUF == 2) {
      if (ti + 1 < n_tiles) fetch(ti + 1);
      else lin::cp_async_commit();  // an empty group keeps the wait count uniform
      lin::cp_async_wait<1>();      // tile ti has landed (this thread's copies)
    } else {
      fetch(ti);
      lin::cp_async_wait<0>();
    }
    __syncthreads();  // … and every thread's; Q̃ and the softmax state are written
    const __half* ct = cs + (ti % NBUF) * kTile * ld;

    // 1. S tile (mt, nt1) = Q̃[16 heads]·C[8 tokens]ᵀ over Rkv, k-steps ascending.
    {
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      const __half* a_row = qs + (mt * 16 + (lane & 15)) * ld + (lane >> 4) * 8;
      const __half* b_row = ct + (nt1 * 8 + (lane & 7)) * ld + ((lane >> 3) & 1) * 8;
      // Unrolled so the next steps' ldmatrix loads issue under this step's mma (same order).
#pragma unroll 4
      for (int k = 0; k < Rkv; k += 16) {
        uint32_t a[4], b[2];
        ldmatrix_x4(a, a_row + k);
        ldmatrix_x2(b, b_row + k);
        mma_16816(acc, a, b);
      }
      float* srow = ss + (mt * 16 + g) * kSld + nt1 * 8 + 2 * t4;
      srow[0] = acc[0];
      srow[1] = acc[1];
      srow[8 * kSld] = acc[2];
      srow[8 * kSld + 1] = acc[3];
    }
    __syncthreads();

    // 2. Online softmax: warp w, lanes 8i … 8i+7 own head 4w + i, 4 tokens each.
    {
      const int hl = warp * 4 + lane / 8, j0 = (lane % 8) * 4;
      const float qsc = qscale_s[hl];
      float sc[4], tmax = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        sc[j] = j0 + j < nt ? ss[hl * kSld + j0 + j] * qsc : -INFINITY;
        tmax = fmaxf(tmax, sc[j]);
      }
      for (int o2 = 1; o2 < 8; o2 <<= 1) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o2));
      const float m_old = m_s[hl];
      const float m_new = fmaxf(m_old, tmax);
      const float corr = expf(m_old - m_new);  // 0 on the first tile
      float psum = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const __half ph = __float2half_rn(j0 + j < nt ? expf(sc[j] - m_new) : 0.0f);
        ps[hl * kPld + j0 + j] = ph;
        psum += __half2float(ph);
      }
      for (int o2 = 1; o2 < 8; o2 <<= 1) psum += __shfl_xor_sync(0xffffffffu, psum, o2);
      __syncwarp();
      if (lane % 8 == 0) {
        l_s[hl] = l_s[hl] * corr + psum;
        m_s[hl] = m_new;
        corr_s[hl] = corr;
      }
    }
    __syncthreads();

    // 3. O = corr·O + P[16 heads][32 tokens]·C[32 tokens][channels of this warp].
    {
      const float c_lo = corr_s[mt * 16 + g], c_hi = corr_s[mt * 16 + g + 8];
#pragma unroll
      for (int i = 0; i < kMaxNtiles; ++i) {
        o[i][0] *= c_lo;
        o[i][1] *= c_lo;
        o[i][2] *= c_hi;
        o[i][3] *= c_hi;
      }
      const __half* a_row = ps + (mt * 16 + (lane & 15)) * kPld + (lane >> 4) * 8;
#pragma unroll
      for (int k = 0; k < kTile; k += 16) {
        uint32_t a[4];
        ldmatrix_x4(a, a_row + k);
        const __half* b_row = ct + (k + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + ch0;
#pragma unroll
        for (int i = 0; i < kMaxNtiles; ++i) {
          if (i < ntiles) {
            uint32_t b[2];
            ldmatrix_x2_trans(b, b_row + i * 8);
            mma_16816(o[i], a, b);
          }
        }
      }
    }
  }

  // Partials: rows g and g+8 of this warp's head tile, channels ch0 + 8i + 2·t4 (+1).
  const int64_t base = (r * NH + h0) * static_cast<int64_t>(max_splits) + split;
  for (int half = 0; half < 2; ++half) {
    const int hl = mt * 16 + g + half * 8;
    if (h0 + hl >= NH) continue;
    float* dst = part_acc + (base + static_cast<int64_t>(hl) * max_splits) * Rkv + ch0 + 2 * t4;
#pragma unroll
    for (int i = 0; i < kMaxNtiles; ++i)
      if (i < ntiles) *reinterpret_cast<float2*>(dst + i * 8) = make_float2(o[i][2 * half], o[i][2 * half + 1]);
  }
  if (threadIdx.x < kHeads && h0 + static_cast<int>(threadIdx.x) < NH) {
    const int64_t idx = base + static_cast<int64_t>(threadIdx.x) * max_splits;
    part_ml[idx * 2] = m_s[threadIdx.x];
    part_ml[idx * 2 + 1] = l_s[threadIdx.x];
  }
}

}  // namespace

namespace detail {

void mla_attend_mma_partials(const MlaAttendShape& s, const __half* latent, const SparseTables& t,
                             const SparseRows& rows, const int32_t* sel_pools, const int32_t* sel_count,
                             const float* q_abs, float* part_acc, float* part_ml, cudaStream_t stream) {
  if (s.latent % 32 != 0 || s.latent > 32 * kMaxNtiles) throw Error("mla_attend (mma): Rkv must be 32·k ≤ 512");
  int dev = 0, optin = 0;
  FT_CUDA_CHECK(cudaGetDevice(&dev));
  FT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const bool two = mma_smem(s.latent, 2).bytes <= optin;
  const MmaSmem L = mma_smem(s.latent, two ? 2 : 1);
  const auto kernel = two ? attend_mma_kernel<2> : attend_mma_kernel<1>;
  FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(L.bytes)));
  const dim3 grid(static_cast<unsigned>(rows.n), static_cast<unsigned>(s.max_splits()),
                  static_cast<unsigned>((s.heads + kHeads - 1) / kHeads));
  launch_chained(kernel, grid, kThreads, L.bytes, stream, s, latent, t, rows.slot, rows.pos, sel_pools, sel_count,
                 q_abs, part_acc, part_ml, static_cast<int>(s.max_splits()));
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace detail
}  // namespace ft::cuda
