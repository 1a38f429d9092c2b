#include "gpu-worker/backends/cuda/engine/device_model.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/engine/device_fill.h"
#include "gpu-worker/backends/cuda/ops/linear_f16_wgmma.h"
#include "shared/core/error.h"
#include "shared/core/half.h"
#include "shared/exl3/expert_block.h"
#include "shared/exl3/reference.h"

namespace ft::cuda {

bool LinearGroup::all_dense() const {
  for (const GpuLinear& p : parts)
    if (p.exl3) return false;
  return true;
}

bool LinearGroup::any_f16() const {
  for (const GpuLinear& p : parts)
    if (!p.exl3 && !p.fp32) return true;
  return false;
}

int64_t LinearGroup::max_in_pad() const { return (in + 7) / 8 * 8; }

namespace {

bool bf16_exact(const std::vector<float>& v) {
  for (float f : v) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    if (b & 0xffffu) return false;
  }
  return true;
}

// A linear with neither a dense weight nor a quantized one is a placeholder of a synthetic model
// (synthetic_model.h): its weights are drawn on the device.
bool synthetic(const DenseLinear& l) { return l.w.empty() && !l.exl3; }

// The dense fp32 weight of a linear, decoding a quantized one (needed where the GPU wants the
// weight itself: MLA's per-head kv_b, and EXL3 linears until their fused kernels serve them).
std::vector<float> host_dense(const DenseLinear& l) {
  if (!l.w.empty() || !l.exl3) return l.w;
  return exl3::dense_weight(*l.exl3, l.out, l.in);
}

class Uploader {
 public:
  Uploader(DeviceModel& m, VramBudget& b) : m_(m), b_(b), fp32_(m.fp32) {}

  void* raw(const void* src, size_t bytes, const std::string& what) {
    m_.storage.emplace_back(b_, bytes, VramCategory::Weights, what);
    void* p = m_.storage.back().get();
    FT_CUDA_CHECK(cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice));
    m_.bytes += bytes;
    return p;
  }
  const float* vec(const std::vector<float>& v, const std::string& what) {
    if (v.empty()) return nullptr;
    return static_cast<const float*>(raw(v.data(), v.size() * sizeof(float), what));
  }

  void* alloc(size_t bytes, const std::string& what) {
    m_.storage.emplace_back(b_, bytes, VramCategory::Weights, what);
    m_.bytes += bytes;
    return m_.storage.back().get();
  }

  // Uniform weights of variance 1/in (outputs keep the scale of their inputs), drawn on the GPU.
  LinearF16 f16_synthetic(int64_t out, int64_t in, const std::string& what) {
    const int64_t ld = (in + 7) / 8 * 8;
    LinearF16 L;
    L.out = out;
    L.in = in;
    auto* w = static_cast<__half*>(alloc(static_cast<size_t>(out * ld) * 2, what));
    fill_uniform_f16(w, out, in, ld, 16384.0f, seed_++, nullptr);
    L.w = w;
    L.w_scale = std::sqrt(3.0f / static_cast<float>(in)) / 16384.0f;
    L.k_chunk = linear_k_chunk(in, out);
    m_.max_linear_in = std::max(m_.max_linear_in, ld);
    return L;
  }

  LinearF16 f16(const float* w, int64_t out, int64_t in, const std::vector<float>* bias, const std::string& what) {
    const HostLinearF16 h = prepare_linear_f16(w, out, in);
    LinearF16 L;
    L.out = out;
    L.in = in;
    L.w = static_cast<const __half*>(raw(h.w.data(), h.w.size() * sizeof(uint16_t), what));
    L.w_scale = h.w_scale;
    L.bias = bias && !bias->empty() ? vec(*bias, what + ".bias") : nullptr;
    L.k_chunk = linear_k_chunk(in, out);
    m_.max_linear_in = std::max(m_.max_linear_in, h.in_pad);
    return L;
  }

