#include "shared/engine/weights.h"

#include <cmath>

#include "shared/core/error.h"
#include "shared/model/safetensors.h"
#include "shared/model/tensor_convert.h"

namespace ft {

namespace {

// Resolves logical names to on-disk names: `model.language_model.<suffix>` first, then
// `model.<suffix>` (flat text-only checkpoints), per name.
class Names {
 public:
  Names(const TensorStore& st, bool keep_quantized) : st_(st), keep_quantized_(keep_quantized) {}

  std::string resolve(const std::string& suffix) const {
    for (const char* pre : {"model.language_model.", "model."})
      if (st_.find(pre + suffix)) return pre + suffix;
    return "model.language_model." + suffix;
  }
  // First spelling among `alts` (suffixes) that exists, else the first one (for the message).
  std::string resolve_any(std::initializer_list<std::string> alts) const {
    for (const auto& a : alts) {
      std::string n = resolve(a);
      if (st_.find(n)) return n;
    }
    return resolve(*alts.begin());
  }

  std::vector<float> vec(std::initializer_list<std::string> alts, std::vector<int64_t> shape) const {
    const std::string n = resolve_any(alts);
    const TensorInfo& t = st_.get(n);
    expect_shape(t, shape);
    return to_f32(t);
  }
  DenseLinear lin(std::initializer_list<std::string> alts, int64_t out, int64_t in, bool bias = false) const {
    const std::string n = resolve_any_linear(alts);
    return load_linear(st_, n, out, in, bias, keep_quantized_);
  }
  bool has(const std::string& suffix) const {
    return st_.find("model.language_model." + suffix) || st_.find("model." + suffix);
  }
  bool has_lin(const std::string& suffix) const {
    for (const char* pre : {"model.language_model.", "model."})
      if (has_linear(st_, pre + suffix)) return true;
    return false;
  }
  const TensorStore& store() const { return st_; }

