// Random weights for every tensor a glm5_next checkpoint holds, drawn the way the project's
// fixture generator draws them (scales that exercise the SwiGLU clamp and the routing).
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "shared/core/error.h"
#include "shared/model/safetensors_writer.h"
#include "tools/demo-model/demo_model.h"

namespace ft::demo {

namespace {

class Gen {
 public:
  Gen(SafetensorsWriter& w, uint64_t seed, DType dt) : w_(w), rng_(seed), dt_(dt) {}
  void matrix(const std::string& name, int64_t out, int64_t in) { normal(name, {out, in}, 1.5 / std::sqrt(in), 0.0); }
  void normal(const std::string& name, std::vector<int64_t> shape, double sd, double mean) {
    std::normal_distribution<double> n(mean, sd);
    std::vector<float> v(count(shape));
    for (float& x : v) x = static_cast<float>(n(rng_));
    w_.add(name, dt_, std::move(shape), v);
  }
  void uniform(const std::string& name, std::vector<int64_t> shape, double lo, double hi) {
    std::uniform_real_distribution<double> u(lo, hi);
    std::vector<float> v(count(shape));
    for (float& x : v) x = static_cast<float>(u(rng_));
    w_.add(name, dt_, std::move(shape), v);
  }

 private:
  static size_t count(const std::vector<int64_t>& s) {
    size_t n = 1;
    for (int64_t d : s) n *= static_cast<size_t>(d);
    return n;
  }
  SafetensorsWriter& w_;
  std::mt19937_64 rng_;
  DType dt_;
};

}  // namespace

void write_demo_weights(const DemoOptions& o, int64_t V, const std::vector<int64_t>& eos_ids) {
  const int64_t D = o.hidden, L = o.layers, NH = D / 64, dn = 64, dv = 64, Rq = D / 2, Rkv = D / 4;
  const int64_t I = 2 * D, Im = D / 2, E = o.experts, IH = 8, ID = 32, kpool = 4, topk = 64;
  const int64_t Hl = D / 64, dl = 64, Q = Hl * dl, K = 4, HC = 4, NMIX = (2 + HC) * HC;
  nlohmann::ordered_json text = {
      {"model_type", "glm5_next_text"}, {"vocab_size", V}, {"hidden_size", D}, {"intermediate_size", I},
      {"moe_intermediate_size", Im}, {"num_hidden_layers", L}, {"num_attention_heads", NH},
      {"num_key_value_heads", NH}, {"n_shared_experts", 1}, {"n_routed_experts", E},
      {"num_experts_per_tok", o.top_k}, {"routed_scaling_factor", 2.5}, {"kv_lora_rank", Rkv},
      {"q_lora_rank", Rq}, {"qk_rope_head_dim", 0}, {"qk_nope_head_dim", dn}, {"v_head_dim", dv},
      {"n_group", 1}, {"topk_group", 1}, {"norm_topk_prob", true}, {"hidden_act", "silu"},
      {"rms_norm_eps", 1e-5}, {"index_topk", topk}, {"index_head_dim", ID}, {"index_n_heads", IH},
      {"index_kpool", kpool}, {"index_kpool_always_select_tail", true}, {"linear_head_dim", dl},
      {"linear_num_heads", Hl}, {"linear_conv_kernel_dim", K}, {"linear_lower_bound", -5.0},
      {"hc_mult", HC}, {"hc_eps", 1e-6}, {"hc_sinkhorn_iters", 20}, {"swiglu_limit", 10.0},
      {"max_position_embeddings", 1048576}, {"tie_word_embeddings", false}};
  nlohmann::ordered_json cfg = {{"architectures", {"Glm5NextForConditionalGeneration"}},
                                {"model_type", "glm5_next"},
                                {"text_config", text},
                                {"tie_word_embeddings", false},
                                {"flashtier_demo", true}};
  std::ofstream(o.out_dir + "/config.json") << cfg.dump(2);
  nlohmann::ordered_json gen = {{"eos_token_id", eos_ids}, {"pad_token_id", eos_ids.front()}};
  std::ofstream(o.out_dir + "/generation_config.json") << gen.dump(2);

  SafetensorsWriter w;
  Gen g(w, o.seed, o.fp32 ? DType::F32 : DType::BF16);
  const std::string lm = "model.language_model.";
  g.normal(lm + "embed_tokens.weight", {V, D}, 1.0, 0.0);
  g.normal(lm + "norm.weight", {D}, 0.1, 1.0);
  g.matrix("lm_head.weight", V, D);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = lm + "layers." + std::to_string(l) + ".";
    for (const char* site : {"attn", "ffn"}) {
      const std::string h = p + "hc_" + site + "_";
      g.matrix(h + "fn", NMIX, HC * D);
      g.normal(h + "base", {NMIX}, 0.3, 0.0);
      g.uniform(h + "scale", {3}, 0.5, 1.5);
    }
    g.normal(p + "input_layernorm.weight", {D}, 0.1, 1.0);
    g.normal(p + "post_attention_layernorm.weight", {D}, 0.1, 1.0);
    const std::string a = p + "self_attn.";
    if (l % 4 == 3) {
      g.matrix(a + "q_a_proj.weight", Rq, D);
      g.normal(a + "q_a_layernorm.weight", {Rq}, 0.1, 1.0);
      g.matrix(a + "q_b_proj.weight", NH * dn, Rq);
      g.matrix(a + "kv_a_proj_with_mqa.weight", Rkv, D);
      g.normal(a + "kv_a_layernorm.weight", {Rkv}, 0.1, 1.0);
      g.matrix(a + "kv_b_proj.weight", NH * (dn + dv), Rkv);
      g.matrix(a + "o_proj.weight", D, NH * dv);
      g.matrix(a + "indexer.wq_b.weight", IH * ID, Rq);
      g.matrix(a + "indexer.wk.weight", ID, D);
      g.normal(a + "indexer.k_norm.weight", {ID}, 0.1, 1.0);
      g.normal(a + "indexer.k_norm.bias", {ID}, 0.1, 0.0);
      g.matrix(a + "indexer.weights_proj.weight", IH, D);
      g.normal(a + "indexer.index_kpool_compress_gate", {ID, D}, 0.2, 0.0);
      g.normal(a + "indexer.index_kpool_compress_ape", {kpool, ID}, 0.2, 0.0);
    } else {
      for (const char* s : {"q", "k", "v"}) {
        g.matrix(a + s + "_proj.weight", Q, D);
        g.normal(a + s + "_conv1d.weight", {Q, 1, K}, 1.5 / std::sqrt(K), 0.0);
      }
      g.matrix(a + "f_a_proj.weight", dl, D);
      g.matrix(a + "f_b_proj.weight", Q, dl);
      g.normal(a + "dt_bias", {Q}, 0.5, -2.0);
      g.uniform(a + "A_log", {Hl}, 0.0, 1.0);
      g.matrix(a + "b_proj.weight", Hl, D);
      g.matrix(a + "g_a_proj.weight", dl, D);
      g.matrix(a + "g_b_proj.weight", Q, dl);
      g.normal(a + "o_norm.weight", {dl}, 0.1, 1.0);
      g.matrix(a + "o_proj.weight", D, Q);
    }
    const std::string m = p + "mlp.";
    auto mlp = [&](const std::string& s, int64_t inter) {
      g.matrix(s + "gate_proj.weight", inter, D);
      g.matrix(s + "up_proj.weight", inter, D);
      g.matrix(s + "down_proj.weight", D, inter);
    };
    if (l < 3) {
      mlp(m, I);
    } else {
      g.matrix(m + "gate.weight", E, D);
      g.normal(m + "gate.e_score_correction_bias", {E}, 0.05, 0.0);
      for (int64_t e = 0; e < E; ++e) mlp(m + "experts." + std::to_string(e) + ".", Im);
      mlp(m + "shared_experts.", Im);
    }
  }
  w.write(o.out_dir + "/model.safetensors");
}

}  // namespace ft::demo