  // Linears over one input written side by side; fused into one fp16 linear.
  LinearGroup group(const std::vector<const DenseLinear*>& parts, const std::string& what) {
    LinearGroup g;
    g.in = parts.at(0)->in;
    bool any_synthetic = false;
    for (const DenseLinear* p : parts) {
      if (p->in != g.in) throw Error(what + ": fused linears disagree on their input width");
      g.offset.push_back(g.out);
      g.out += p->out;
      any_synthetic |= synthetic(*p);
    }
    bool any_quantized = false;
    for (const DenseLinear* p : parts) any_quantized |= p->exl3 != nullptr;
    // fp32 precision computes a quantized linear from its decoded dense weight (host_dense).
    if (any_quantized && !fp32_) {
      // Quantized parts stay separate (each has its own scales and K); dense ones beside them
      // become their own fp16 linears.
      for (const DenseLinear* p : parts) {
        GpuLinear gl;
        gl.out = p->out;
        gl.in = p->in;
        if (p->exl3) {
          m_.exl3_storage.push_back(
              std::make_unique<Exl3LinearGpu>(upload_exl3_linear(*p->exl3, p->out, p->in, b_)));
          m_.bytes += m_.exl3_storage.back()->bytes();
          gl.exl3 = m_.exl3_storage.back().get();
          m_.exl3_linears.push_back(&gl.exl3->dev());
        } else {
          const std::vector<float> d = host_dense(*p);
          gl.dense = f16(d.data(), p->out, p->in, &p->bias, what);
        }
        g.parts.push_back(gl);
      }
      return g;
    }
    if (any_synthetic) {
      GpuLinear gl;
      gl.out = g.out;
      gl.in = g.in;
      if (fp32_) {
        DenseLinear placeholder;
        placeholder.out = g.out;
        placeholder.in = g.in;
        gl.exact = f32(placeholder, what);
        gl.fp32 = true;
      } else {
        gl.dense = f16_synthetic(g.out, g.in, what);
      }
      g.parts = {gl};
      g.offset = {0};
      return g;
    }
    std::vector<float> W;
    W.reserve(static_cast<size_t>(g.out * g.in));
    std::vector<float> bias;
    bool any_bias = false;
    for (const DenseLinear* p : parts) any_bias |= !p->bias.empty();
    for (const DenseLinear* p : parts) {
      const std::vector<float> d = host_dense(*p);
      W.insert(W.end(), d.begin(), d.end());
      if (any_bias) {
        if (p->bias.empty()) bias.insert(bias.end(), static_cast<size_t>(p->out), 0.0f);
        else bias.insert(bias.end(), p->bias.begin(), p->bias.end());
      }
    }
    GpuLinear gl;
    gl.out = g.out;
    gl.in = g.in;
    if (fp32_) {
      DenseLinear fused;
      fused.out = g.out;
      fused.in = g.in;
      fused.w = std::move(W);
      fused.bias = std::move(bias);
      gl.exact = f32(fused, what, true);
      gl.fp32 = true;
    } else {
      gl.dense = f16(W.data(), g.out, g.in, any_bias ? &bias : nullptr, what);
    }
    g.parts = {gl};
    g.offset = {0};
    return g;
  }
  LinearGroup group(const DenseLinear& l, const std::string& what) { return group({&l}, what); }

  // `with_bias`: the linear's bias too (the router and the mixing logits have none in the spec).
  LinearF32 f32(const DenseLinear& l, const std::string& what, bool with_bias = false) {
    LinearF32 L;
    L.out = l.out;
    L.in = l.in;
    if (with_bias && !l.bias.empty()) L.bias = vec(l.bias, what + ".bias");
    if (synthetic(l)) {
      auto* w = static_cast<float*>(alloc(static_cast<size_t>(l.out * l.in) * 4, what));
      fill_uniform_f32(w, l.out * l.in, std::sqrt(3.0f / static_cast<float>(l.in)), seed_++, nullptr);
      L.w = w;
      return L;
    }
    const std::vector<float> d = host_dense(l);
    if (bf16_exact(d)) {
      std::vector<uint16_t> h(d.size());
      for (size_t i = 0; i < d.size(); ++i) h[i] = f32_to_bf16(d[i]);
      L.w = raw(h.data(), h.size() * 2, what);
      L.w_bf16 = true;
    } else {
      L.w = vec(d, what);
    }
    return L;
  }
  LinearF32 f32(const std::vector<float>& w, int64_t out, int64_t in, const std::string& what) {
    DenseLinear l;
    l.out = out;
    l.in = in;
    l.w = w;
    return f32(l, what);
  }