 private:
  std::string resolve_any_linear(std::initializer_list<std::string> alts) const {
    for (const auto& a : alts)
      for (const char* pre : {"model.language_model.", "model."})
        if (has_linear(st_, pre + a)) return pre + a;
    return "model.language_model." + *alts.begin();
  }
  const TensorStore& st_;
  bool keep_quantized_;
};

MhcWeights load_mhc(const Names& nm, const std::string& p, const char* site, const ModelConfig& c) {
  const int64_t nmix = c.nmix(), hd = c.hc_mult * c.hidden_size;
  const std::string a = std::string("hc_") + site + "_", b = std::string(site) + "_hc.";
  MhcWeights w;
  w.fn = nm.vec({p + a + "fn", p + b + "fn"}, {nmix, hd});
  w.base = nm.vec({p + a + "base", p + b + "base"}, {nmix});
  w.scale = nm.vec({p + a + "scale", p + b + "scale"}, {3});
  return w;
}

// Short-conv taps as [3Q, K]: three per-projection tensors [Q, 1, K] or one fused conv1d.
std::vector<float> load_conv(const Names& nm, const std::string& p, const ModelConfig& c) {
  const int64_t Q = c.linear_dim(), K = c.linear_conv_kernel_dim;
  std::vector<float> out;
  auto read = [&](const std::string& name, int64_t rows) {
    const TensorInfo& t = nm.store().get(name);
    if (t.shape == std::vector<int64_t>{rows, 1, K} || t.shape == std::vector<int64_t>{rows, K}) {
      auto v = to_f32(t);
      out.insert(out.end(), v.begin(), v.end());
    } else {
      expect_shape(t, {rows, 1, K});
    }
  };
  if (nm.has(p + "self_attn.conv1d.weight")) {
    read(nm.resolve(p + "self_attn.conv1d.weight"), 3 * Q);
  } else {
    for (const char* s : {"q", "k", "v"}) read(nm.resolve(p + "self_attn." + s + "_conv1d.weight"), Q);
  }
  return out;
}

KdaWeights load_kda(const Names& nm, const std::string& p, const ModelConfig& c) {
  const int64_t D = c.hidden_size, Q = c.linear_dim(), dl = c.linear_head_dim, H = c.linear_num_heads;
  const std::string s = p + "self_attn.";
  KdaWeights w;
  w.q = nm.lin({s + "q_proj"}, Q, D);
  w.k = nm.lin({s + "k_proj"}, Q, D);
  w.v = nm.lin({s + "v_proj"}, Q, D);
  w.conv = load_conv(nm, p, c);
  w.f_a = nm.lin({s + "f_a_proj", s + "forget_gate.f_a_proj"}, dl, D);
  w.f_b = nm.lin({s + "f_b_proj", s + "forget_gate.f_b_proj"}, Q, dl);
  w.dt_bias = nm.vec({s + "dt_bias", s + "forget_gate.dt_bias"}, {Q});
  w.a_log = nm.vec({s + "A_log", s + "forget_gate.A_log"}, {H});
  w.b = nm.lin({s + "b_proj"}, H, D);
  w.g_a = nm.lin({s + "g_a_proj"}, dl, D);
  w.g_b = nm.lin({s + "g_b_proj"}, Q, dl);
  w.o_norm = nm.vec({s + "o_norm.weight"}, {dl});
  w.o = nm.lin({s + "o_proj"}, D, Q);
  return w;
}

MlaWeights load_mla(const Names& nm, const std::string& p, const ModelConfig& c, bool own_indexer) {
  const int64_t D = c.hidden_size, NH = c.num_attention_heads, Rq = c.q_lora_rank, Rkv = c.kv_lora_rank;
  const bool bias = c.attention_bias;
  const std::string s = p + "self_attn.";
  MlaWeights w;
  w.q_a = nm.lin({s + "q_a_proj"}, Rq, D, bias);
  w.q_a_norm = nm.vec({s + "q_a_layernorm.weight"}, {Rq});
  w.q_b = nm.lin({s + "q_b_proj"}, NH * c.qk_head_dim, Rq);
  w.kv_a = nm.lin({s + "kv_a_proj_with_mqa"}, Rkv + c.qk_rope_head_dim, D, bias);
  w.kv_a_norm = nm.vec({s + "kv_a_layernorm.weight"}, {Rkv});
  w.kv_b = nm.lin({s + "kv_b_proj"}, NH * (c.qk_nope_head_dim + c.v_head_dim), Rkv);
  w.o = nm.lin({s + "o_proj"}, D, NH * c.v_head_dim, bias);
  if (own_indexer) {
    const int64_t IH = c.index_n_heads, ID = c.index_head_dim;
    const std::string i = s + "indexer.";
    IndexerWeights x;
    x.wq_b = nm.lin({i + "wq_b"}, IH * ID, Rq);
    x.wk = nm.lin({i + "wk"}, ID, D);
    x.k_norm_w = nm.vec({i + "k_norm.weight"}, {ID});
    x.k_norm_b = nm.vec({i + "k_norm.bias"}, {ID});
    x.weights_proj = nm.lin({i + "weights_proj"}, IH, D);
    {
      // The pooling gate is a bare parameter [ID, D], not a Linear; read it as one anyway.
      const std::string g = nm.resolve(i + "index_kpool_compress_gate");
      const TensorInfo& t = nm.store().get(g);
      expect_shape(t, {ID, D});
      x.gate.out = ID;
      x.gate.in = D;
      x.gate.w = to_f32(t);
    }
    {
      const std::string a = nm.resolve(i + "index_kpool_compress_ape");
      const TensorInfo& t = nm.store().get(a);
      if (t.shape.size() == 2 && t.shape[1] == ID && t.shape[0] != c.index_kpool)
        throw Error(t.where() + " has shape " + t.shape_str() + " but config index_kpool is " +
                    std::to_string(c.index_kpool) + " (its first dim must equal index_kpool)");
      expect_shape(t, {c.index_kpool, ID});
      x.ape = to_f32(t);
    }
    w.indexer = std::move(x);
  }
  return w;
}

MlpWeights load_mlp(const Names& nm, const std::string& s, int64_t D, int64_t I) {
  MlpWeights w;
  w.gate = nm.lin({s + "gate_proj"}, I, D);
  w.up = nm.lin({s + "up_proj"}, I, D);
  w.down = nm.lin({s + "down_proj"}, D, I);
  return w;
}

// Routed experts: per-expert tensors, or transformers' fused [E, 2·Im, D] / [E, D, Im].
std::vector<MlpWeights> load_experts(const Names& nm, const std::string& p, const ModelConfig& c) {
  const int64_t E = c.n_routed_experts, D = c.hidden_size, Im = c.moe_intermediate_size;
  std::vector<MlpWeights> ex;
  ex.reserve(E);
  const std::string fused = p + "mlp.experts.gate_up_proj";
  if (nm.has(fused) && !nm.has_lin(p + "mlp.experts.0.gate_proj")) {
    const TensorInfo& gu = nm.store().get(nm.resolve(fused));
    const TensorInfo& dn = nm.store().get(nm.resolve(p + "mlp.experts.down_proj"));
    expect_shape(gu, {E, 2 * Im, D});
    expect_shape(dn, {E, D, Im});
    const auto g = to_f32(gu), d = to_f32(dn);
    for (int64_t e = 0; e < E; ++e) {
      MlpWeights w;
      const float* base = g.data() + e * 2 * Im * D;
      w.gate = {Im, D, std::vector<float>(base, base + Im * D), {}, nullptr};
      w.up = {Im, D, std::vector<float>(base + Im * D, base + 2 * Im * D), {}, nullptr};
      w.down = {D, Im, std::vector<float>(d.data() + e * D * Im, d.data() + (e + 1) * D * Im), {}, nullptr};
      ex.push_back(std::move(w));
    }
    return ex;
  }
  for (int64_t e = 0; e < E; ++e) ex.push_back(load_mlp(nm, p + "mlp.experts." + std::to_string(e) + ".", D, Im));
  return ex;
}

}  // namespace

ModelWeights load_model(const std::string& dir, const LoadOptions& opts) {
  ModelWeights m;
  m.cfg = load_config(dir);
  const ModelConfig& c = m.cfg;
  auto store = std::make_shared<TensorStore>(TensorStore::open(dir));
  m.store = store;
  const TensorStore& st = *store;
  const Names nm(st, opts.keep_quantized);
  const int64_t V = c.vocab_size, D = c.hidden_size;

  m.embed = nm.vec({"embed_tokens.weight"}, {V, D});
  m.final_norm = nm.vec({"norm.weight"}, {D});
  if (has_linear(st, "lm_head")) {
    m.lm_head = load_linear(st, "lm_head", V, D, false, opts.keep_quantized);
  } else if (c.tie_word_embeddings) {
    m.lm_head = {V, D, m.embed, {}, nullptr};
  } else {
    throw Error(st.source() + ": missing tensor lm_head.weight (and tie_word_embeddings is false)");
  }

  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    LayerWeights L;
    L.attn_hc = load_mhc(nm, p, "attn", c);
    L.ffn_hc = load_mhc(nm, p, "ffn", c);
    L.input_norm = nm.vec({p + "input_layernorm.weight"}, {D});
    L.post_norm = nm.vec({p + "post_attention_layernorm.weight"}, {D});
    if (c.is_sparse(l))
      L.mla = load_mla(nm, p, c, c.has_indexer(l));
    else
      L.kda = load_kda(nm, p, c);
    if (c.is_moe(l)) {
      MoeWeights moe;
      moe.router = nm.lin({p + "mlp.gate"}, c.n_routed_experts, D);
      moe.correction_bias = nm.vec({p + "mlp.gate.e_score_correction_bias"}, {c.n_routed_experts});
      if (opts.routed_experts) moe.experts = load_experts(nm, p, c);
      moe.shared = load_mlp(nm, p + "mlp.shared_experts.", D, c.moe_intermediate_size * c.n_shared_experts);
      L.moe = std::move(moe);
    } else {
      L.dense = load_mlp(nm, p + "mlp.", D, c.intermediate_size);
    }
    m.layers.push_back(std::move(L));
  }
  return m;
}

}  // namespace ft
