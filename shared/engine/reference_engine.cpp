#include "shared/engine/reference_engine.h"

#include <cmath>
#include <cstring>

#include "shared/core/error.h"
#include "shared/engine/local_experts.h"
#include "shared/ops/activations.h"
#include "shared/ops/indexer.h"
#include "shared/ops/kda.h"
#include "shared/ops/linear.h"
#include "shared/ops/mhc.h"
#include "shared/ops/mla.h"
#include "shared/ops/norms.h"
#include "shared/ops/swiglu.h"

namespace ft {

namespace {

void apply(const DenseLinear& l, const float* x, float* y) {
  matvec(l.w.data(), l.bias.empty() ? nullptr : l.bias.data(), l.out, l.in, x, y);
}

MhcParams mhc_params(const MhcWeights& w, const ModelConfig& c) {
  return MhcParams{w.fn.data(),
                   w.base.data(),
                   w.scale.data(),
                   c.hc_mult,
                   c.hidden_size,
                   static_cast<float>(c.rms_norm_eps),
                   static_cast<float>(c.hc_eps),
                   c.hc_sinkhorn_iters};
}

}  // namespace

ReferenceEngine::ReferenceEngine(const ModelWeights& w, ExpertBackend* experts) : w_(w), experts_(experts) {
  if (!experts_) {
    own_experts_ = std::make_unique<LocalExperts>(w_);
    experts_ = own_experts_.get();
  }
}

void ReferenceEngine::kda_layer(int64_t l, KdaState& st, const float* A, int64_t n, float* O) const {
  const ModelConfig& c = w_.cfg;
  const KdaWeights& w = *w_.layers[l].kda;
  const int64_t D = c.hidden_size, Q = c.linear_dim(), H = c.linear_num_heads, dl = c.linear_head_dim;
  const int64_t K = c.linear_conv_kernel_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float qscale = 1.0f / std::sqrt(static_cast<float>(dl));
  std::optional<float> bound;
  if (c.linear_lower_bound) bound = static_cast<float>(*c.linear_lower_bound);
  std::vector<float> z(3 * Q), zc(3 * Q), low(dl), r(Q), g(Q), beta(H), gate(Q), o(Q), normed(Q);
  for (int64_t t = 0; t < n; ++t) {
    const float* a = A + t * D;
    apply(w.q, a, z.data());
    apply(w.k, a, z.data() + Q);
    apply(w.v, a, z.data() + 2 * Q);
    short_conv_step(st.conv_window.data(), z.data(), w.conv.data(), 3 * Q, K, zc.data());
    float* q = zc.data();
    float* k = zc.data() + Q;
    const float* v = zc.data() + 2 * Q;
    apply(w.f_a, a, low.data());
    apply(w.f_b, low.data(), r.data());
    for (int64_t i = 0; i < Q; ++i) r[i] += w.dt_bias[i];
    kda_forget_gate(r.data(), w.a_log.data(), H, dl, bound, g.data());
    apply(w.b, a, beta.data());
    for (float& b : beta) b = sigmoid(b);
    for (int64_t h = 0; h < H; ++h) {
      l2_normalize(q + h * dl, dl, 1e-6f);
      l2_normalize(k + h * dl, dl, 1e-6f);
      for (int64_t d = 0; d < dl; ++d) q[h * dl + d] *= qscale;
      kda_step(st.S.data() + h * dl * dl, q + h * dl, k + h * dl, v + h * dl, g.data() + h * dl, beta[h], dl, dl,
               o.data() + h * dl);
    }
    apply(w.g_a, a, low.data());
    apply(w.g_b, low.data(), gate.data());
    for (int64_t h = 0; h < H; ++h) {
      rms_norm(o.data() + h * dl, w.o_norm.data(), dl, eps, normed.data() + h * dl);
      for (int64_t d = 0; d < dl; ++d) normed[h * dl + d] *= sigmoid(gate[h * dl + d]);
    }
    apply(w.o, normed.data(), O + t * D);
  }
}

void ReferenceEngine::sparse_layer(int64_t l, SparseState& st, int64_t T0, const float* A, int64_t n, float* O,
                                   Selections& sel, ForwardObserver* obs, size_t item) const {
  const ModelConfig& c = w_.cfg;
  const MlaWeights& w = *w_.layers[l].mla;
  const int64_t D = c.hidden_size, Rq = c.q_lora_rank, Rkv = c.kv_lora_rank, NH = c.num_attention_heads;
  const int64_t IH = c.index_n_heads, ID = c.index_head_dim, kp = c.index_kpool;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const MlaDims dims{NH, c.qk_nope_head_dim, c.v_head_dim, Rkv};
  const IndexerWeights* ix = w.indexer ? &*w.indexer : nullptr;

  // 1. Per-token projections; the new tokens join the caches before any query looks.
  std::vector<float> q_res(Rq), tmp(std::max(Rq, Rkv)), q(NH * c.qk_head_dim), kraw(ID);
  std::vector<float> q_abs(n * NH * Rkv), qI(ix ? n * IH * ID : 0), omega(ix ? n * IH : 0);
  st.latent.resize((T0 + n) * Rkv);
  if (ix) {
    st.kI.resize((T0 + n) * ID);
    st.gI.resize((T0 + n) * ID);
  }
  const float omega_scale = 1.0f / std::sqrt(static_cast<float>(IH));
  for (int64_t t = 0; t < n; ++t) {
    const float* a = A + t * D;
    apply(w.q_a, a, tmp.data());
    rms_norm(tmp.data(), w.q_a_norm.data(), Rq, eps, q_res.data());
    apply(w.q_b, q_res.data(), q.data());
    mla_absorb_query(w.kv_b.w.data(), q.data(), dims, q_abs.data() + t * NH * Rkv);
    apply(w.kv_a, a, tmp.data());
    rms_norm(tmp.data(), w.kv_a_norm.data(), Rkv, eps, st.latent.data() + (T0 + t) * Rkv);
    if (ix) {
      apply(ix->wq_b, q_res.data(), qI.data() + t * IH * ID);
      apply(ix->wk, a, kraw.data());
      layer_norm(kraw.data(), ix->k_norm_w.data(), ix->k_norm_b.data(), ID, 1e-6f, st.kI.data() + (T0 + t) * ID);
      apply(ix->gate, a, st.gI.data() + (T0 + t) * ID);
      apply(ix->weights_proj, a, omega.data() + t * IH);
      for (int64_t h = 0; h < IH; ++h) omega[t * IH + h] *= omega_scale;
    }
  }
  const int64_t T = T0 + n;
  // 2. Keys of pools completed by the new tokens (a complete pool's key never changes).
  if (ix) {
    const int64_t have = static_cast<int64_t>(st.pool_keys.size()) / ID, P = T / kp;
    st.pool_keys.resize(P * ID);
    for (int64_t p = have; p < P; ++p)
      indexer_pool_key(st.kI.data() + p * kp * ID, st.gI.data() + p * kp * ID, ix->ape.data(), kp, ID,
                       st.pool_keys.data() + p * ID);
    sel.assign(n, {});
  } else if (static_cast<int64_t>(sel.size()) != n) {
    throw Error("layer " + std::to_string(l) + " shares the indexer of a layer that produced no selection");
  }
  // 3. Per query: choose the tokens, attend in the latent space, project out.
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.qk_head_dim));
  const bool tail = c.index_kpool_always_select_tail;
  std::vector<float> scores, ctx(NH * Rkv), heads(NH * c.v_head_dim);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t tau = T0 + t;
    if (ix) {
      const int64_t nvis = (tau + 1) / kp;
      if (nvis > c.index_pool_budget()) {
        scores.resize(nvis);
        indexer_pool_scores(qI.data() + t * IH * ID, omega.data() + t * IH, st.pool_keys.data(), nvis, IH, ID,
                            scores.data());
      }
      sel[t] = select_tokens(scores.data(), tau, kp, c.index_pool_budget(), tail);
    }
    if (obs) obs->on_selection(l, item, tau, sel[t]);
    // An empty selection (only possible without the tail pool) attends to nothing: the heads
    // output zero. transformers produces NaN there (a fully masked softmax), spec §10 item 13.
    mla_attend(q_abs.data() + t * NH * Rkv, st.latent.data(), sel[t].data(), static_cast<int64_t>(sel[t].size()), dims,
               scale, ctx.data());
    mla_expand_values(w.kv_b.w.data(), ctx.data(), dims, heads.data());
    apply(w.o, heads.data(), O + t * D);
  }
}

