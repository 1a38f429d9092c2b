#include "gpu-worker/backends/cuda/ops/router.h"

#include <string>

#include <atomic>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/env_policy.h"
#include "gpu-worker/backends/cuda/core/programmatic.cuh"
#include "gpu-worker/backends/cuda/ops/misc_device.cuh"
#include "gpu-worker/backends/cuda/ops/moe_dispatch_warp.cuh"
#include "shared/core/error.h"

namespace ft::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxExperts = 1024;  // a lane's taken-mask has one bit per element it owns (E / 32 ≤ 32)
constexpr int kMaxTopK = 32;       // one chosen expert per lane
constexpr int kMaxGroups = 32;     // one group per lane

struct RouteArgs {
  const float* logits;
  int64_t ld;
  int64_t n;
  const float* bias;
  int E, top_k, n_group, topk_group;
  bool norm;
  float scale;
  int32_t* experts;
  float* weights;
  float* margin;
};

// Per-warp shared layout: s[E], c[E], group scores[32], chosen ids in ascending order[32].
__host__ __device__ constexpr int warp_floats(int E) { return 2 * E + kMaxGroups + kMaxTopK; }

// select_experts + route's weights for one token per warp. The top-k is top_k (+1 for the
// margin) rounds of a warp argmax under the order (c descending, id ascending): a strict total
// order, so the butterfly merge gives every lane the same winner, and its first top_k winners
// are exactly topk_indices' first top_k.
__device__ __forceinline__ void route_token(const RouteArgs& p, float* smem, int warp, int lane, int64_t t) {
  const int E = p.E;
  float* s_s = smem + warp * warp_floats(E);
  float* c_s = s_s + E;
  float* g_s = c_s + E;
  int* sorted_s = reinterpret_cast<int*>(g_s + kMaxGroups);
  const float* lt = p.logits + t * p.ld;

  for (int e = lane; e < E; e += 32) {
    const float s = misc::sigmoid_ref(lt[e]);
    const float c = __fadd_rn(s, p.bias[e]);
    s_s[e] = s;
    c_s[e] = c == c ? c : -INFINITY;
  }
  __syncwarp();

  if (p.n_group > 1) {
    const int per = E / p.n_group;
    if (lane < p.n_group) {
      // The two largest c of the group, duplicates counted (topk_indices(…, 2) returns two ids).
      float b1 = -INFINITY, b2 = -INFINITY;
      for (int k = 0; k < per; ++k) {
        const float v = c_s[lane * per + k];
        if (v > b1) {
          b2 = b1;
          b1 = v;
        } else if (v > b2) {
          b2 = v;
        }
      }
      g_s[lane] = __fadd_rn(b1, b2);
    }
    __syncwarp();
    // Group g is kept iff fewer than topk_group groups are better (score, then lower id).
    bool kept = false;
    if (lane < p.n_group) {
      const float mine = g_s[lane];
      int rank = 0;
      for (int g = 0; g < p.n_group; ++g) {
        const float o = g_s[g];
        rank += (o > mine || (o == mine && g < lane)) ? 1 : 0;
      }
      kept = rank < p.topk_group;
    }
    const unsigned keep = __ballot_sync(0xffffffffu, kept);
    for (int e = lane; e < E; e += 32)
      if (!((keep >> (e / per)) & 1u)) c_s[e] = -INFINITY;
    __syncwarp();
  }

  const int rounds = p.top_k < E ? p.top_k + 1 : p.top_k;
  unsigned taken = 0;  // bit k: this lane's element lane + 32·k is chosen
  int my_e = -1;       // lane k < top_k: the k-th winner
  float my_c = 0.0f, next_c = -INFINITY;
  for (int r = 0; r < rounds; ++r) {
    float bc = -INFINITY;
    int be = -1;
    for (int k = 0, e = lane; e < E; ++k, e += 32) {
      if ((taken >> k) & 1u) continue;
      const float v = c_s[e];
      if (be < 0 || v > bc) {  // ascending e: the first of equal values (the lower id) stays
        bc = v;
        be = e;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float oc = __shfl_xor_sync(0xffffffffu, bc, o);
      const int oe = __shfl_xor_sync(0xffffffffu, be, o);
      if (oe >= 0 && (be < 0 || oc > bc || (oc == bc && oe < be))) {
        bc = oc;
        be = oe;
      }
    }
    if ((be & 31) == lane) taken |= 1u << (be >> 5);
    if (r == lane) my_e = be, my_c = bc;
    if (r == p.top_k) next_c = bc;
  }
  const float last_c = __shfl_sync(0xffffffffu, my_c, p.top_k - 1);

  // Ascending id order: each winner's position is the number of winners with a lower id.
  int pos = 0;
  for (int j = 0; j < p.top_k; ++j) pos += __shfl_sync(0xffffffffu, my_e, j) < my_e ? 1 : 0;
  if (lane < p.top_k) sorted_s[pos] = my_e;
  __syncwarp();
  float sum = 0.0f;
  for (int q = 0; q < p.top_k; ++q) sum = __fadd_rn(sum, s_s[sorted_s[q]]);
  if (lane < p.top_k) {
    const int e = sorted_s[lane];
    float w = s_s[e];
    if (p.norm) w = __fdiv_rn(w, __fadd_rn(sum, 1e-20f));
    w = __fmul_rn(w, p.scale);
    p.experts[t * p.top_k + lane] = e;
    p.weights[t * p.top_k + lane] = w;
  }
  if (p.margin && lane == 0) p.margin[t] = rounds > p.top_k ? __fsub_rn(last_c, next_c) : INFINITY;
}

// One token per warp (whole warps only). DISPATCH: the grid is one block holding every token,
// whose picks warp 0 then sorts (moe_dispatch_warp.cuh) once every warp has written its own.
template <bool DISPATCH>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) route_kernel(RouteArgs p, MoeDispatch d) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  extern __shared__ float smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (t < p.n) route_token(p, smem, warp, lane, t);
  if constexpr (DISPATCH) {
    __syncthreads();  // the block's expert ids are written and visible
    if (warp == 0) dispatch_picks_warp(p.experts, static_cast<int>(p.n) * p.top_k, p.E, d, lane);
  }
}

