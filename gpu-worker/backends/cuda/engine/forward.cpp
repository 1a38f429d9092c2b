#include "gpu-worker/backends/cuda/engine/forward.h"

#include <algorithm>
#include <cmath>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/engine/linear_apply.h"
#include "gpu-worker/backends/cuda/engine/scratch_plan.h"
#include "gpu-worker/backends/cuda/ops/embed.h"
#include "gpu-worker/backends/cuda/ops/indexer.h"
#include "gpu-worker/backends/cuda/ops/kda.h"
#include "gpu-worker/backends/cuda/ops/mhc.h"
#include "gpu-worker/backends/cuda/ops/mla.h"
#include "gpu-worker/backends/cuda/ops/moe.h"
#include "gpu-worker/backends/cuda/ops/norms.h"
#include "gpu-worker/backends/cuda/ops/router.h"
#include "gpu-worker/backends/cuda/ops/swiglu.h"
#include "shared/core/error.h"

namespace ft::cuda {

ForwardPass::ForwardPass(const DeviceModel& m, SequencePool& pool, StepBuffers& b, ExpertBackend* host_experts)
    : m_(m), c_(m.cfg), pool_(pool), b_(b), host_experts_(host_experts) {}

void ForwardPass::run(const StepPlan& p, cudaStream_t s) {
  const int64_t N = p.rows, D = c_.hidden_size, HC = c_.hc_mult;
  op_mark(prof_, "embed", s);
  embed_tokens(m_.embed, b_.tokens, N, HC, b_.X, s);
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    const LayerGpu& L = m_.layers[l];
    b_.scratch.reset();
    // mHC in three profile groups (the mixing logits, the site's input side, its output side):
    // at batch 1 its 90 sites are latency, not bytes.
    op_mark(prof_, "mhc mixing logits", s);
    mixing_logits(L.attn_fn, N, s);
    op_mark(prof_, "mhc site in", s);
    SideStream::Point mixed = site_in(L.attn_site, N, s);
    if (L.kda)
      kda(l, p, s);
    else
      mla(l, p, s);
    op_mark(prof_, "mhc site out", s);
    if (mixed.ev) side_.wait(s, mixed);
    mhc_site_out(b_.mix, b_.O, D, N, HC, D, b_.X, s);
    b_.scratch.reset();
    op_mark(prof_, "mhc mixing logits", s);
    mixing_logits(L.ffn_fn, N, s);
    op_mark(prof_, "mhc site in", s);
    mixed = site_in(L.ffn_site, N, s);
    if (L.dense)
      mlp(*L.dense, N, b_.O, LinearStore::Overwrite, "dense mlp", s, b_.staging);
    else
      moe(l, p, s);
    op_mark(prof_, "mhc site out", s);
    if (mixed.ev) side_.wait(s, mixed);
    mhc_site_out(b_.mix, b_.O, D, N, HC, D, b_.X, s, routed_ ? &*routed_ : nullptr);
    routed_.reset();
    if (probe_) probe_(l, b_, N, s);
  }
  if (p.logit_rows > 0) logits(N, std::min(p.logit_rows, b_.lim.max_logit_rows), s);
  if (prof_) prof_->finish(s);
}

void ForwardPass::mixing_logits(const LinearF32& fn, int64_t N, cudaStream_t s) {
  // 24 outputs over K = hc·D: the split's block sums come from the (still empty) layer scratch,
  // free again for the sublayer once the fold has run (stream order).
  const size_t ws = linear_f32_workspace_floats(fn, N);
  float* w = ws ? b_.scratch.take<float>(ws, "mhc mixing logits split") : nullptr;
  linear_f32(fn, b_.X, c_.hc_mult * c_.hidden_size, N, b_.m_raw, c_.nmix(), s, LinearStore::Overwrite, w, ws);
  b_.scratch.reset();
}

SideStream::Point ForwardPass::site_in(const MhcSite& site, int64_t N, cudaStream_t s) {
  // Decode-sized steps: the mix (its Sinkhorn is a chain of dependent divisions) beside the
  // sublayer, which needs only a; the site's output waits for the returned point.
  if (!branch(N)) {
    mhc_site_in(site, b_.X, b_.m_raw, c_.nmix(), N, b_.mix, b_.A, c_.hidden_size, nullptr, s);
    return {};
  }
  mhc_site_mix(site, b_.X, b_.m_raw, c_.nmix(), N, b_.mix, side_.fork(s));
  const SideStream::Point mixed = side_.point();
  mhc_site_in(site, b_.X, b_.m_raw, c_.nmix(), N, nullptr, b_.A, c_.hidden_size, nullptr, s);
  return mixed;
}

