// Grouped EXL3 MoE (moe.h): expert tables, zero-copy mapping, the two transform kernels and the
// launch sequence. The matmul kernel is moe_kernel.cuh.
#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/exl3/exl3_linear.h"
#include "gpu-worker/backends/cuda/exl3/launch_util.h"
#include "gpu-worker/backends/cuda/exl3/moe.h"
#include "gpu-worker/backends/cuda/exl3/moe_gemm_kernel.cuh"
#include "gpu-worker/backends/cuda/exl3/transform.cuh"
#include "gpu-worker/backends/cuda/exl3/wgmma_prefill.h"
#include "shared/core/error.h"
#include "shared/exl3/expert_block.h"

namespace ft::cuda {
namespace {

using namespace exl3dev;

// swiglu_clamped (shared/ops/swiglu.cpp) for one value: std::min / std::clamp spelled out, silu
// as g·(1/(1 + e^−g)) with IEEE division.
__device__ __forceinline__ float swiglu_one(float g, float u, float limit) {
  g = limit < g ? limit : g;
  u = u < -limit ? -limit : (limit < u ? limit : u);
  const float sig = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-g)));
  return __fmul_rn(__fmul_rn(g, sig), u);
}

// Gate/up inputs: one CTA per (sorted position s, projection): x of the pick's token ⊙ the
// pick's expert's suh. Grids cover every pick; positions past the dispatched count (*n_sorted:
// picks left out, e.g. those another tier computes) return at once.
__global__ void __launch_bounds__(kTransformMaxThreads)
    moe_gu_input_kernel(const Exl3ExpertPtrs* table, const int32_t* expert, const int32_t* sorted_pick,
                        const int32_t* n_sorted, int top_k, const float* x, int64_t ld_x, int64_t D, int64_t D_p,
                        __half* xh, float* rs, int64_t P) {
  const int64_t s = blockIdx.x;
  if (s >= *n_sorted) return;
  const int proj = blockIdx.y;
  const int pick = sorted_pick[s];
  const float* row = x + static_cast<int64_t>(pick / top_k) * ld_x;
  const __half* suh = table[expert[pick]].suh[proj];
  transform_row([&](int64_t c) { return c < D ? row[c] : 0.0f; }, suh, D_p, xh + (proj * P + s) * D_p,
                rs + proj * P + s);
}

