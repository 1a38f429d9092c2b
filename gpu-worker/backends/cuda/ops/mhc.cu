#include "gpu-worker/backends/cuda/ops/mhc.h"

#include <string>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/programmatic.cuh"
#include "gpu-worker/backends/cuda/ops/misc_device.cuh"
#include "shared/core/error.h"

namespace ft::cuda {
namespace {

using misc::for_each_chunk;
using misc::load_chunk;
using misc::sigmoid_ref;
using misc::store_chunk;

// site_in: 8 worker warps stream the token's values; one more warp runs the mixing map and
// Sinkhorn (a chain of ~40 dependent divisions per entry, HC·HC entries at once) while the
// workers collapse and normalise, since the collapse needs only pre.
constexpr int kWorkers = 256;
constexpr int kWorkerWarps = kWorkers / 32;
constexpr int kSiteInThreads = kWorkers + 32;
constexpr int kSiteOutThreads = 256;
// HC: the model's hc_mult (and the tiny configs' 1…3). D: y lives in shared memory, D floats
// under the 48 KiB default limit.
constexpr int kMaxHc = 4;
constexpr int64_t kMaxDim = 8192;

// m = m_raw·r: the projection of x̃ = x̂·r.
__device__ __forceinline__ float mix_logit(const float* m_raw, int k, float r) { return __fmul_rn(m_raw[k], r); }

// pre_i = σ(s0·m_i + b_i) + ε_hc. Workers and the mixing lane run this same code, so the pre
// used by the collapse and the pre written to the mix are the same bits.
template <int HC>
__device__ __forceinline__ void mhc_pre(const float* m_raw, float r, const float* base, float s0, float hc_eps,
                                        float (&pre)[HC]) {
#pragma unroll
  for (int i = 0; i < HC; ++i)
    pre[i] = __fadd_rn(sigmoid_ref(__fadd_rn(__fmul_rn(s0, mix_logit(m_raw, i, r)), base[i])), hc_eps);
}

// mhc_mix after the projection, and sinkhorn(), op for op (shared/ops/mhc.cpp), by one warp:
// lane i·HC + j holds Z[i][j]. Every row or column sum gathers its HC terms with shuffles and
// adds them in the reference's order (i or j ascending), so each lane computes the same bits the
// serial loop does; the ~40 dependent divisions now run HC·HC at a time.
template <int HC>
__device__ void mhc_mix_token_warp(const float* m_raw, float r, const float* base, const float* scale, float hc_eps,
                                   int64_t iters, float* mix) {
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x & 31;
  const int me = lane < HC * HC ? lane : 0;  // idle lanes shadow lane 0 and write nothing
  const int i = me / HC, j = me % HC;
  if (lane == 0) {
    float pre[HC];
    mhc_pre<HC>(m_raw, r, base, scale[0], hc_eps, pre);
#pragma unroll
    for (int q = 0; q < HC; ++q) mix[q] = pre[q];
  } else if (lane <= HC) {
    const int q = lane - 1;
    mix[HC + q] = __fmul_rn(2.0f, sigmoid_ref(__fadd_rn(__fmul_rn(scale[1], mix_logit(m_raw, HC + q, r)), base[HC + q])));
  }
  const int k = 2 * HC + me;
  float z = __fadd_rn(__fmul_rn(scale[2], mix_logit(m_raw, k, r)), base[k]);

  // Row softmax, then + ε_hc on every entry.
  float mx = __shfl_sync(kAll, z, i * HC);
#pragma unroll
  for (int q = 1; q < HC; ++q) {
    const float v = __shfl_sync(kAll, z, i * HC + q);
    mx = mx < v ? v : mx;  // std::max, in the reference's order
  }
  z = expf(__fsub_rn(z, mx));
  float sum = 0.0f;
#pragma unroll
  for (int q = 0; q < HC; ++q) sum = __fadd_rn(sum, __shfl_sync(kAll, z, i * HC + q));
  z = __fadd_rn(__fdiv_rn(z, sum), hc_eps);

  auto col_step = [&] {
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < HC; ++q) s = __fadd_rn(s, __shfl_sync(kAll, z, q * HC + j));
    z = __fdiv_rn(z, __fadd_rn(s, hc_eps));
  };
  auto row_step = [&] {
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < HC; ++q) s = __fadd_rn(s, __shfl_sync(kAll, z, i * HC + q));
    z = __fdiv_rn(z, __fadd_rn(s, hc_eps));
  };
  col_step();
  for (int64_t it = 1; it < iters; ++it) {
    row_step();
    col_step();
  }
  if (lane < HC * HC) mix[2 * HC + lane] = z;
}

