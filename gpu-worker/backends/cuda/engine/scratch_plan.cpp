#include "gpu-worker/backends/cuda/engine/scratch_plan.h"

#include <algorithm>
#include <cmath>

#include "gpu-worker/backends/cuda/ops/indexer.h"
#include "gpu-worker/backends/cuda/ops/kda.h"
#include "gpu-worker/backends/cuda/ops/linear.h"
#include "gpu-worker/backends/cuda/ops/mla.h"
#include "gpu-worker/backends/cuda/ops/moe.h"

namespace ft::cuda {

namespace {
// Sum of takes, each rounded as the arena rounds.
struct Count {
  size_t bytes = 0;
  template <class T>
  void take(int64_t n) {
    bytes = ((bytes + 255) & ~size_t{255}) + static_cast<size_t>(n) * sizeof(T);
  }
};
}  // namespace

size_t ScratchNeeds::max() const { return std::max({kda, mla, dense_mlp, moe, mhc}) + 4096; }

MlaAttendShape mla_shape(const ModelConfig& c) {
  MlaAttendShape s;
  s.heads = c.num_attention_heads;
  s.latent = c.kv_lora_rank;
  s.kpool = static_cast<int>(c.index_kpool);
  s.pool_budget = c.index_pool_budget();
  s.tail = c.index_kpool_always_select_tail;
  s.scale = 1.0f / std::sqrt(static_cast<float>(c.qk_head_dim));
  return s;
}

IndexerShape indexer_shape(const ModelConfig& c, int64_t max_pools) {
  IndexerShape s;
  s.heads = c.index_n_heads;
  s.dim = c.index_head_dim;
  s.kpool = static_cast<int>(c.index_kpool);
  s.pool_budget = c.index_pool_budget();
  s.max_pools = max_pools;
  return s;
}

ScratchNeeds scratch_needs(const ModelConfig& c, int64_t T, int64_t max_pools, bool dense_experts, bool fp32,
                           bool sorted_rows) {
  ScratchNeeds n;
  const int64_t Q = c.linear_dim(), dl = c.linear_head_dim, H = c.linear_num_heads;
  {  // kda: Z, r, gate, conv, g, beta, o, normed (forward.cpp: run_kda)
    Count k;
    k.take<float>(T * (3 * Q + 2 * dl + H));
    k.take<float>(T * Q);
    k.take<float>(T * Q);
    k.take<float>(T * 3 * Q);
    k.take<float>(T * Q);
    k.take<float>(T * H);
    k.take<float>(T * Q);
    k.take<float>(T * Q);
    size_t ws = 0;  // the chunked prefill's workspace for the worst alignment of a step-long span
    for (int64_t t0 : {0, 1, 63})
      ws = std::max(ws, kda_chunked_prefill_workspace_bytes(t0, T, KdaShape{H, dl}));
    k.take<uint8_t>(static_cast<int64_t>(ws));
    n.kda = k.bytes;
  }
  {  // mla: in, qfull, q_abs, ctx, heads, omega, attend and select workspaces (run_mla)
    const int64_t Rq = c.q_lora_rank, Rkv = c.kv_lora_rank, NH = c.num_attention_heads, ID = c.index_head_dim;
    const int64_t IH = c.index_n_heads;
    Count m;
    const int64_t P = std::min<int64_t>(T, kMlaRowsPerPass);
    m.take<float>(T * (Rq + Rkv + 2 * ID));
    m.take<float>(T * IH);
    m.take<float>(P * (NH * c.qk_head_dim + IH * ID));
    m.take<float>(P * NH * Rkv);
    m.take<float>(P * NH * Rkv);
    m.take<float>(P * NH * c.v_head_dim);
    const int64_t pass = std::min<int64_t>(P, kSparseRowsPerPass);
    m.take<uint8_t>(static_cast<int64_t>(mla_attend_workspace_bytes(pass, mla_shape(c))));
    m.take<uint8_t>(static_cast<int64_t>(indexer_select_workspace_bytes(pass, indexer_shape(c, max_pools))));
    n.mla = m.bytes;
  }
  {  // dense MLP: gate|up (run_mlp)
    Count d;
    d.take<float>(T * 2 * c.intermediate_size);
    n.dense_mlp = d.bytes;
  }
  {  // MoE: logits, experts, weights, dispatch, Y, expert workspace, shared gate|up (run_moe)
    const int64_t E = c.n_routed_experts, TK = c.num_experts_per_tok, D = c.hidden_size;
    const int64_t Im = c.moe_intermediate_size, Is = Im * c.n_shared_experts;
    Count m;
    m.take<float>(T * E);
    m.take<int32_t>(T * TK);
    m.take<float>(T * TK);
    LinearF32 router;  // its K-split's block sums (linear_f32)
    router.out = E;
    router.in = D;
    m.take<float>(static_cast<int64_t>(linear_f32_workspace_floats(router, T)));
    const MoeDispatchSizes ds = moe_dispatch_sizes(T, static_cast<int>(TK), static_cast<int>(E));
    m.take<int32_t>(ds.offsets);
    m.take<int32_t>(ds.sorted_pick);
    m.take<int32_t>(ds.active);
    m.take<int32_t>(ds.n_active);
    m.take<float>(T * TK * D);
    if (dense_experts)  // the fp16 grouped kernel's or the fp32 one's, as the precision runs
      m.take<uint8_t>(static_cast<int64_t>(fp32 ? moe_dense_f32_workspace_bytes(T, static_cast<int>(TK), Im)
                                                : moe_dense_workspace_bytes(T, static_cast<int>(TK), D, Im, sorted_rows)));
    m.take<float>(T * 2 * Is);
    n.moe = m.bytes;
  }
  {  // mHC mixing logits: the K-split's block sums, alone in the scratch (forward.cpp: mixing_logits)
    LinearF32 fn;
    fn.out = c.nmix();
    fn.in = c.hc_mult * c.hidden_size;
    Count h;
    h.take<float>(static_cast<int64_t>(linear_f32_workspace_floats(fn, T)));
    n.mhc = h.bytes;
  }
  return n;
}

}  // namespace ft::cuda