void ForwardPass::logits(int64_t rows, int64_t n, cudaStream_t s) {
  const int64_t D = c_.hidden_size;
  op_mark(prof_, "final norm + lm_head", s);
  final_norm(b_.X, rows, c_.hc_mult, D, b_.logit_rows, n, m_.final_norm, static_cast<float>(c_.rms_norm_eps),
             b_.h_final, D, s);
  apply_linear(m_.lm_head, b_.h_final, D, n, b_.logits, c_.vocab_size, b_.staging, s);
}

void ForwardPass::kda(int64_t l, const StepPlan& p, cudaStream_t s) {
  const KdaLayerGpu& k = *m_.layers[l].kda;
  const int64_t N = p.rows, D = c_.hidden_size, Q = c_.linear_dim(), dl = c_.linear_head_dim;
  const int64_t H = c_.linear_num_heads, K = c_.linear_conv_kernel_dim;
  const KdaShape shape{H, dl};
  const int64_t ldZ = k.in.out;  // 3Q + dl + H + dl
  Arena& a = b_.scratch;
  float* Z = a.take<float>(N * ldZ, "kda projections");
  float* r = a.take<float>(N * Q, "kda forget-gate input");
  float* gate = a.take<float>(N * Q, "kda output gate");
  float* qkv = a.take<float>(N * 3 * Q, "kda conv output");
  float* g = a.take<float>(N * Q, "kda decay");
  float* beta = a.take<float>(N * H, "kda beta");
  float* o = a.take<float>(N * Q, "kda core output");
  float* normed = a.take<float>(N * Q, "kda normed output");
  (void)g;
  op_mark(prof_, "kda projections", s);
  apply_linear(k.in, b_.A, D, N, Z, ldZ, b_.staging, s);
  // The two low-rank gate projections read only Z: beside the convolution on a side stream
  // (decode-sized steps), the forget gate awaited before the gates are prepared, the output gate
  // before the gated norm.
  const bool side = branch(N);
  const cudaStream_t gs = side ? side_.fork(s) : s;
  const F16Staging& gst = side ? b_.side_staging : b_.staging;
  apply_linear(k.f_b, Z + k.col_fa, ldZ, N, r, Q, gst, gs);
  const SideStream::Point f_done = side ? side_.point() : SideStream::Point{};
  apply_linear(k.g_b, Z + k.col_ga, ldZ, N, gate, Q, gst, gs);
  const SideStream::Point g_done = side ? side_.point() : SideStream::Point{};
  op_mark(prof_, "kda conv + gates", s);
  // Short convolution: decode rows from their slots' windows, prefill spans from theirs.
  if (p.decode_rows > 0)
    kda_conv_decode(pool_.conv_window(l), b_.slot, Z, ldZ, p.decode_rows, k.conv, 3 * Q, K, qkv, 3 * Q, s);
  for (const PrefillSpan& sp : p.prefill)
    kda_conv_prefill(pool_.conv_window_of(l, sp.slot), Z + sp.row0 * ldZ, ldZ, sp.n, k.conv, 3 * Q, K,
                     qkv + sp.row0 * 3 * Q, 3 * Q, s);
  std::optional<float> bound;
  if (c_.linear_lower_bound) bound = static_cast<float>(*c_.linear_lower_bound);
  if (side) side_.wait(s, f_done);
  // g overwrites r (same ld): the decays replace their inputs.
  kda_prepare(qkv, 3 * Q, r, Q, Z + k.col_b, ldZ, N, k.dt_bias, k.a_log, bound, shape, r, Q, beta, H, s);
  op_mark(prof_, "kda recurrence", s);
  if (p.decode_rows > 0)
    kda_decode_step(pool_.kda_state(l), b_.slot, qkv, 3 * Q, r, Q, beta, H, p.decode_rows, shape, o, Q, s);
  if (!p.prefill.empty() && !kda_chunked_head_dim(dl)) {
    // Head sizes the chunked kernel does not run: the spans step token by token (the decode
    // recurrence, so a token's bits are the same whichever way it arrives).
    for (const PrefillSpan& sp : p.prefill)
      for (int64_t t = sp.row0; t < sp.row0 + sp.n; ++t)
        kda_decode_step(pool_.kda_state(l), b_.slot + t, qkv + t * 3 * Q, 3 * Q, r + t * Q, Q, beta + t * H, H, 1,
                        shape, o + t * Q, Q, s);
  } else if (!p.prefill.empty()) {
    size_t ws_bytes = 0;
    for (const PrefillSpan& sp : p.prefill)
      ws_bytes = std::max(ws_bytes, kda_chunked_prefill_workspace_bytes(sp.pos0, sp.n, shape));
    void* ws = a.take<uint8_t>(ws_bytes, "kda chunk workspace");
    for (const PrefillSpan& sp : p.prefill)
      kda_chunked_prefill(pool_.kda_state_of(l, sp.slot), sp.pos0, sp.n, qkv + sp.row0 * 3 * Q, 3 * Q,
                          r + sp.row0 * Q, Q, beta + sp.row0 * H, H, shape, o + sp.row0 * Q, Q, ws, s);
  }
  op_mark(prof_, "kda out norm + o_proj", s);
  if (side) side_.wait(s, g_done);
  kda_gated_norm(o, Q, gate, Q, k.o_norm, N, shape, static_cast<float>(c_.rms_norm_eps), normed, Q, s);
  apply_linear(k.o, normed, Q, N, b_.O, D, b_.staging, s);
}