void ReferenceEngine::mlp_layer(int64_t l, const float* A, int64_t n, float* O, ForwardObserver* obs,
                                const std::vector<std::pair<size_t, int64_t>>& where) const {
  const ModelConfig& c = w_.cfg;
  const LayerWeights& L = w_.layers[l];
  const int64_t D = c.hidden_size;
  const float limit = static_cast<float>(c.swiglu_limit);
  if (L.dense) {
    std::vector<float> scratch(2 * c.intermediate_size);
    for (int64_t t = 0; t < n; ++t)
      swiglu_mlp(L.dense->gate.w.data(), L.dense->up.w.data(), L.dense->down.w.data(), D, c.intermediate_size, limit,
                 A + t * D, O + t * D, scratch.data());
    return;
  }
  const MoeWeights& moe = *L.moe;
  const RouterParams rp{moe.router.w.data(), moe.correction_bias.data(), c.n_routed_experts, D,
                        c.num_experts_per_tok, c.n_group, c.topk_group, c.norm_topk_prob,
                        static_cast<float>(c.routed_scaling_factor)};
  std::vector<Routing> routes(n);
  for (int64_t t = 0; t < n; ++t) {
    routes[t] = route(rp, A + t * D);
    if (obs) obs->on_routing(l, where[t].first, where[t].second, routes[t]);
  }
  experts_->compute(l, A, n, routes, O, exl3::Operands::F32);
  const int64_t Is = c.moe_intermediate_size * c.n_shared_experts;
  std::vector<float> scratch(2 * Is), y(D);
  for (int64_t t = 0; t < n; ++t) {
    swiglu_mlp(moe.shared.gate.w.data(), moe.shared.up.w.data(), moe.shared.down.w.data(), D, Is, limit, A + t * D,
               y.data(), scratch.data());
    for (int64_t d = 0; d < D; ++d) O[t * D + d] += y[d];
  }
}