  // EXL3 routed experts packed into expert blocks (shared/exl3/expert_block.h, the
  // cpu-expert-worker's layout) in VRAM, and the layer's table of where each one is.
  Exl3MoeLayer exl3_experts(const std::vector<MlpWeights>& ex, const ModelConfig& c, int64_t layer,
                            const std::string& what) {
    const int64_t D = c.hidden_size, I = c.moe_intermediate_size;
    exl3::ExpertGeometry geo;
    geo.hidden = D;
    geo.inter = I;
    const exl3::Exl3Linear* pr[3] = {ex[0].gate.exl3.get(), ex[0].up.exl3.get(), ex[0].down.exl3.get()};
    for (int j = 0; j < 3; ++j) {
      geo.K[j] = pr[j]->K;
      geo.codebook[j] = pr[j]->codebook;
    }
    const exl3::ExpertBlockHeader h = exl3::plan_expert_block(geo);
    const size_t bb = h.block_bytes;
    std::vector<uint8_t> host(bb * ex.size());
    for (size_t e = 0; e < ex.size(); ++e) {
      if (!ex[e].gate.exl3 || !ex[e].up.exl3 || !ex[e].down.exl3)
        throw Error(what + "mlp.experts." + std::to_string(e) + ": routed experts mix quantized and dense projections");
      exl3::pack_expert_block(*ex[e].gate.exl3, *ex[e].up.exl3, *ex[e].down.exl3, D, I, host.data() + e * bb);
    }
    auto* dev = static_cast<uint8_t*>(raw(host.data(), host.size(), what + "routed expert blocks"));
    Exl3MoeLayer L = exl3_moe_geometry(host.data(), static_cast<int>(ex.size()));
    // Every expert in VRAM: whole-input items beat split-K ones at every batch (flashtier-bench-exl3,
    // H200, D 4096 × I 2048 top-8: 125 vs 189 µs at 1 token, 536 vs 802 µs at 8). Tier layers keep
    // the split: their zero-copy items are long, and few whole-input ones leave a ragged last wave.
    L.split_picks = 0;
    std::vector<Exl3ExpertPtrs> table(ex.size());
    for (size_t e = 0; e < ex.size(); ++e) {
      exl3_moe_check_block(L, host.data() + e * bb, static_cast<int>(e));
      table[e] = exl3_expert_ptrs(host.data() + e * bb, dev + e * bb);
    }
    L.table = static_cast<const Exl3ExpertPtrs*>(
        raw(table.data(), table.size() * sizeof(Exl3ExpertPtrs), what + "routed expert table"));
    (void)layer;
    return L;
  }

  MlpGpu mlp(const MlpWeights& w, const std::string& what) {
    MlpGpu g;
    g.inter = w.gate.out;
    g.gate_up = group({&w.gate, &w.up}, what + ".gate_up");
    g.down = group(w.down, what + ".down");
    return g;
  }

 private:
  DeviceModel& m_;
  VramBudget& b_;
  bool fp32_;
  uint64_t seed_ = 0x5EED;
};

MhcSite site(const MhcWeights& hw, const float* norm_w, const ModelConfig& c, Uploader& up,
             const std::string& what) {
  MhcSite s;
  s.base = up.vec(hw.base, what + ".base");
  s.scale = up.vec(hw.scale, what + ".scale");
  s.norm_w = norm_w;
  s.hc = c.hc_mult;
  s.dim = c.hidden_size;
  s.rms_eps = static_cast<float>(c.rms_norm_eps);
  s.hc_eps = static_cast<float>(c.hc_eps);
  s.sinkhorn_iters = c.hc_sinkhorn_iters;
  return s;
}

}  // namespace