void ForwardPass::mla(int64_t l, const StepPlan& p, cudaStream_t s) {
  const MlaLayerGpu& m = *m_.layers[l].mla;
  const int64_t N = p.rows, D = c_.hidden_size, Rq = c_.q_lora_rank, Rkv = c_.kv_lora_rank;
  const int64_t NH = c_.num_attention_heads, dn = c_.qk_nope_head_dim, dv = c_.v_head_dim;
  const int64_t IH = c_.index_n_heads, ID = c_.index_head_dim;
  const float eps = static_cast<float>(c_.rms_norm_eps);
  Arena& a = b_.scratch;
  const int64_t ld_in = m.in.out, ld_q = m.q_b.out;
  // Every row's projections, cache entries and pool keys first (a row's selection sees the keys
  // of the rows before it); then the per-row chain from the queries to o_proj in passes of at
  // most kMlaRowsPerPass rows, so its wide buffers (queries, absorbed queries, attended latents:
  // ~130 KB a row at the real widths) hold one pass, not a whole prefill chunk. Every op of the
  // chain is row-independent, so passes never change a row's bits.
  const int64_t P = std::min<int64_t>(N, kMlaRowsPerPass);
  float* in = a.take<float>(N * (Rq + Rkv + 2 * ID), "mla projections");
  float* omega = a.take<float>(N * IH, "indexer head weights");
  float* qfull = a.take<float>(P * (NH * c_.qk_head_dim + IH * ID), "mla queries");
  float* q_abs = a.take<float>(P * NH * Rkv, "mla absorbed queries");
  float* ctx = a.take<float>(P * NH * Rkv, "mla attended latents");
  float* heads = a.take<float>(P * NH * dv, "mla head outputs");
  const MlaAttendShape ashape = mla_shape(c_);
  const IndexerShape ishape = indexer_shape(c_, b_.lim.max_pools);
  const int64_t pass = std::min<int64_t>(P, kSparseRowsPerPass);
  const size_t attend_bytes = mla_attend_workspace_bytes(pass, ashape);
  const size_t select_bytes = indexer_select_workspace_bytes(pass, ishape);
  void* attend_ws = a.take<uint8_t>(attend_bytes, "mla attention workspace");
  void* select_ws = a.take<uint8_t>(select_bytes, "indexer selection workspace");

  op_mark(prof_, "mla projections", s);
  apply_linear(m.in, b_.A, D, N, in, ld_in, b_.staging, s);
  // q_res and the kv latent are normalised in place; on own-indexer layers the key too.
  rms_norm_rows(in, ld_in, N, Rq, m.q_a_norm, eps, in, ld_in, s);
  rms_norm_rows(in + m.col_kv, ld_in, N, Rkv, m.kv_a_norm, eps, in + m.col_kv, ld_in, s);
  if (m.own_indexer) {
    layer_norm_rows(in + m.col_wk, ld_in, N, ID, m.k_norm_w, m.k_norm_b, 1e-6f, in + m.col_wk, ld_in, s);
    linear_f32(m.weights_proj, b_.A, D, N, omega, IH, s);  // IH^−1/2 folded into the weight
  }
  const SparseCacheLayer& cache = pool_.sparse(l);
  const SparseCacheGeometry& geom = pool_.geometry();
  const SparseTables tables = pool_.tables();
  const SparseRows rows{b_.slot, b_.pos, N};
  op_mark(prof_, "mla cache + indexer", s);
  sparse_cache_append(cache, geom, tables, rows, in + m.col_kv, ld_in, m.own_indexer ? in + m.col_wk : nullptr,
                      m.own_indexer ? in + m.col_gate : nullptr, ld_in, s);
  if (m.own_indexer) indexer_pool_keys(cache, geom, tables, rows, m.ape, s);
  const int64_t Bp = ishape.pool_budget;
  for (int64_t r0 = 0; r0 < N; r0 += P) {
    const int64_t n = std::min(P, N - r0);
    const SparseRows part{b_.slot + r0, b_.pos + r0, n};
    int32_t* sel_pools = b_.sel_pools + r0 * Bp;
    int32_t* sel_count = b_.sel_count + r0;
    op_mark(prof_, "mla projections", s);
    apply_linear(m.q_b, in + r0 * ld_in, ld_in, n, qfull, ld_q, b_.staging, s);
    // Absorption per head: q_abs[t][h] = W_kb,hᵀ·q[t][h] (fp32: a linear per head; fp16: one
    // conversion per token row, one batched launch).
    if (m_.fp32) {
      for (int64_t h = 0; h < NH; ++h)
        linear_f32(m.kb_heads[h], qfull + h * dn, ld_q, n, q_abs + h * Rkv, NH * Rkv, s);
    } else {
      to_f16_rows(qfull, ld_q, n, NH * dn, b_.staging.xh, NH * dn, b_.staging.scale, s);
      linear_f16_batched(m.kb_t, NH, m.kb_t_stride, b_.staging.xh, NH * dn, dn, b_.staging.scale, 0, n, q_abs,
                         NH * Rkv, Rkv, s);
    }
    if (m.own_indexer) {
      op_mark(prof_, "mla cache + indexer", s);
      // Shared-indexer layers after this one read these rows of sel_pools/sel_count.
      indexer_select(ishape, cache, tables, part, qfull + m.col_qI, ld_q, omega + r0 * IH, IH, sel_pools, sel_count,
                     select_ws, select_bytes, s);
    }
    op_mark(prof_, "mla attention", s);
    mla_attend(ashape, cache, geom, tables, part, sel_pools, sel_count, q_abs, ctx, attend_ws, attend_bytes, s);
    op_mark(prof_, "mla values + o_proj", s);
    // Value expansion per head, then o_proj.
    if (m_.fp32) {
      for (int64_t h = 0; h < NH; ++h)
        linear_f32(m.vb_heads[h], ctx + h * Rkv, NH * Rkv, n, heads + h * dv, NH * dv, s);
    } else {
      to_f16_rows(ctx, NH * Rkv, n, NH * Rkv, b_.staging.xh, NH * Rkv, b_.staging.scale, s);
      linear_f16_batched(m.vb, NH, m.vb_stride, b_.staging.xh, NH * Rkv, Rkv, b_.staging.scale, 0, n, heads,
                         NH * dv, dv, s);
    }
    apply_linear(m.o, heads, NH * dv, n, b_.O + r0 * D, D, b_.staging, s);
  }
}