// SwiGLU of the gate/up outputs and the down projection's input transform, per row.
__global__ void __launch_bounds__(kTransformMaxThreads)
    swiglu_input_kernel(const float* g, const float* u, int64_t ld, int64_t I_p, float limit, const __half* suh,
                        const Exl3ExpertPtrs* table, const int32_t* expert, const int32_t* sorted_pick,
                        const int32_t* n_sorted, __half* xh, float* rs) {
  const int64_t s = blockIdx.x;
  if (n_sorted && s >= *n_sorted) return;
  const float* gr = g + s * ld;
  const float* ur = u + s * ld;
  const __half* sd = table ? table[expert[sorted_pick[s]]].suh[ft::exl3::kDown] : suh;
  transform_row([&](int64_t c) { return swiglu_one(gr[c], ur[c], limit); }, sd, I_p, xh + s * I_p, rs + s);
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// Batches of at most this many picks split K over CTAs (a batch-1 layer has 8 experts: too few
// (expert, block) items for the GPU otherwise); bounds the partial sums' size.
constexpr int64_t kSplitPicks = 64;

struct MoeWs {
  size_t counters, partials, xh_gu, rs_gu, gu, xh_d, rs_d, total;
};
MoeWs moe_ws(const Exl3MoeLayer& L, int64_t P) {
  const int64_t Dp = ft::exl3::pad128(L.hidden), Ip = ft::exl3::pad128(L.inter);
  const int64_t Ps = std::min(P, kSplitPicks);
  const int64_t cgu = Dp / exl3_k_chunk(Dp, Ip), cd = Ip / exl3_k_chunk(Ip, Dp);
  MoeWs w;
  w.counters = 0;
  // The counters' region does not depend on P: one workspace serves every step, and a step with
  // more picks must not find its counters on the partial sums a smaller one left (non-zero: the
  // block's last chunk would never be seen).
  w.partials = align256(static_cast<size_t>(kSplitPicks * 2 * (std::max(Ip, Dp) / 128)) * 4);
  w.xh_gu = w.partials + align256(static_cast<size_t>(std::max(2 * cgu * Ps * Ip, cd * Ps * Dp)) * 4);
  w.rs_gu = w.xh_gu + align256(static_cast<size_t>(2 * P * Dp) * 2);
  w.gu = w.rs_gu + align256(static_cast<size_t>(2 * P) * 4);
  w.xh_d = w.gu + align256(static_cast<size_t>(2 * P * Ip) * 4);
  w.rs_d = w.xh_d + align256(static_cast<size_t>(P * Ip) * 2);
  w.total = w.rs_d + align256(static_cast<size_t>(P) * 4);
  return w;
}

void launch_moe_k(int K, int cb, int grid, const MoeArgs& a, cudaStream_t s) {
  exl3dev::dispatch_k(K, [&](auto k) { launch_moe<decltype(k)::value>(cb, grid, a, s); });
}

constexpr int kNoGemm = std::numeric_limits<int>::max();

// Experts with more than one 32-row batch of picks run the prefill form. FLASHTIER_EXL3_MOE_GEMM_FROM
// = N (picks, ≥ 1) or off overrides it for the process (benchmarks time both forms; any value
// gives the same bits).
int default_gemm_from() {
  static const int v = [] {
    const char* e = std::getenv("FLASHTIER_EXL3_MOE_GEMM_FROM");
    if (!e || !*e) return exl3dev::kMoeRows + 1;
    if (std::string(e) == "off") return kNoGemm;
    const int n = std::atoi(e);
    return n >= 1 ? n : exl3dev::kMoeRows + 1;
  }();
  return v;
}

void launch_moe_gemm_k(int K, int cb, int grid, const MoeArgs& a, bool wide, cudaStream_t s) {
  exl3dev::dispatch_k(K, [&](auto k) { launch_moe_gemm<decltype(k)::value>(cb, grid, a, wide, s); });
}

// One matmul of the layer over every dispatched pick: experts with at least gemm_from picks in
// the prefill form (one CTA per SM: 256 threads of ~200–240 registers), the rest in 32-row
// batches (8 CTAs per SM). Both grids are fixed; their items come from the dispatch.
void launch_matmul(int K, int cb, int gemm_from, const MoeArgs& a, cudaStream_t s) {
  if (gemm_from > 1) {
    MoeArgs b = a;
    b.max_rows = gemm_from - 1;
    launch_moe_k(K, cb, 8 * exl3dev::sm_count(), b, s);
  }
  if (gemm_from != kNoGemm) {
    MoeArgs g = a;
    g.min_rows = gemm_from;
    // Auto: the wide shape wherever it fits (launch_moe_gemm checks).
    launch_moe_gemm_k(K, cb, exl3dev::sm_count(), g, exl3dev::wide_requested(true), s);
  }
}

const char* proj_name(int p) { return p == 0 ? "gate" : p == 1 ? "up" : "down"; }

}  // namespace

Exl3MoeLayer exl3_moe_geometry(const uint8_t* host_block, int n_experts) {
  const ft::exl3::ExpertView v = ft::exl3::view_expert_block(host_block);
  if (n_experts <= 0 || n_experts > kMoeMaxExperts)
    throw Error("exl3 MoE: " + std::to_string(n_experts) + " experts (1…" + std::to_string(kMoeMaxExperts) +
                " supported)");
  Exl3MoeLayer L;
  L.hidden = static_cast<int64_t>(v.header->hidden);
  L.inter = static_cast<int64_t>(v.header->inter);
  L.n_experts = n_experts;
  for (int p = 0; p < 3; ++p) {
    L.K[p] = v.proj[p].K;
    L.codebook[p] = v.proj[p].codebook;
    if (L.K[p] < 1 || L.K[p] > 8 || static_cast<int>(L.codebook[p]) > 2)
      throw Error(std::string("exl3 MoE: expert block ") + proj_name(p) + " has K " + std::to_string(L.K[p]) +
                  ", codebook " + std::to_string(static_cast<int>(L.codebook[p])));
  }
  return L;
}