struct SiteInArgs {
  const float* X;
  const float* m_raw;
  int64_t ld_m;
  const float* base;
  const float* scale;
  const float* norm_w;
  int64_t dim;
  float rms_eps, hc_eps;
  int64_t iters;
  float* mix;
  float* a;
  int64_t ld_a;
  float* y;  // optional
};

// r = 1/rms(x̂) of a token's flattened streams Xt[0, n): threads below kWorkers sum the squares
// in fixed chunks and warps, then every thread of the block folds the warp sums in the same
// order — one value, the same bits in every kernel that calls it. Holds a block-wide barrier.
template <bool VEC>
__device__ __forceinline__ float streams_inv_rms(const float* Xt, int64_t n, float eps, double* partial_x) {
  const int tid = threadIdx.x;
  if (tid < kWorkers) {
    misc::SumSq acc;
    for_each_chunk<8, VEC, 1>(&Xt, n, tid, kWorkers, [&](int64_t, const auto& v, int cnt) {
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (k < cnt) acc.add(v[0][k]);
    });
    const double v = misc::warp_sum(acc.value());
    if ((tid & 31) == 0) partial_x[tid >> 5] = v;
  }
  __syncthreads();
  double ssx = partial_x[0];
#pragma unroll
  for (int w = 1; w < kWorkerWarps; ++w) ssx += partial_x[w];
  return misc::inv_rms(ssx, n, eps);
}

// One block per token: [x̂ sum of squares] → r; then the mixing lane writes mix (unless the mix is
// computed apart: p.mix null) while the workers form y = Σ pre_i·X_i (kept in shared memory), its
// sum of squares, and a = (y·r_y)·w.
template <int HC, bool VEC>
__global__ void __launch_bounds__(kSiteInThreads) mhc_site_in_kernel(SiteInArgs p) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  constexpr int NMIX = (2 + HC) * HC;
  extern __shared__ __align__(16) float y_s[];  // [D]; float4 chunks on the VEC path
  __shared__ double partial_x[kWorkerWarps], partial_y[kWorkerWarps];
  const int64_t t = blockIdx.x, D = p.dim, n = HC * D;
  const int tid = threadIdx.x;
  const float* Xt = p.X + t * n;
  const float* mt = p.m_raw + t * p.ld_m;

  // The last block-wide barrier is inside: the mixing warp leaves after it.
  const float rx = streams_inv_rms<VEC>(Xt, n, p.rms_eps, partial_x);

  if (tid >= kWorkers) {
    if (p.mix) mhc_mix_token_warp<HC>(mt, rx, p.base, p.scale, p.hc_eps, p.iters, p.mix + t * NMIX);
    return;
  }

  float pre[HC];
  mhc_pre<HC>(mt, rx, p.base, p.scale[0], p.hc_eps, pre);
  const float* streams[HC];
#pragma unroll
  for (int i = 0; i < HC; ++i) streams[i] = Xt + i * D;
  misc::SumSq acc;
  for_each_chunk<2, VEC, HC>(streams, D, tid, kWorkers, [&](int64_t c, const auto& v, int cnt) {
    float yv[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // mhc_collapse starts each sum at 0 (so −0 products give +0)
#pragma unroll
    for (int i = 0; i < HC; ++i)
#pragma unroll
      for (int k = 0; k < 4; ++k) yv[k] = __fadd_rn(yv[k], __fmul_rn(pre[i], v[i][k]));
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (k < cnt) acc.add(yv[k]);
    store_chunk<VEC>(y_s, D, c, yv);
    if (p.y) store_chunk<VEC>(p.y + t * D, D, c, yv);
  });
  const double ssy = misc::group_sum<kWorkerWarps>(acc.value(), partial_y, [] { misc::named_barrier(1, kWorkers); });
  const float ry = misc::inv_rms(ssy, D, p.rms_eps);

  // The same chunks this thread wrote to y_s (no barrier needed for them).
  const float* const yw[2] = {y_s, p.norm_w};
  float* at = p.a + t * p.ld_a;
  for_each_chunk<4, VEC, 2>(yw, D, tid, kWorkers, [&](int64_t c, const auto& v, int) {
    float o[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) o[k] = __fmul_rn(__fmul_rn(v[0][k], ry), v[1][k]);
    store_chunk<VEC>(at, D, c, o);
  });
}