void ReferenceEngine::forward(std::span<ForwardItem> items, ForwardObserver* obs) {
  const ModelConfig& c = w_.cfg;
  const int64_t D = c.hidden_size, HC = c.hc_mult, V = c.vocab_size;
  // Validate everything before any state changes.
  int64_t N = 0;
  for (const auto& it : items) {
    if (!it.state) throw Error("forward: item without a sequence state");
    for (int32_t tok : it.tokens)
      if (tok < 0 || tok >= V)
        throw Error("token id " + std::to_string(tok) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
    N += static_cast<int64_t>(it.tokens.size());
  }
  std::vector<int64_t> offset(items.size() + 1, 0);
  std::vector<std::pair<size_t, int64_t>> where;  // token row → (item, absolute position)
  where.reserve(N);
  for (size_t i = 0; i < items.size(); ++i) {
    offset[i + 1] = offset[i] + static_cast<int64_t>(items[i].tokens.size());
    for (size_t t = 0; t < items[i].tokens.size(); ++t)
      where.emplace_back(i, items[i].state->n_tokens + static_cast<int64_t>(t));
  }

  std::vector<float> X(N * HC * D), A(N * D), O(N * D), y(D);
  for (size_t i = 0; i < items.size(); ++i)
    for (size_t t = 0; t < items[i].tokens.size(); ++t) {
      const float* e = w_.embed.data() + static_cast<int64_t>(items[i].tokens[t]) * D;
      float* x = X.data() + (offset[i] + static_cast<int64_t>(t)) * HC * D;
      for (int64_t s = 0; s < HC; ++s) std::memcpy(x + s * D, e, D * sizeof(float));
    }
  std::vector<MhcMix> mixes(N);
  std::vector<Selections> selections(items.size());
  const float eps = static_cast<float>(c.rms_norm_eps);

  auto site_in = [&](const MhcWeights& hw, const std::vector<float>& norm) {
    const MhcParams p = mhc_params(hw, c);
    for (int64_t t = 0; t < N; ++t) {
      mixes[t] = mhc_mix(p, X.data() + t * HC * D);
      mhc_collapse(mixes[t], X.data() + t * HC * D, HC, D, y.data());
      rms_norm(y.data(), norm.data(), D, eps, A.data() + t * D);
    }
  };
  auto site_out = [&] {
    for (int64_t t = 0; t < N; ++t) mhc_expand(mixes[t], O.data() + t * D, HC, D, X.data() + t * HC * D);
  };

  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& L = w_.layers[l];
    site_in(L.attn_hc, L.input_norm);
    for (size_t i = 0; i < items.size(); ++i) {
      const int64_t n = offset[i + 1] - offset[i];
      if (n == 0) continue;
      SequenceState& st = *items[i].state;
      if (L.kda)
        kda_layer(l, st.kda[l], A.data() + offset[i] * D, n, O.data() + offset[i] * D);
      else
        sparse_layer(l, st.sparse[l], st.n_tokens, A.data() + offset[i] * D, n, O.data() + offset[i] * D,
                     selections[i], obs, i);
    }
    site_out();
    site_in(L.ffn_hc, L.post_norm);
    mlp_layer(l, A.data(), N, O.data(), obs, where);
    site_out();
    if (obs)
      for (int64_t t = 0; t < N; ++t) obs->on_layer_out(l, where[t].first, where[t].second, X.data() + t * HC * D);
  }

  for (size_t i = 0; i < items.size(); ++i) {
    ForwardItem& it = items[i];
    const int64_t n = offset[i + 1] - offset[i];
    it.state->n_tokens += n;
    const int64_t first = it.all_logits ? 0 : std::max<int64_t>(n - 1, 0);
    it.logits.assign(static_cast<size_t>((n - first) * V), 0.0f);
    std::vector<float> h(D), hn(D);
    for (int64_t t = first; t < n; ++t) {
      const float* x = X.data() + (offset[i] + t) * HC * D;
      for (int64_t d = 0; d < D; ++d) {
        float s = 0.0f;
        for (int64_t k = 0; k < HC; ++k) s += x[k * D + d];
        h[d] = s / static_cast<float>(HC);
      }
      rms_norm(h.data(), w_.final_norm.data(), D, eps, hn.data());
      apply(w_.lm_head, hn.data(), it.logits.data() + (t - first) * V);
    }
  }
}

std::vector<float> ReferenceEngine::prefill(SequenceState& s, std::span<const int32_t> tokens, bool all_logits,
                                            ForwardObserver* obs) {
  ForwardItem it{&s, tokens, all_logits, {}};
  forward(std::span<ForwardItem>(&it, 1), obs);
  return std::move(it.logits);
}

std::vector<float> ReferenceEngine::decode(SequenceState& s, int32_t token, ForwardObserver* obs) {
  ForwardItem it{&s, std::span<const int32_t>(&token, 1), false, {}};
  forward(std::span<ForwardItem>(&it, 1), obs);
  return std::move(it.logits);
}

}  // namespace ft