void exl3_moe_check_block(const Exl3MoeLayer& L, const uint8_t* host_block, int expert) {
  const ft::exl3::ExpertView v = ft::exl3::view_expert_block(host_block);
  if (static_cast<int64_t>(v.header->hidden) != L.hidden || static_cast<int64_t>(v.header->inter) != L.inter)
    throw Error("exl3 MoE: expert " + std::to_string(expert) + " is " + std::to_string(v.header->hidden) + "×" +
                std::to_string(v.header->inter) + ", the layer " + std::to_string(L.hidden) + "×" +
                std::to_string(L.inter));
  for (int p = 0; p < 3; ++p)
    if (v.proj[p].K != L.K[p] || v.proj[p].codebook != L.codebook[p])
      throw Error("exl3 MoE: expert " + std::to_string(expert) + " " + proj_name(p) + " is K " +
                  std::to_string(v.proj[p].K) + " " + ft::exl3::codebook_name(v.proj[p].codebook) +
                  ", the layer's K " + std::to_string(L.K[p]) + " " + ft::exl3::codebook_name(L.codebook[p]) +
                  " (K and codebook must be uniform within a layer)");
}

Exl3ExpertPtrs exl3_expert_ptrs(const uint8_t* host_block, const void* device_block) {
  const ft::exl3::ExpertView v = ft::exl3::view_expert_block(host_block);
  const auto* base = static_cast<const unsigned char*>(device_block);
  Exl3ExpertPtrs e;
  for (int p = 0; p < 3; ++p) {
    const ft::exl3::ProjHeader& ph = v.header->proj[p];
    e.trellis[p] = reinterpret_cast<const uint32_t*>(base + ph.trellis_offset);
    e.suh[p] = reinterpret_cast<const __half*>(base + ph.suh_offset);
    e.svh[p] = reinterpret_cast<const __half*>(base + ph.svh_offset);
  }
  return e;
}

void* exl3_map_host_experts(void* host, size_t bytes) {
  cudaError_t err = cudaHostRegister(host, bytes, cudaHostRegisterMapped | cudaHostRegisterReadOnly);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    err = cudaHostRegister(host, bytes, cudaHostRegisterMapped);
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error(std::string("cudaHostRegister of ") + std::to_string(bytes) + " bytes of expert memory failed: " +
                cudaGetErrorString(err));
  }
  void* dev = nullptr;
  FT_CUDA_CHECK(cudaHostGetDevicePointer(&dev, host, 0));
  return dev;
}

void exl3_unmap_host_experts(void* host) { FT_CUDA_CHECK(cudaHostUnregister(host)); }

size_t exl3_moe_workspace_bytes(const Exl3MoeLayer& L, int64_t max_n, int top_k) {
  return moe_ws(L, std::max<int64_t>(1, max_n * top_k)).total;
}

size_t exl3_moe_workspace_counters_end(const Exl3MoeLayer& L, int64_t n, int top_k) {
  return moe_ws(L, std::max<int64_t>(1, n * top_k)).partials;
}

void exl3_moe_workspace_init(void* workspace, size_t bytes, cudaStream_t stream) {
  FT_CUDA_CHECK(cudaMemsetAsync(workspace, 0, bytes, stream));
}

void exl3_swiglu_input_transform(const float* g, const float* u, int64_t ld, int64_t rows, int64_t inter_p,
                                 float limit, const __half* suh, __half* xh, float* row_scale, cudaStream_t stream) {
  if (rows <= 0) return;
  swiglu_input_kernel<<<static_cast<unsigned>(rows), transform_threads(inter_p), 0, stream>>>(
      g, u, ld, inter_p, limit, suh, nullptr, nullptr, nullptr, nullptr, xh, row_scale);
  FT_CUDA_CHECK_LAUNCH();
}

