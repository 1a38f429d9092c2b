#include "gpu-worker/backends/cuda/engine/synthetic_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace ft::cuda {

ModelConfig synthetic_config(const std::string& overrides_json) {
  std::string j = R"({"architectures": ["Glm5NextForConditionalGeneration"], "model_type": "glm5_next")";
  if (!overrides_json.empty()) j += ", " + overrides_json;
  j += "}";
  return parse_config(j, "synthetic config");
}

ModelWeights synthetic_weights(const ModelConfig& c, uint64_t seed) {
  std::mt19937_64 g(seed);
  auto fill = [&](int64_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = d(g);
    return v;
  };
  auto ones = [](int64_t n) { return std::vector<float>(static_cast<size_t>(n), 1.0f); };
  auto zeros = [](int64_t n) { return std::vector<float>(static_cast<size_t>(n), 0.0f); };
  auto lin = [](int64_t out, int64_t in) { return DenseLinear{out, in, {}, {}, nullptr}; };
  auto mlp = [&](int64_t inter) {
    return MlpWeights{lin(inter, c.hidden_size), lin(inter, c.hidden_size), lin(c.hidden_size, inter)};
  };
  const int64_t D = c.hidden_size, nmix = c.nmix(), Q = c.linear_dim(), dl = c.linear_head_dim;
  const int64_t H = c.linear_num_heads, K = c.linear_conv_kernel_dim;
  ModelWeights w;
  w.cfg = c;
  w.final_norm = ones(D);
  w.lm_head = lin(c.vocab_size, D);
  auto site = [&] {
    MhcWeights m;
    m.base = zeros(nmix);
    m.scale = {1.0f, 1.0f, 1.0f};
    return m;
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    LayerWeights L;
    L.attn_hc = site();
    L.ffn_hc = site();
    L.input_norm = ones(D);
    L.post_norm = ones(D);
    if (c.is_sparse(l)) {
      MlaWeights a;
      const int64_t NH = c.num_attention_heads, Rq = c.q_lora_rank, Rkv = c.kv_lora_rank;
      a.q_a = lin(Rq, D);
      a.q_a_norm = ones(Rq);
      a.q_b = lin(NH * c.qk_head_dim, Rq);
      a.kv_a = lin(Rkv, D);
      a.kv_a_norm = ones(Rkv);
      a.kv_b = lin(NH * (c.qk_nope_head_dim + c.v_head_dim), Rkv);
      a.o = lin(D, NH * c.v_head_dim);
      if (c.has_indexer(l)) {
        const int64_t IH = c.index_n_heads, ID = c.index_head_dim;
        IndexerWeights x;
        x.wq_b = lin(IH * ID, Rq);
        x.wk = lin(ID, D);
        x.k_norm_w = ones(ID);
        x.k_norm_b = zeros(ID);
        x.weights_proj = lin(IH, D);
        x.gate = lin(ID, D);
        x.ape = zeros(c.index_kpool * ID);
        a.indexer = std::move(x);
      }
      L.mla = std::move(a);
    } else {
      KdaWeights k;
      k.q = lin(Q, D);
      k.k = lin(Q, D);
      k.v = lin(Q, D);
      k.conv = fill(3 * Q * K, -0.5f, 0.5f);
      k.f_a = lin(dl, D);
      k.f_b = lin(Q, dl);
      k.dt_bias = zeros(Q);
      k.a_log = fill(H, 0.0f, std::log(16.0f));
      k.b = lin(H, D);
      k.g_a = lin(dl, D);
      k.g_b = lin(Q, dl);
      k.o_norm = ones(dl);
      k.o = lin(D, Q);
      L.kda = std::move(k);
    }
    if (c.is_moe(l)) {
      MoeWeights m;
      m.router = lin(c.n_routed_experts, D);
      m.correction_bias = zeros(c.n_routed_experts);
      for (int64_t e = 0; e < c.n_routed_experts; ++e) m.experts.push_back(mlp(c.moe_intermediate_size));
      m.shared = mlp(c.moe_intermediate_size * c.n_shared_experts);
      L.moe = std::move(m);
    } else {
      L.dense = mlp(c.intermediate_size);
    }
    w.layers.push_back(std::move(L));
  }
  return w;
}

SyntheticExl3Model synthetic_exl3_weights(const ModelConfig& c, const SyntheticExl3Options& o) {
  SyntheticExl3Model m;
  m.weights = synthetic_weights(c, o.seed);
  ModelWeights& w = m.weights;
  // Which linears become EXL3 and at what K; the largest trellis decides the pool's size (every
  // linear reads its bytes from the pool's start).
  std::vector<std::pair<DenseLinear*, int>> todo = {{&w.lm_head, o.head_K}};
  for (LayerWeights& L : w.layers) {
    if (L.kda)
      for (DenseLinear* l : {&L.kda->q, &L.kda->k, &L.kda->v, &L.kda->f_a, &L.kda->f_b, &L.kda->b, &L.kda->g_a,
                             &L.kda->g_b, &L.kda->o})
        todo.emplace_back(l, o.K);
    if (L.mla) {
      for (DenseLinear* l : {&L.mla->q_a, &L.mla->q_b, &L.mla->kv_a, &L.mla->o}) todo.emplace_back(l, o.K);
      if (L.mla->indexer)
        for (DenseLinear* l : {&L.mla->indexer->wq_b, &L.mla->indexer->wk, &L.mla->indexer->gate})
          todo.emplace_back(l, o.K);
    }
    if (L.dense)
      for (DenseLinear* l : {&L.dense->gate, &L.dense->up, &L.dense->down}) todo.emplace_back(l, o.K);
    if (L.moe) {
      for (DenseLinear* l : {&L.moe->shared.gate, &L.moe->shared.up, &L.moe->shared.down}) todo.emplace_back(l, o.K);
      L.moe->experts.clear();
    }
  }
  int64_t pool = 0;
  for (const auto& [l, K] : todo) pool = std::max(pool, exl3::pad128(l->in) * exl3::pad128(l->out) * K / 8);
  m.trellis_pool = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(pool));
  std::mt19937_64 g(o.seed ^ 0x9e3779b97f4a7c15ull);
  for (size_t i = 0; i + 8 <= m.trellis_pool->size(); i += 8) {
    const uint64_t r = g();
    std::memcpy(m.trellis_pool->data() + i, &r, 8);
  }
  for (const auto& [l, K] : todo) {
    auto q = std::make_shared<exl3::Exl3Linear>();
    q->name = "synthetic";
    q->where = "synthetic EXL3 linear";
    q->K = K;
    q->codebook = o.codebook;
    q->in_p = exl3::pad128(l->in);
    q->out_p = exl3::pad128(l->out);
    q->trellis = m.trellis_pool->data();
    q->suh.resize(static_cast<size_t>(q->in_p));
    for (float& s : q->suh) s = (g() & 1) ? 1.0f : -1.0f;
    // Output scale in^-1/2 keeps activations near unit size; zero on the padding (as on disk).
    q->svh.assign(static_cast<size_t>(q->out_p), 0.0f);
    std::fill(q->svh.begin(), q->svh.begin() + l->out, 1.0f / std::sqrt(static_cast<float>(l->in)));
    m.trellis_bytes += static_cast<uint64_t>(q->trellis_bytes());
    l->exl3 = std::move(q);
  }
  return m;
}

}  // namespace ft::cuda
