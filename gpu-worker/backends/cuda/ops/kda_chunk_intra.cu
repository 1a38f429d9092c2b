// The state-independent half of the chunked KDA prefill (kda_chunk.cuh): one block per (chunk,
// head) builds A and M, solves for U and W, and forms Q', K̃, P and D.
//
// A and M need e^{Γ_r−Γ_s} for every pair s ≤ r. The chunk is cut into four sub-blocks of 16 rows:
//   * r and s in different sub-blocks (s in block i < j ∋ r): the factor splits at the start of
//     block j into e^{λ_r} (λ_r = g's of block j up to r) and e^{g's from s+1 to the end of block j−1},
//     both ≤ 1, so those entries are plain dot products of KL = K ⊙ e^λ (QL for M) with R_j;
//   * r and s in the same sub-block: the exponent is summed from g_{s+1} on, per pair.
// Key channels go through shared memory in slices of 16; the sums over d run slice by slice in
// ascending order, so every entry is a fixed sequence of operations (bits independent of the grid).
#include <atomic>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/env_policy.h"
#include "gpu-worker/backends/cuda/ops/kda_chunk.cuh"
#include "gpu-worker/backends/cuda/ops/kda_common.cuh"
#include "gpu-worker/backends/cuda/ops/kda.h"

namespace ft::cuda::kda_detail {

namespace {

constexpr int kThreads = 256;
constexpr int kSD = 16;         // key channels per slice
constexpr int kLD = kSD + 4;    // padded row stride of the slice arrays (16-byte rows, spread banks)
constexpr int kRRows = 96;      // R_1 | R_2 | R_3 (16 + 32 + 48 rows): R_j holds the rows s < 16j
constexpr int kOffTiles = 96;   // 4×4 tiles covering the off-diagonal sub-blocks of A (and of M)
constexpr int kSolveAhead = 2;  // rows fetched ahead in the solve

static_assert(kThreads == kNumSub * 8 * 8, "one diagonal task (sub-block, s-pair, channel lane) per thread");
static_assert(2 * kOffTiles <= kThreads, "one off-diagonal tile of A or M per thread");

__host__ __device__ constexpr int r_offset(int j) { return 8 * j * (j - 1); }  // first row of R_j

struct SliceSmem {
  float k[kChunk][kLD], q[kChunk][kLD], g[kChunk][kLD];
  float kl[kChunk][kLD], ql[kChunk][kLD];  // K, Q ⊙ e^{λ}
  float r[kRRows][kLD];
  float tau[kNumSub][kSD];  // sub-block totals of g
};
struct MatrixSmem {
  float a[kChunk][kChunk], m[kChunk][kChunk];
};
union IntraSmem {
  SliceSmem s;
  MatrixSmem m;
};

// The decay factors e^x (x ≤ 0): IEEE-accurate expf, or (FAST) ex2.approx of x·log2 e —
// ~8 instructions fewer each, relative error ~2 ulp + |x|·2^−24 (FLASHTIER_KDA_FAST_EXP=on; the
// chunked form is held to the token loop within 1e-5 either way).
template <bool FAST>
__device__ __forceinline__ float decay_exp(float x) {
  if constexpr (FAST) return __expf(x);
  else return expf(x);
}

__device__ __forceinline__ float lane8_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  v += __shfl_xor_sync(0xffffffffu, v, 4);
  return v;
}

template <int DL, bool FAST>
__global__ __launch_bounds__(kThreads, 2) void chunk_intra_kernel(ChunkArgs a) {
  __shared__ __align__(16) IntraSmem sm;
  __shared__ float beta_s[kChunk];
  const int t = threadIdx.x;
  const int64_t c = blockIdx.x, h = blockIdx.y;
  const int64_t Q = a.heads * DL;
  int64_t row0;
  int len;
  chunk_rows(a, c, row0, len);
  float* const qbase = a.qkv + row0 * a.ld_qkv + h * DL;  // q of local row r at qbase + r·ld_qkv
  float* const kbase = qbase + Q;
  float* const vbase = qbase + 2 * Q;
  float* const gbase = a.g + row0 * a.ld_g + h * DL;
  if (t < kChunk) beta_s[t] = t < len ? a.beta[(row0 + t) * a.ld_beta + h] : 0.0f;

  // This thread's off-diagonal tile (threads < 192): rows orow…orow+3 of block jb, columns
  // ocol…ocol+3 (R rows vc…vc+3), of A (mat 0, from KL) or M (mat 1, from QL).
  const int mat = t / kOffTiles, tile = t % kOffTiles;
  const int vc = 4 * (tile % 24);
  const int jb = vc < 16 ? 1 : (vc < 48 ? 2 : 3);
  const int orow = kSub * jb + 4 * (tile / 24), ocol = vc - r_offset(jb);
  float off[4][4] = {};
  // This thread's diagonal task: sub-block ib, the pair of columns s0 = p and s1 = 15 − p (15
  // entries below the diagonal between them, so every task does the same work), key channels
  // e, e+8 of each slice. Iteration it covers (r, s0) for it < n0, then (r, s1).
  const int e = t % 8, p = (t / 8) % 8, ib = t / 64;
  const int s0 = kSub * ib + p, s1 = kSub * ib + 15 - p, n0 = 15 - p;
  float da[15] = {}, dm[15] = {};
  float dm0 = 0.0f, dm1 = 0.0f;

  // Slice staging: three float4 of q, k or g per thread, fetched one slice ahead so the loads
  // overlap the previous slice's work (they read columns no earlier slice writes).
  constexpr int kStage = 3 * kChunk * (kSD / 4) / kThreads;
  static_assert(kStage * kThreads == 3 * kChunk * (kSD / 4), "whole float4 per thread");
  auto stage_load = [&](int dbase, float4(&v)[kStage]) {
#pragma unroll
    for (int m = 0; m < kStage; ++m) {
      const int idx = t + m * kThreads;
      const int arr = idx / (kChunk * (kSD / 4)), rem = idx % (kChunk * (kSD / 4));
      const int r = rem / (kSD / 4), x4 = 4 * (rem % (kSD / 4));
      v[m] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (r < len) {
        const float* src = arr == 0 ? qbase + r * a.ld_qkv : (arr == 1 ? kbase + r * a.ld_qkv : gbase + r * a.ld_g);
        v[m] = *reinterpret_cast<const float4*>(src + dbase + x4);
      }
    }
  };
  float4 staged[kStage];
  stage_load(0, staged);

#pragma unroll 1
  for (int sl = 0; sl < DL / kSD; ++sl) {
    const int dbase = sl * kSD;
#pragma unroll
    for (int m = 0; m < kStage; ++m) {
      const int idx = t + m * kThreads;
      const int arr = idx / (kChunk * (kSD / 4)), rem = idx % (kChunk * (kSD / 4));
      const int r = rem / (kSD / 4), x4 = 4 * (rem % (kSD / 4));
      float* dst = arr == 0 ? sm.s.q[r] : (arr == 1 ? sm.s.k[r] : sm.s.g[r]);
      *reinterpret_cast<float4*>(dst + x4) = staged[m];
    }
    __syncthreads();
    if (sl + 1 < DL / kSD) stage_load(dbase + kSD, staged);

    // Sub-block totals τ_i of g per key channel (64 threads).
    const int x = t % kSD, si = (t / kSD) % kNumSub, part = t / (kSD * kNumSub);
    if (t < kNumSub * kSD) {
      float tau = 0.0f;
      for (int rr = 0; rr < kSub; ++rr) tau += sm.s.g[kSub * si + rr][x];
      sm.s.tau[si][x] = tau;
    }
    __syncthreads();
    // The decay factors of key channel x over sub-block si, four jobs on four warp pairs. λ_r = g's
    // of the sub-block up to r, μ_r = g's after r inside it; before / after = the other sub-blocks'.
    if (part < 2) {
      float before = 0.0f;
      for (int i = 0; i < si; ++i) before += sm.s.tau[i][x];
      float lam = 0.0f;
      for (int rr = 0; rr < kSub; ++rr) {
        const int r = kSub * si + rr;
        lam += sm.s.g[r][x];
        if (part == 0) {  // KL, QL = K, Q ⊙ e^{λ}
          const float f = decay_exp<FAST>(lam);
          sm.s.kl[r][x] = sm.s.k[r][x] * f;
          sm.s.ql[r][x] = sm.s.q[r][x] * f;
        } else if (r < len) {  // Γ_r = before + λ_r: β_r·k_r·e^{Γ_r} (W's right-hand side) over g, q_r·e^{Γ_r} over q
          const float f = decay_exp<FAST>(before + lam);
          qbase[r * a.ld_qkv + dbase + x] = sm.s.q[r][x] * f;
          gbase[r * a.ld_g + dbase + x] = beta_s[r] * (sm.s.k[r][x] * f);
        }
      }
    } else {
      float after = 0.0f;
      for (int i = si + 1; i < kNumSub; ++i) after += sm.s.tau[i][x];
      float mu = 0.0f;
      for (int rr = kSub - 1; rr >= 0; --rr) {
        const int r = kSub * si + rr;
        const float kr = sm.s.k[r][x];
        if (part == 2) {  // K̃_r = k_r·e^{μ_r + after} over k
          if (r < len) kbase[r * a.ld_qkv + dbase + x] = kr * decay_exp<FAST>(mu + after);
        } else {  // R_j rows k_r·e^{μ_r + τ_{si+1} + … + τ_{j−1}}
          float ex = mu;
          for (int j = si + 1; j < kNumSub; ++j) {
            sm.s.r[r_offset(j) + r][x] = kr * decay_exp<FAST>(ex);
            ex += sm.s.tau[j][x];
          }
        }
        mu += sm.s.g[r][x];
      }
      if (part == 2 && si == 0) {
        float total = 0.0f;
        for (int i = 0; i < kNumSub; ++i) total += sm.s.tau[i][x];
        a.decay[(c * a.heads + h) * DL + dbase + x] = decay_exp<FAST>(total);
      }
    }
    __syncthreads();

    if (t < 2 * kOffTiles) {
      const float(*left)[kLD] = mat == 0 ? sm.s.kl : sm.s.ql;
#pragma unroll
      for (int x4 = 0; x4 < kSD; x4 += 4) {
        float4 lf[4], rf[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) lf[i] = *reinterpret_cast<const float4*>(&left[orow + i][x4]);
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) rf[jj] = *reinterpret_cast<const float4*>(&sm.s.r[vc + jj][x4]);
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int jj = 0; jj < 4; ++jj) {
            off[i][jj] = fmaf(lf[i].x, rf[jj].x, off[i][jj]);
            off[i][jj] = fmaf(lf[i].y, rf[jj].y, off[i][jj]);
            off[i][jj] = fmaf(lf[i].z, rf[jj].z, off[i][jj]);
            off[i][jj] = fmaf(lf[i].w, rf[jj].w, off[i][jj]);
          }
      }
    }

#pragma unroll
    for (int xx = 0; xx < kSD / 8; ++xx) {
      const int xd = e + 8 * xx;
      const float k0 = sm.s.k[s0][xd], q0 = sm.s.q[s0][xd];
      const float k1 = sm.s.k[s1][xd], q1 = sm.s.q[s1][xd];
      dm0 = fmaf(q0, k0, dm0);
      dm1 = fmaf(q1, k1, dm1);
      float diff = 0.0f;  // Σ g_u for u from s+1 to r
#pragma unroll
      for (int it = 0; it < 15; ++it) {
        const bool second = it >= n0;
        if (it == n0) diff = 0.0f;
        const int r = kSub * ib + 1 + it + (second ? 0 : p);
        diff += sm.s.g[r][xd];
        const float tk = (second ? k1 : k0) * decay_exp<FAST>(diff);
        da[it] = fmaf(sm.s.k[r][xd], tk, da[it]);
        dm[it] = fmaf(sm.s.q[r][xd], tk, dm[it]);
      }
    }
    __syncthreads();
  }

  // The slice arrays are dead: A and M take their place.