std::atomic<int> g_route_dispatch{policy_from_env("FLASHTIER_ROUTE_DISPATCH")};

}  // namespace

namespace {
// Launches the routing of n_tokens; with `dispatch`, the one-block form that also sorts the picks.
void launch_route(const float* logits, int64_t ld_logits, int64_t n_tokens, const float* correction_bias,
                  const RouterConfig& cfg, int32_t* experts, float* weights, float* margin,
                  const MoeDispatch* dispatch, cudaStream_t stream) {
  const int64_t E = cfg.n_experts, K = cfg.top_k, G = cfg.n_group, KG = cfg.topk_group;
  const bool ok = E >= 1 && E <= kMaxExperts && K >= 1 && K <= kMaxTopK && K <= E && G >= 1 && G <= kMaxGroups &&
                  E % G == 0 && (G == 1 || E / G >= 2) && KG >= 1 && KG <= G && ld_logits >= E;
  if (!ok)
    throw Error("route_tokens: unsupported router (experts " + std::to_string(E) + ", top_k " + std::to_string(K) +
                ", n_group " + std::to_string(G) + ", topk_group " + std::to_string(KG) + ", ld " +
                std::to_string(ld_logits) + ")");
  if (n_tokens <= 0) return;
  const RouteArgs a{logits,
                    ld_logits,
                    n_tokens,
                    correction_bias,
                    static_cast<int>(E),
                    static_cast<int>(K),
                    static_cast<int>(G),
                    static_cast<int>(KG),
                    cfg.norm_topk_prob,
                    cfg.routed_scaling_factor,
                    experts,
                    weights,
                    margin};
  const auto blocks = static_cast<unsigned>((n_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const size_t smem = sizeof(float) * kWarpsPerBlock * warp_floats(static_cast<int>(E));
  if (dispatch) launch_chained(route_kernel<true>, blocks, kWarpsPerBlock * 32, smem, stream, a, *dispatch);
  else launch_chained(route_kernel<false>, blocks, kWarpsPerBlock * 32, smem, stream, a, MoeDispatch{});
  FT_CUDA_CHECK_LAUNCH();
}
}  // namespace

void route_tokens(const float* logits, int64_t ld_logits, int64_t n_tokens, const float* correction_bias,
                  const RouterConfig& cfg, int32_t* experts, float* weights, float* margin, cudaStream_t stream) {
  launch_route(logits, ld_logits, n_tokens, correction_bias, cfg, experts, weights, margin, nullptr, stream);
}

bool route_and_dispatch(const float* logits, int64_t ld_logits, int64_t n_tokens, const float* correction_bias,
                        const RouterConfig& cfg, int32_t* experts, float* weights, const MoeDispatch& dispatch,
                        cudaStream_t stream) {
  const bool fused = g_route_dispatch.load(std::memory_order_relaxed) == 2 && n_tokens <= kWarpsPerBlock &&
                     n_tokens * cfg.top_k <= 32;
  launch_route(logits, ld_logits, n_tokens, correction_bias, cfg, experts, weights, nullptr,
               fused ? &dispatch : nullptr, stream);
  return fused && n_tokens > 0;
}

void set_route_dispatch(int policy) { g_route_dispatch.store(policy, std::memory_order_relaxed); }

}  // namespace ft::cuda