// The mix alone (mhc_site_mix): one block of kWorkers threads per token, r as site_in computes
// it, then warp 0 runs the mixing map and Sinkhorn.
template <int HC, bool VEC>
__global__ void __launch_bounds__(kWorkers) mhc_site_mix_kernel(SiteInArgs p) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  constexpr int NMIX = (2 + HC) * HC;
  __shared__ double partial_x[kWorkerWarps];
  const int64_t t = blockIdx.x, n = HC * p.dim;
  const float rx = streams_inv_rms<VEC>(p.X + t * n, n, p.rms_eps, partial_x);
  if (threadIdx.x < 32)
    mhc_mix_token_warp<HC>(p.m_raw + t * p.ld_m, rx, p.base, p.scale, p.hc_eps, p.iters, p.mix + t * NMIX);
}

// One thread per 4 consecutive d of one token: reads every stream's chunk before writing any.
template <int HC, bool VEC, bool ROUTED>
__global__ void __launch_bounds__(kSiteOutThreads)
    mhc_site_out_kernel(const float* mix, const float* o, int64_t ld_o, int64_t D, float* X, const RoutedSum r) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  constexpr int NMIX = (2 + HC) * HC;
  const int64_t t = blockIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kSiteOutThreads + threadIdx.x;
  if (4 * c >= D) return;
  const float* mt = mix + t * NMIX;
  float* Xt = X + t * HC * D;

  float old[HC][4], ov[4];
#pragma unroll
  for (int i = 0; i < HC; ++i) load_chunk<VEC>(Xt + i * D, D, c, old[i]);
  load_chunk<VEC>(o + t * ld_o, D, c, ov);
  if constexpr (ROUTED) {  // moe_combine's sum and store, in registers
    float rs[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k = 0; k < r.top_k; ++k) {
      const int64_t p = t * r.top_k + k;
      const float w = r.weight[p];
      float v[4];
      load_chunk<VEC>(r.Y + p * D, D, c, v);
#pragma unroll
      for (int i = 0; i < 4; ++i) rs[i] = __fadd_rn(rs[i], __fmul_rn(w, v[i]));
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) ov[i] = r.accumulate ? __fadd_rn(ov[i], rs[i]) : rs[i];
  }
#pragma unroll
  for (int j = 0; j < HC; ++j) {
    const float post = mt[HC + j];
    float s[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) s[k] = __fmul_rn(post, ov[k]);
#pragma unroll
    for (int i = 0; i < HC; ++i) {
      const float m = mt[2 * HC + i * HC + j];
#pragma unroll
      for (int k = 0; k < 4; ++k) s[k] = __fadd_rn(s[k], __fmul_rn(m, old[i][k]));
    }
    store_chunk<VEC>(Xt + j * D, D, c, s);
  }
}

template <int HC>
void launch_site_in(const SiteInArgs& a, int64_t n_tokens, bool vec, cudaStream_t stream) {
  const auto smem = static_cast<size_t>(a.dim) * sizeof(float);
  if (vec)
    launch_chained(mhc_site_in_kernel<HC, true>, static_cast<unsigned>(n_tokens), kSiteInThreads, smem, stream, a);
  else
    launch_chained(mhc_site_in_kernel<HC, false>, static_cast<unsigned>(n_tokens), kSiteInThreads, smem, stream, a);
  FT_CUDA_CHECK_LAUNCH();
}

template <int HC>
void launch_site_mix(const SiteInArgs& a, int64_t n_tokens, bool vec, cudaStream_t stream) {
  if (vec)
    launch_chained(mhc_site_mix_kernel<HC, true>, static_cast<unsigned>(n_tokens), kWorkers, 0, stream, a);
  else
    launch_chained(mhc_site_mix_kernel<HC, false>, static_cast<unsigned>(n_tokens), kWorkers, 0, stream, a);
  FT_CUDA_CHECK_LAUNCH();
}