void exl3_moe_experts(const Exl3MoeLayer& L, const MoeRoutes& r, const MoeDispatch& d, const float* x,
                      int64_t ld_x, float limit, float* Y, void* workspace, cudaStream_t stream) {
  const int64_t P = r.n * r.top_k;
  if (P <= 0) return;
  if (!L.table || L.n_experts <= 0 || L.n_experts > kMoeMaxExperts || P > 0x7fffffff)
    throw Error("exl3_moe_experts: bad layer or batch (" + std::to_string(L.n_experts) + " experts, " +
                std::to_string(P) + " picks)");
  const int64_t D = L.hidden, I = L.inter, Dp = ft::exl3::pad128(D), Ip = ft::exl3::pad128(I);
  const MoeWs w = moe_ws(L, P);
  auto* base = static_cast<unsigned char*>(workspace);
  auto* xh_gu = reinterpret_cast<__half*>(base + w.xh_gu);
  auto* rs_gu = reinterpret_cast<float*>(base + w.rs_gu);
  auto* gu = reinterpret_cast<float*>(base + w.gu);
  auto* xh_d = reinterpret_cast<__half*>(base + w.xh_d);
  auto* rs_d = reinterpret_cast<float*>(base + w.rs_d);

  moe_gu_input_kernel<<<dim3(static_cast<unsigned>(P), 2), transform_threads(Dp), 0, stream>>>(
      L.table, r.expert, d.sorted_pick, d.offsets + L.n_experts, r.top_k, x, ld_x, D, Dp, xh_gu, rs_gu, P);
  FT_CUDA_CHECK_LAUNCH();

  MoeArgs a;
  a.table = L.table;
  a.offsets = d.offsets;
  a.active = d.active;
  a.n_active = d.n_active;
  a.sorted_pick = d.sorted_pick;
  a.in_p = Dp;
  a.out_p = Ip;
  a.out_cols = Ip;
  a.kc_steps = exl3_k_chunk(Dp, Ip) / 16;
  a.ld_out = Ip;
  a.by_pick = 0;
  const bool split = P <= (L.split_picks < 0 ? kSplitPicks : std::min<int64_t>(L.split_picks, kSplitPicks));
  a.P = P;
  a.counters = reinterpret_cast<int*>(base + w.counters);
  a.partials = reinterpret_cast<float*>(base + w.partials);
  a.chunks = split ? static_cast<int>(Dp / exl3_k_chunk(Dp, Ip)) : 1;
  // Experts with at least this many picks run the prefill form (never in split steps).
  const int gemm_from = split ? kNoGemm : L.gemm_min_picks < 0 ? default_gemm_from() : std::max(1, L.gemm_min_picks);
  const bool same = L.K[0] == L.K[1] && L.codebook[0] == L.codebook[1];
  for (int pj = 0; pj < 2; ++pj) {
    a.xh[pj] = xh_gu + pj * P * Dp;
    a.row_scale[pj] = rs_gu + pj * P;
    a.out[pj] = gu + pj * P * Ip;
  }
  if (same) {
    a.nproj = 2;
    a.proj[0] = ft::exl3::kGate, a.proj[1] = ft::exl3::kUp;
    launch_matmul(L.K[0], static_cast<int>(L.codebook[0]), gemm_from, a, stream);
  } else {
    for (int pj = 0; pj < 2; ++pj) {
      MoeArgs b = a;
      b.nproj = 1;
      b.proj[0] = pj;
      b.xh[0] = a.xh[pj], b.row_scale[0] = a.row_scale[pj], b.out[0] = a.out[pj];
      launch_matmul(L.K[pj], static_cast<int>(L.codebook[pj]), gemm_from, b, stream);
    }
  }

  swiglu_input_kernel<<<static_cast<unsigned>(P), transform_threads(Ip), 0, stream>>>(
      gu, gu + P * Ip, Ip, Ip, limit, nullptr, L.table, r.expert, d.sorted_pick, d.offsets + L.n_experts, xh_d, rs_d);
  FT_CUDA_CHECK_LAUNCH();

  MoeArgs dn = a;
  dn.nproj = 1;
  dn.proj[0] = ft::exl3::kDown;
  dn.xh[0] = xh_d;
  dn.row_scale[0] = rs_d;
  dn.out[0] = Y;
  dn.by_pick = 1;
  dn.ld_out = D;
  dn.in_p = Ip;
  dn.out_p = Dp;
  dn.out_cols = D;
  dn.kc_steps = exl3_k_chunk(Ip, Dp) / 16;
  dn.chunks = split ? static_cast<int>(Ip / exl3_k_chunk(Ip, Dp)) : 1;
  launch_matmul(L.K[2], static_cast<int>(L.codebook[2]), gemm_from, dn, stream);
}

bool exl3_moe_wide_prefill_fits(int K) {
  return exl3dev::dispatch_k(K, [](auto k) { return exl3dev::moe_gemm_wide_fits<decltype(k)::value>(); });
}

}  // namespace ft::cuda