namespace {

// fp32 precision: MLA's per-head key absorption [Rkv, dn] and value expansion [dv, Rkv] as
// fp32 linears, one per head, viewing one upload of all heads.
void per_head_f32(const LinearF32& all, int64_t heads, int64_t out, std::vector<LinearF32>& dst) {
  const size_t esz = all.w_bf16 ? 2 : 4;
  for (int64_t h = 0; h < heads; ++h) {
    LinearF32 L = all;
    L.out = out;
    L.w = static_cast<const uint8_t*>(all.w) + static_cast<size_t>(h * out * all.in) * esz;
    dst.push_back(L);
  }
}

}  // namespace

std::unique_ptr<DeviceModel> upload_model(const ModelWeights& w, VramBudget& budget, bool fp32) {
  auto m = std::make_unique<DeviceModel>();
  m->cfg = w.cfg;
  m->fp32 = fp32;
  const ModelConfig& c = w.cfg;
  Uploader up(*m, budget);
  const int64_t D = c.hidden_size;

  if (w.embed.empty()) {  // synthetic
    auto* e = static_cast<uint16_t*>(up.alloc(static_cast<size_t>(c.vocab_size * D) * 2, "embed_tokens"));
    fill_uniform_bf16(e, c.vocab_size * D, 1.0f, 0xE3BED, nullptr);
    m->embed.data = e;
    m->embed.dtype = EmbedDtype::BF16;
  } else if (bf16_exact(w.embed)) {
    std::vector<uint16_t> h(w.embed.size());
    for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_bf16(w.embed[i]);
    m->embed.data = up.raw(h.data(), h.size() * 2, "embed_tokens");
    m->embed.dtype = EmbedDtype::BF16;
  } else {
    m->embed.data = up.vec(w.embed, "embed_tokens");
    m->embed.dtype = EmbedDtype::F32;
  }
  m->embed.vocab = c.vocab_size;
  m->embed.dim = D;
  m->final_norm = up.vec(w.final_norm, "norm");
  m->lm_head = up.group(w.lm_head, "lm_head");

  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    const std::string p = "layers." + std::to_string(l) + ".";
    LayerGpu g;
    const float* in_norm = up.vec(L.input_norm, p + "input_layernorm");
    const float* post_norm = up.vec(L.post_norm, p + "post_attention_layernorm");
    g.attn_site = site(L.attn_hc, in_norm, c, up, p + "hc_attn");
    g.ffn_site = site(L.ffn_hc, post_norm, c, up, p + "hc_ffn");
    const int64_t nmix = c.nmix(), hd = c.hc_mult * D;
    g.attn_fn = up.f32(L.attn_hc.fn, nmix, hd, p + "hc_attn_fn");
    g.ffn_fn = up.f32(L.ffn_hc.fn, nmix, hd, p + "hc_ffn_fn");
    if (L.kda) {
      const KdaWeights& k = *L.kda;
      KdaLayerGpu kg;
      const int64_t Q = c.linear_dim(), dl = c.linear_head_dim, H = c.linear_num_heads;
      kg.in = up.group({&k.q, &k.k, &k.v, &k.f_a, &k.b, &k.g_a}, p + "self_attn.qkv_fa_b_ga");
      kg.col_q = 0;
      kg.col_fa = 3 * Q;
      kg.col_b = 3 * Q + dl;
      kg.col_ga = 3 * Q + dl + H;
      kg.f_b = up.group(k.f_b, p + "self_attn.f_b_proj");
      kg.g_b = up.group(k.g_b, p + "self_attn.g_b_proj");
      kg.conv = up.vec(k.conv, p + "self_attn.conv1d");
      kg.dt_bias = up.vec(k.dt_bias, p + "self_attn.dt_bias");
      kg.a_log = up.vec(k.a_log, p + "self_attn.A_log");
      kg.o_norm = up.vec(k.o_norm, p + "self_attn.o_norm");
      kg.o = up.group(k.o, p + "self_attn.o_proj");
      g.kda = std::move(kg);
    } else {
      const MlaWeights& a = *L.mla;
      MlaLayerGpu mg;
      const int64_t Rq = c.q_lora_rank, Rkv = c.kv_lora_rank, NH = c.num_attention_heads;
      const int64_t dn = c.qk_nope_head_dim, dv = c.v_head_dim, ID = c.index_head_dim;
      mg.own_indexer = a.indexer.has_value();
      if (dn % 8 != 0 || Rkv % 8 != 0)
        throw Error("the CUDA backend needs qk_nope_head_dim and kv_lora_rank to be multiples of 8 (this model has " +
                    std::to_string(dn) + " and " + std::to_string(Rkv) + "); use --backend cpu");
      std::vector<const DenseLinear*> in = {&a.q_a, &a.kv_a};
      if (mg.own_indexer) {
        in.push_back(&a.indexer->wk);
        in.push_back(&a.indexer->gate);
      }
      mg.in = up.group(in, p + "self_attn.q_a_kv_a_wk_gate");
      mg.col_kv = Rq;
      mg.col_wk = Rq + Rkv;
      mg.col_gate = Rq + Rkv + ID;
      mg.q_a_norm = up.vec(a.q_a_norm, p + "self_attn.q_a_layernorm");
      mg.kv_a_norm = up.vec(a.kv_a_norm, p + "self_attn.kv_a_layernorm");
      std::vector<const DenseLinear*> qb = {&a.q_b};
      if (mg.own_indexer) qb.push_back(&a.indexer->wq_b);
      mg.q_b = up.group(qb, p + "self_attn.q_b_wq_b");
      mg.col_qI = NH * c.qk_head_dim;
      // kv_b rows per head h: [h(dn+dv), +dn) key part W_kb,h [dn, Rkv], then W_vb,h [dv, Rkv];
      // uploaded as all heads' W_kb,hᵀ [NH·Rkv, dn] and W_vb,h [NH·dv, Rkv].
      std::vector<float> kbt, vb;
      if (!synthetic(a.kv_b)) {
        const std::vector<float> kvb = host_dense(a.kv_b);
        kbt.resize(static_cast<size_t>(NH * Rkv * dn));
        vb.resize(static_cast<size_t>(NH * dv * Rkv));
        for (int64_t h = 0; h < NH; ++h) {
          const float* base = kvb.data() + h * (dn + dv) * Rkv;
          for (int64_t d = 0; d < dn; ++d)
            for (int64_t r = 0; r < Rkv; ++r) kbt[(h * Rkv + r) * dn + d] = base[d * Rkv + r];
          std::copy(base + dn * Rkv, base + (dn + dv) * Rkv, vb.begin() + h * dv * Rkv);
        }
      }
      const std::string kname = p + "self_attn.kv_b_proj.key", vname = p + "self_attn.kv_b_proj.value";
      if (fp32) {
        // An empty weight is a synthetic placeholder (drawn on the device).
        per_head_f32(up.f32(kbt, NH * Rkv, dn, kname), NH, Rkv, mg.kb_heads);
        per_head_f32(up.f32(vb, NH * dv, Rkv, vname), NH, dv, mg.vb_heads);
      } else {
        const bool synth = synthetic(a.kv_b);
        mg.kb_t = synth ? up.f16_synthetic(NH * Rkv, dn, kname) : up.f16(kbt.data(), NH * Rkv, dn, nullptr, kname);
        mg.vb = synth ? up.f16_synthetic(NH * dv, Rkv, vname) : up.f16(vb.data(), NH * dv, Rkv, nullptr, vname);
        mg.kb_t.out = Rkv;
        mg.kb_t.k_chunk = linear_k_chunk(dn, Rkv);
        mg.kb_t_stride = Rkv * ((dn + 7) / 8 * 8);
        mg.vb.out = dv;
        mg.vb.k_chunk = linear_k_chunk(Rkv, dv);
        mg.vb_stride = dv * ((Rkv + 7) / 8 * 8);
      }
      mg.o = up.group(a.o, p + "self_attn.o_proj");
      if (mg.own_indexer) {
        const IndexerWeights& x = *a.indexer;
        // ω = (W_wp·a)·IH^−1/2: the scale is folded into the weight (fp32 rounding only).
        DenseLinear wp = x.weights_proj;
        wp.w = host_dense(x.weights_proj);
        if (synthetic(x.weights_proj)) wp.w.assign(static_cast<size_t>(wp.out * wp.in), 0.01f);
        const float sc = 1.0f / std::sqrt(static_cast<float>(c.index_n_heads));
        for (float& v : wp.w) v *= sc;
        wp.exl3.reset();
        mg.weights_proj = up.f32(wp, p + "self_attn.indexer.weights_proj");
        mg.k_norm_w = up.vec(x.k_norm_w, p + "self_attn.indexer.k_norm.weight");
        mg.k_norm_b = up.vec(x.k_norm_b, p + "self_attn.indexer.k_norm.bias");
        mg.ape = up.vec(x.ape, p + "self_attn.indexer.index_kpool_compress_ape");
      }
      g.mla = std::move(mg);
    }
    if (L.dense) {
      g.dense = up.mlp(*L.dense, p + "mlp");
    } else {
      const MoeWeights& moe = *L.moe;
      MoeLayerGpu mo;
      mo.router = up.f32(moe.router, p + "mlp.gate");
      mo.correction_bias = up.vec(moe.correction_bias, p + "mlp.gate.e_score_correction_bias");
      mo.shared = up.mlp(moe.shared, p + "mlp.shared_experts");
      if (!moe.experts.empty() && moe.experts[0].gate.exl3 && !fp32) {
        mo.exl3_experts = up.exl3_experts(moe.experts, c, l, p);
        mo.local_experts = true;
      } else if (!moe.experts.empty() && fp32) {
        std::vector<DenseExpertF32> table;
        for (size_t e = 0; e < moe.experts.size(); ++e) {
          const MlpWeights& x = moe.experts[e];
          const std::string n = p + "mlp.experts." + std::to_string(e);
          table.push_back({up.f32(x.gate, n + ".gate_proj"), up.f32(x.up, n + ".up_proj"),
                           up.f32(x.down, n + ".down_proj")});
        }
        mo.dense_experts32 = static_cast<const DenseExpertF32*>(
            up.raw(table.data(), table.size() * sizeof(DenseExpertF32), p + "experts.table"));
        mo.local_experts = true;
      } else if (!moe.experts.empty()) {
        std::vector<DenseExpert> table;
        for (size_t e = 0; e < moe.experts.size(); ++e) {
          const MlpWeights& x = moe.experts[e];
          const std::string n = p + "mlp.experts." + std::to_string(e);
          DenseExpert de;
          if (synthetic(x.gate)) {
            de.gate = up.f16_synthetic(x.gate.out, x.gate.in, n + ".gate_proj");
            de.up = up.f16_synthetic(x.up.out, x.up.in, n + ".up_proj");
            de.down = up.f16_synthetic(x.down.out, x.down.in, n + ".down_proj");
          } else {
            const std::vector<float> gw = host_dense(x.gate), uw = host_dense(x.up), dw = host_dense(x.down);
            de.gate = up.f16(gw.data(), x.gate.out, x.gate.in, nullptr, n + ".gate_proj");
            de.up = up.f16(uw.data(), x.up.out, x.up.in, nullptr, n + ".up_proj");
            de.down = up.f16(dw.data(), x.down.out, x.down.in, nullptr, n + ".down_proj");
          }
          table.push_back(de);
        }
        mo.dense_experts =
            static_cast<const DenseExpert*>(up.raw(table.data(), table.size() * sizeof(DenseExpert), p + "experts.table"));
        // The sorted-row prefill form's tensor maps, only where this device runs it: its
        // workspace holds a copy of a chunk's x rows per pick (ops/moe.h).
        if (lin::grouped_sorted_wgmma()) {
          std::vector<DenseExpertMaps> maps(table.size());
          bool ok = true;
          for (size_t e = 0; ok && e < table.size(); ++e) ok = moe_dense_expert_maps(table[e], maps[e]);
          if (ok)
            mo.dense_expert_maps = static_cast<const DenseExpertMaps*>(
                up.raw(maps.data(), maps.size() * sizeof(DenseExpertMaps), p + "experts.maps"));
        }
        mo.local_experts = true;
      }
      g.moe = std::move(mo);
    }
    m->layers.push_back(std::move(g));
  }
  FT_CUDA_CHECK(cudaDeviceSynchronize());
  return m;
}

}  // namespace ft::cuda