void ForwardPass::mlp(const MlpGpu& g, int64_t N, float* out, LinearStore store, const char* what, cudaStream_t s,
                      const F16Staging& st) {
  const int64_t D = c_.hidden_size, I = g.inter;
  op_mark(prof_, what, s);
  float* gu = b_.scratch.take<float>(N * 2 * I, "mlp gate|up");
  apply_linear(g.gate_up, b_.A, D, N, gu, 2 * I, st, s);
  swiglu_rows(gu, 2 * I, N, I, static_cast<float>(c_.swiglu_limit), gu, 2 * I, s);
  apply_linear(g.down, gu, 2 * I, N, out, D, st, s, store);
}

void ForwardPass::force_routes(int64_t l, int32_t* experts, int64_t N, cudaStream_t s) {
  if (const int32_t* forced = tier_->forced_routes(l))
    FT_CUDA_CHECK(cudaMemcpyAsync(experts, forced, N * c_.num_experts_per_tok * sizeof(int32_t),
                                  cudaMemcpyDeviceToDevice, s));
}

void ForwardPass::moe(int64_t l, const StepPlan& p, cudaStream_t s) {
  const MoeLayerGpu& m = *m_.layers[l].moe;
  const int64_t N = p.rows, D = c_.hidden_size, E = c_.n_routed_experts, TK = c_.num_experts_per_tok;
  const int64_t Im = c_.moe_intermediate_size;
  Arena& a = b_.scratch;
  float* logits = a.take<float>(N * E, "router logits");
  int32_t* experts = a.take<int32_t>(N * TK, "routed experts");
  float* weights = a.take<float>(N * TK, "routing weights");
  const MoeDispatchSizes ds = moe_dispatch_sizes(N, static_cast<int>(TK), static_cast<int>(E));
  MoeDispatch d;
  d.offsets = a.take<int32_t>(ds.offsets, "moe offsets");
  d.sorted_pick = a.take<int32_t>(ds.sorted_pick, "moe sorted picks");
  d.active = a.take<int32_t>(ds.active, "moe active experts");
  d.n_active = a.take<int32_t>(ds.n_active, "moe active count");
  float* Y = a.take<float>(N * TK * D, "expert outputs");
  // The dense grouped kernel's workspace only where that kernel runs (VRAM-resident dense experts).
  const bool dense = m.local_experts && !m.exl3_experts;
  const size_t ws_bytes = m.dense_experts32 ? moe_dense_f32_workspace_bytes(N, static_cast<int>(TK), Im)
                                            : moe_dense_workspace_bytes(N, static_cast<int>(TK), D, Im, m.dense_expert_maps != nullptr);
  void* ws = dense ? a.take<uint8_t>(ws_bytes, "expert workspace") : nullptr;

  // The shared expert beside the router and the routed experts (decode-sized steps, experts on
  // the GPU or its tier): it writes O first and the routed sum is added to it — one addition
  // either way round, so the bits equal the serial order's. The split path runs it on the main
  // stream, where it fills the GPU's wait for the host's split.
  const bool split = tier_ && split_ && split_->active();
  const bool on_gpu = m.dense_experts32 || m.local_experts || tier_;
  const bool side = on_gpu && !split && branch(N);
  SideStream::Point shared_done;
  if (side) {
    mlp(m.shared, N, b_.O, LinearStore::Overwrite, "moe shared expert", side_.fork(s), b_.side_staging);
    shared_done = side_.point();
  }
  // The routed sum is added to the shared expert's output (in O) by the site's output kernel
  // (mhc.h RoutedSum: moe_combine's operations, one launch and one pass over O fewer).
  auto combine = [&] {
    if (side) side_.wait(s, shared_done);
    routed_ = RoutedSum{Y, weights, static_cast<int>(TK), true};
  };

  op_mark(prof_, "moe router logits", s);
  const size_t router_ws = linear_f32_workspace_floats(m.router, N);
  linear_f32(m.router, b_.A, D, N, logits, E, s, LinearStore::Overwrite,
             router_ws ? a.take<float>(router_ws, "router logits split") : nullptr, router_ws);
  op_mark(prof_, "moe routing", s);
  RouterConfig rc;
  rc.n_experts = E;
  rc.top_k = TK;
  rc.n_group = c_.n_group;
  rc.topk_group = c_.topk_group;
  rc.norm_topk_prob = c_.norm_topk_prob;
  rc.routed_scaling_factor = static_cast<float>(c_.routed_scaling_factor);
  // Experts in VRAM: a small step's dispatch comes from the routing kernel itself.
  bool dispatched = false;
  if (m.local_experts && !m.dense_experts32)
    dispatched = route_and_dispatch(logits, E, N, m.correction_bias, rc, experts, weights, d, s);
  else
    route_tokens(logits, E, N, m.correction_bias, rc, experts, weights, nullptr, s);
  b_.last_routes = experts;
  const MoeRoutes routes{experts, weights, N, static_cast<int>(TK)};
  op_mark(prof_, "moe routed experts", s);
  if (m.dense_experts32) {
    moe_dense_experts_f32(m.dense_experts32, static_cast<int>(E), routes, b_.A, D, D, Im,
                          static_cast<float>(c_.swiglu_limit), Y, ws, s);
    combine();
  } else if (m.local_experts) {
    op_mark(prof_, "moe dispatch + combine", s);
    if (!dispatched) moe_dispatch(routes, static_cast<int>(E), d, s);
    op_mark(prof_, "moe routed experts", s);
    if (m.exl3_experts)
      exl3_moe_experts(*m.exl3_experts, routes, d, b_.A, D, static_cast<float>(c_.swiglu_limit), Y, b_.exl3_moe_ws, s);
    else
      moe_dense_experts(m.dense_experts, routes, d, b_.A, D, D, Im, static_cast<float>(c_.swiglu_limit), Y, ws, s,
                        m.dense_expert_maps);
    op_mark(prof_, "moe dispatch + combine", s);
    combine();
  } else if (split) {
    // Misses split with the CPU tier (tier_split.h): the host splits while the shared expert
    // runs. The shared expert writes O first and the routed sum is added to it: one addition
    // either way round, so the bits equal the unsplit order's.
    // Profiled: the hand-off is the GPU's wait for the split beyond the shared expert's time.
    op_mark(prof_, "moe tier hand-off", s);
    force_routes(l, experts, N, s);
    split_->post(l, experts, b_.A, N, s);
    mlp(m.shared, N, b_.O, LinearStore::Overwrite, "moe shared expert", s, b_.staging);
    op_mark(prof_, "moe tier hand-off", s);
    auto routed = [&](const int32_t* picks) {  // the grouped kernel over these picks (−1: none)
      const MoeRoutes r{picks, weights, N, static_cast<int>(TK)};
      moe_dispatch(r, static_cast<int>(E), d, s);
      exl3_moe_experts(tier_->layer(l), r, d, b_.A, D, static_cast<float>(c_.swiglu_limit), Y, tier_->workspace(), s);
    };
    const int32_t* gpu_picks = split_->await_split(s);
    op_mark(prof_, "moe routed experts", s);
    split_->gpu_begin(s);
    routed(gpu_picks);
    split_->gpu_end(s);
    op_mark(prof_, "moe CPU tier wait", s);
    // The picks of a CPU tier that failed mid-layer (none otherwise) read zero-copy.
    routed(split_->await_cpu(Y, s));
    routed_ = RoutedSum{Y, weights, static_cast<int>(TK), true};  // added at the site's output
    return;
  } else if (tier_) {
    // From the segment (zero-copy) or VRAM cache slots, wherever the tier's table says; the
    // picks go to the host for the cache's upkeep between steps.
    force_routes(l, experts, N, s);
    moe_dispatch(routes, static_cast<int>(E), d, s);
    // Profiled apart: a staged prefill's wait for this layer's copies (the GPU idle on PCIe).
    op_mark(prof_, "moe staging wait", s);
    const Exl3MoeLayer& view = tier_->layer_for_step(l, s);
    op_mark(prof_, "moe routed experts", s);
    exl3_moe_experts(view, routes, d, b_.A, D, static_cast<float>(c_.swiglu_limit), Y, tier_->workspace(), s);
    tier_->layer_done(l, s);
    combine();
    FT_CUDA_CHECK(cudaMemcpyAsync(tier_->route_buffer(l), experts, N * TK * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
  } else {
    if (!host_experts_) throw Error("layer " + std::to_string(l) + ": the routed experts are neither on the GPU nor on a tier");
    // Host round trip: the tier computes Σ_k w_k·E_k(a) for every row (ascending expert order).
    std::vector<int32_t> ex(static_cast<size_t>(N * TK));
    std::vector<float> wt(static_cast<size_t>(N * TK));
    host_a_.resize(static_cast<size_t>(N * D));
    host_o_.resize(static_cast<size_t>(N * D));
    FT_CUDA_CHECK(cudaMemcpyAsync(host_a_.data(), b_.A, N * D * 4, cudaMemcpyDeviceToHost, s));
    FT_CUDA_CHECK(cudaMemcpyAsync(ex.data(), experts, N * TK * 4, cudaMemcpyDeviceToHost, s));
    FT_CUDA_CHECK(cudaMemcpyAsync(wt.data(), weights, N * TK * 4, cudaMemcpyDeviceToHost, s));
    FT_CUDA_CHECK(cudaStreamSynchronize(s));
    std::vector<Routing> rt(static_cast<size_t>(N));
    for (int64_t t = 0; t < N; ++t) {
      rt[t].experts.assign(ex.begin() + t * TK, ex.begin() + (t + 1) * TK);
      rt[t].weights.assign(wt.begin() + t * TK, wt.begin() + (t + 1) * TK);
    }
    // All of the layer's experts on the tier: the reference math (nothing to agree with here).
    host_experts_->compute(l, host_a_.data(), N, rt, host_o_.data(), exl3::Operands::F32);
    FT_CUDA_CHECK(cudaMemcpyAsync(b_.O, host_o_.data(), N * D * 4, cudaMemcpyHostToDevice, s));
  }
  if (!side)
    mlp(m.shared, N, b_.O, routed_ ? LinearStore::Overwrite : LinearStore::Accumulate, "moe shared expert", s,
        b_.staging);
}

}  // namespace ft::cuda