#pragma unroll
  for (int it = 0; it < 15; ++it) {
    da[it] = lane8_sum(da[it]);
    dm[it] = lane8_sum(dm[it]);
  }
  dm0 = lane8_sum(dm0);
  dm1 = lane8_sum(dm1);
  for (int idx = t; idx < kChunk * kChunk; idx += kThreads) {
    const int r = idx / kChunk, s = idx % kChunk;
    if (s >= r) sm.m.a[r][s] = 0.0f;
    if (s > r) sm.m.m[r][s] = 0.0f;
  }
  if (t < 2 * kOffTiles) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int r = orow + i, s = ocol + jj;
        if (mat == 0)
          sm.m.a[r][s] = beta_s[r] * off[i][jj];
        else
          sm.m.m[r][s] = off[i][jj];
      }
  }
  if (e == 0) {
#pragma unroll
    for (int it = 0; it < 15; ++it) {
      const bool second = it >= n0;
      const int r = kSub * ib + 1 + it + (second ? 0 : p), s = second ? s1 : s0;
      sm.m.a[r][s] = beta_s[r] * da[it];
      sm.m.m[r][s] = dm[it];
    }
    sm.m.m[s0][s0] = dm0;
    sm.m.m[s1][s1] = dm1;
  }
  __syncthreads();

  // Forward substitution, one column per thread: threads < DL solve W's column (right-hand side
  // over g, then Q' = Qγ − M·W over q), threads DL…2DL−1 U's column (right-hand side β·v, then
  // P = M·U into o). The column lives in registers (all indices static). Inputs are fetched 8 rows
  // ahead: as far as the compiler knows, the stores of one row could alias the loads of the next.
  if (t >= 2 * DL) return;
  const bool is_u = t >= DL;
  const int col = is_u ? t - DL : t;
  float* const p1 = (is_u ? vbase : gbase) + col;
  const int ld1 = static_cast<int>(is_u ? a.ld_qkv : a.ld_g);  // 32-bit: fewer live registers (host checks the range)
  float* const p2 = is_u ? a.o + row0 * a.ld_o + h * DL + col : qbase + col;
  const int ld2 = static_cast<int>(is_u ? a.ld_o : a.ld_qkv);
  float xcol[kChunk];
  {
    float next[kSolveAhead];
#pragma unroll
    for (int i = 0; i < kSolveAhead; ++i) next[i] = i < len ? p1[i * ld1] : 0.0f;
#pragma unroll
    for (int rb = 0; rb < kChunk / kSolveAhead; ++rb) {
      float cur[kSolveAhead];
#pragma unroll
      for (int i = 0; i < kSolveAhead; ++i) cur[i] = next[i];
      if (rb + 1 < kChunk / kSolveAhead) {
#pragma unroll
        for (int i = 0; i < kSolveAhead; ++i) {
          const int r = (rb + 1) * kSolveAhead + i;
          next[i] = r < len ? p1[r * ld1] : 0.0f;
        }
      }
#pragma unroll
      for (int i = 0; i < kSolveAhead; ++i) {
        const int r = rb * kSolveAhead + i;
        float acc = is_u ? beta_s[r] * cur[i] : cur[i];
#pragma unroll
        for (int s4 = 0; s4 < r; s4 += 4) {
          const float4 av = *reinterpret_cast<const float4*>(&sm.m.a[r][s4]);
          acc = fmaf(-av.x, xcol[s4], acc);
          if (s4 + 1 < r) acc = fmaf(-av.y, xcol[s4 + 1], acc);
          if (s4 + 2 < r) acc = fmaf(-av.z, xcol[s4 + 2], acc);
          if (s4 + 3 < r) acc = fmaf(-av.w, xcol[s4 + 3], acc);
        }
        xcol[r] = acc;
        if (r < len) p1[r * ld1] = acc;
      }
    }
  }
  {
    float next[kSolveAhead];
#pragma unroll
    for (int i = 0; i < kSolveAhead; ++i) next[i] = !is_u && i < len ? p2[i * ld2] : 0.0f;
#pragma unroll
    for (int rb = 0; rb < kChunk / kSolveAhead; ++rb) {
      float cur[kSolveAhead];
#pragma unroll
      for (int i = 0; i < kSolveAhead; ++i) cur[i] = next[i];
      if (rb + 1 < kChunk / kSolveAhead) {
#pragma unroll
        for (int i = 0; i < kSolveAhead; ++i) {
          const int r = (rb + 1) * kSolveAhead + i;
          next[i] = !is_u && r < len ? p2[r * ld2] : 0.0f;
        }
      }
#pragma unroll
      for (int i = 0; i < kSolveAhead; ++i) {
        const int r = rb * kSolveAhead + i;
        float y = 0.0f;
#pragma unroll
        for (int s4 = 0; s4 <= r; s4 += 4) {
          const float4 mv = *reinterpret_cast<const float4*>(&sm.m.m[r][s4]);
          y = fmaf(mv.x, xcol[s4], y);
          if (s4 + 1 <= r) y = fmaf(mv.y, xcol[s4 + 1], y);
          if (s4 + 2 <= r) y = fmaf(mv.z, xcol[s4 + 2], y);
          if (s4 + 3 <= r) y = fmaf(mv.w, xcol[s4 + 3], y);
        }
        if (r < len) p2[r * ld2] = is_u ? y : cur[i] - y;
      }
    }
  }
}

}  // namespace

void launch_chunk_intra(const ChunkArgs& a, int64_t head_dim, cudaStream_t stream) {
  const bool fast = kda_fast_exp();
  const dim3 grid(static_cast<unsigned>(a.chunks), static_cast<unsigned>(a.heads));
  dispatch_head_dim(head_dim, [&](auto dl) {
    if (fast) chunk_intra_kernel<decltype(dl)::value, true><<<grid, kThreads, 0, stream>>>(a);
    else chunk_intra_kernel<decltype(dl)::value, false><<<grid, kThreads, 0, stream>>>(a);
  });
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda::kda_detail

namespace ft::cuda {
namespace {
std::atomic<int> g_fast_exp{policy_from_env("FLASHTIER_KDA_FAST_EXP")};
}
bool kda_fast_exp() { return g_fast_exp.load(std::memory_order_relaxed) == 2; }
void set_kda_fast_exp(int policy) { g_fast_exp.store(policy, std::memory_order_relaxed); }
}  // namespace ft::cuda