template <int HC, bool ROUTED>
void launch_site_out(const float* mix, const float* o, int64_t ld_o, int64_t n_tokens, int64_t D, float* X, bool vec,
                     const RoutedSum& r, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(n_tokens),
                  static_cast<unsigned>((D + 4 * kSiteOutThreads - 1) / (4 * kSiteOutThreads)));
  if (vec)
    launch_chained(mhc_site_out_kernel<HC, true, ROUTED>, grid, kSiteOutThreads, 0, stream, mix, o, ld_o, D, X, r);
  else
    launch_chained(mhc_site_out_kernel<HC, false, ROUTED>, grid, kSiteOutThreads, 0, stream, mix, o, ld_o, D, X, r);
  FT_CUDA_CHECK_LAUNCH();
}

// f.template operator()<HC>() for the model's hc (1…4; check_shape has vetted it).
template <class F>
void with_hc(int64_t hc, F&& f) {
  switch (hc) {
    case 1:
      return f.template operator()<1>();
    case 2:
      return f.template operator()<2>();
    case 3:
      return f.template operator()<3>();
    default:
      return f.template operator()<4>();
  }
}

void check_shape(const char* what, int64_t hc, int64_t dim) {
  if (hc < 1 || hc > kMaxHc || dim < 1 || dim > kMaxDim)
    throw Error(std::string(what) + ": unsupported shape hc " + std::to_string(hc) + ", dim " + std::to_string(dim) +
                " (hc 1.." + std::to_string(kMaxHc) + ", dim ≤ " + std::to_string(kMaxDim) + ")");
}

}  // namespace

void mhc_site_in(const MhcSite& p, const float* X, const float* m_raw, int64_t ld_m, int64_t n_tokens, float* mix,
                 float* a, int64_t ld_a, float* y, cudaStream_t stream) {
  check_shape("mhc_site_in", p.hc, p.dim);
  if (ld_m < mhc_nmix(p.hc) || ld_a < p.dim) throw Error("mhc_site_in: ld_m or ld_a narrower than a row");
  if (n_tokens <= 0) return;
  const SiteInArgs args{X,   m_raw, ld_m, p.base, p.scale, p.norm_w, p.dim, p.rms_eps, p.hc_eps, p.sinkhorn_iters,
                        mix, a,     ld_a, y};
  const bool vec = p.dim % 4 == 0 && ld_a % 4 == 0 && misc::aligned16(X) && misc::aligned16(a) &&
                   misc::aligned16(p.norm_w) && (!y || misc::aligned16(y));
  with_hc(p.hc, [&]<int HC>() { launch_site_in<HC>(args, n_tokens, vec, stream); });
}

void mhc_site_mix(const MhcSite& p, const float* X, const float* m_raw, int64_t ld_m, int64_t n_tokens, float* mix,
                  cudaStream_t stream) {
  check_shape("mhc_site_mix", p.hc, p.dim);
  if (ld_m < mhc_nmix(p.hc)) throw Error("mhc_site_mix: ld_m narrower than a row");
  if (!mix) throw Error("mhc_site_mix: no mix output");
  if (n_tokens <= 0) return;
  const SiteInArgs args{X,   m_raw,   ld_m, p.base, p.scale, nullptr, p.dim, p.rms_eps, p.hc_eps, p.sinkhorn_iters,
                        mix, nullptr, 0,    nullptr};
  // VEC only changes how values load, not the order they add in: site_in's r, bit for bit.
  const bool vec = p.dim % 4 == 0 && misc::aligned16(X);
  with_hc(p.hc, [&]<int HC>() { launch_site_mix<HC>(args, n_tokens, vec, stream); });
}

void mhc_site_out(const float* mix, const float* o, int64_t ld_o, int64_t n_tokens, int64_t hc, int64_t dim, float* X,
                  cudaStream_t stream, const RoutedSum* routed) {
  check_shape("mhc_site_out", hc, dim);
  if (ld_o < dim) throw Error("mhc_site_out: ld_o narrower than a row");
  if (routed && (!routed->Y || !routed->weight || routed->top_k <= 0))
    throw Error("mhc_site_out: routed sum without expert rows, weights or top_k");
  if (n_tokens <= 0) return;
  const bool vec = dim % 4 == 0 && ld_o % 4 == 0 && misc::aligned16(X) && misc::aligned16(o) &&
                   (!routed || misc::aligned16(routed->Y));
  const RoutedSum r = routed ? *routed : RoutedSum{};
  with_hc(hc, [&]<int HC>() {
    if (routed) launch_site_out<HC, true>(mix, o, ld_o, n_tokens, dim, X, vec, r, stream);
    else launch_site_out<HC, false>(mix, o, ld_o, n_tokens, dim, X, vec, r, stream);
  });
}

}  // namespace ft::cuda
