#include "tools/exl3/synthetic_model.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "shared/core/error.h"
#include "shared/core/half.h"
#include "shared/exl3/exl3_linear.h"
#include "tools/exl3/stream_writer.h"

namespace ft::exl3 {

namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t name_key(const std::string& name, uint64_t seed) {
  uint64_t h = seed * 0x100000001B3ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
  return splitmix(h);
}

// Counter-based random bytes: byte i of the tensor depends only on (key, i), so any chunking
// of the stream gives the same file.
StreamWriter::Fill random_bytes(uint64_t key) {
  return [key](uint8_t* dst, uint64_t off, uint64_t n) {
    uint64_t i = 0;
    for (; i < n && (off + i) % 8; ++i) dst[i] = static_cast<uint8_t>(splitmix(key + (off + i) / 8) >> (8 * ((off + i) % 8)));
    for (; i + 8 <= n; i += 8) {
      const uint64_t v = splitmix(key + (off + i) / 8);
      std::memcpy(dst + i, &v, 8);  // little-endian: byte j of word w is stream byte 8w + j
    }
    for (; i < n; ++i) dst[i] = static_cast<uint8_t>(splitmix(key + (off + i) / 8) >> (8 * ((off + i) % 8)));
  };
}

class Rng {
 public:
  explicit Rng(uint64_t key) : s_(key) {}
  double uniform() { return static_cast<double>(splitmix(s_++) >> 11) * 0x1p-53; }
  double normal() {
    const double u = std::max(uniform(), 1e-300), v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  }

 private:
  uint64_t s_;
};

struct Builder {
  const SynthOptions& o;
  StreamWriter w;

  std::vector<uint8_t> f16_bytes(const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = f32_to_f16(v[i]);
      std::memcpy(&b[2 * i], &h, 2);
    }
    return b;
  }

  // BF16 parameter: `value` everywhere, or N(0, scale²) when scale > 0.
  void bf16(const std::string& name, std::vector<int64_t> shape, double scale, float value = 0.0f) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    Rng rng(name_key(name, o.seed));
    std::vector<uint8_t> b(static_cast<size_t>(2 * n));
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = f32_to_bf16(scale > 0 ? static_cast<float>(scale * rng.normal()) : value);
      std::memcpy(&b[2 * i], &h, 2);
    }
    w.add_bytes(name, DType::BF16, std::move(shape), std::move(b));
  }

  // EXL3 linear [out, in] at K bits: random trellis, random-sign scales sized so a unit-RMS input
  // gives roughly unit-RMS outputs; padded output channels get svh = 0 as the converter writes.
  void exl3(const std::string& name, int64_t out, int64_t in, int K) {
    const int64_t ip = pad128(in), op = pad128(out);
    w.add(name + ".trellis", DType::I16, {ip / 16, op / 16, 16 * K}, random_bytes(name_key(name + ".trellis", o.seed)));
    Rng rng(name_key(name + ".scales", o.seed));
    std::vector<float> suh(ip), svh(op, 0.0f);
    for (auto& v : suh) v = static_cast<float>((rng.uniform() < 0.5 ? -1 : 1) * (0.5 + rng.uniform()));
    const double s = 1.0 / (1.2437 * std::sqrt(static_cast<double>(in)));
    for (int64_t i = 0; i < out; ++i) svh[i] = static_cast<float>((rng.uniform() < 0.5 ? -s : s) * (0.5 + rng.uniform()));
    w.add_bytes(name + ".suh", DType::F16, {ip}, f16_bytes(suh));
    w.add_bytes(name + ".svh", DType::F16, {op}, f16_bytes(svh));
    if (o.codebook != Codebook::Inst3) {
      const uint32_t m = o.codebook == Codebook::Mcg ? kMcgMult : kMul1Mult;
      std::vector<uint8_t> b(4);
      std::memcpy(b.data(), &m, 4);
      w.add_bytes(name + (o.codebook == Codebook::Mcg ? ".mcg" : ".mul1"), DType::I32, {}, std::move(b));
    }
  }

  void mlp(const std::string& p, int64_t D, int64_t I, int K) {
    exl3(p + "gate_proj", I, D, K);
    exl3(p + "up_proj", I, D, K);
    exl3(p + "down_proj", D, I, K);
  }

  void layer(int l) {
    const int64_t D = o.hidden, HC = o.hc_mult, nmix = (2 + HC) * HC;
    const std::string p = "model.language_model.layers." + std::to_string(l) + ".";
    for (const char* site : {"attn", "ffn"}) {
      bf16(p + "hc_" + site + "_fn", {nmix, HC * D}, 0.02);
      bf16(p + "hc_" + site + "_base", {nmix}, 0.02);
      bf16(p + "hc_" + site + "_scale", {3}, 0.0, 1.0f);
    }
    bf16(p + "input_layernorm.weight", {D}, 0.0, 1.0f);
    bf16(p + "post_attention_layernorm.weight", {D}, 0.0, 1.0f);
    const std::string a = p + "self_attn.";
    if (l % 4 == 3) {  // sparse attention: MLA + indexer
      const int64_t dqk = o.qk_nope, ID = o.index_head_dim;
      exl3(a + "q_a_proj", o.q_lora, D, o.other_k);
      bf16(a + "q_a_layernorm.weight", {o.q_lora}, 0.0, 1.0f);
      exl3(a + "q_b_proj", o.heads * dqk, o.q_lora, o.other_k);
      exl3(a + "kv_a_proj_with_mqa", o.kv_lora, D, o.other_k);
      bf16(a + "kv_a_layernorm.weight", {o.kv_lora}, 0.0, 1.0f);
      exl3(a + "kv_b_proj", o.heads * (o.qk_nope + o.v_head_dim), o.kv_lora, o.other_k);
      exl3(a + "o_proj", D, o.heads * o.v_head_dim, o.other_k);
      const std::string i = a + "indexer.";
      bf16(i + "wq_b.weight", {o.index_heads * ID, o.q_lora}, 0.02);
      bf16(i + "wk.weight", {ID, D}, 0.02);
      bf16(i + "k_norm.weight", {ID}, 0.0, 1.0f);
      bf16(i + "k_norm.bias", {ID}, 0.0, 0.0f);
      bf16(i + "weights_proj.weight", {o.index_heads, D}, 0.02);
      bf16(i + "index_kpool_compress_gate", {ID, D}, 0.02);
      bf16(i + "index_kpool_compress_ape", {o.index_kpool, ID}, 0.02);
    } else {  // KDA
      const int64_t Q = o.linear_heads * o.linear_head_dim, dl = o.linear_head_dim;
      for (const char* s : {"q", "k", "v"}) {
        exl3(a + s + "_proj", Q, D, o.other_k);
        bf16(a + s + "_conv1d.weight", {Q, 1, 4}, 0.3);
      }
      bf16(a + "f_a_proj.weight", {dl, D}, 0.02);
      bf16(a + "f_b_proj.weight", {Q, dl}, 0.02);
      bf16(a + "dt_bias", {Q}, 0.0, 0.0f);
      bf16(a + "A_log", {o.linear_heads}, 0.1);
      bf16(a + "b_proj.weight", {o.linear_heads, D}, 0.02);
      bf16(a + "g_a_proj.weight", {dl, D}, 0.02);
      bf16(a + "g_b_proj.weight", {Q, dl}, 0.02);
      bf16(a + "o_norm.weight", {dl}, 0.0, 1.0f);
      exl3(a + "o_proj", D, Q, o.other_k);
    }
    if (l < o.dense_layers) {
      mlp(p + "mlp.", D, o.inter, o.other_k);
      return;
    }
    {
      Rng rng(name_key(p + "mlp.gate.weight", o.seed));
      std::vector<float> r(static_cast<size_t>(o.experts * D));
      for (auto& v : r) v = static_cast<float>(0.02 * rng.normal());
      w.add_bytes(p + "mlp.gate.weight", DType::F16, {o.experts, D}, f16_bytes(r));
    }
    bf16(p + "mlp.gate.e_score_correction_bias", {o.experts}, 0.0, 0.0f);
    for (int64_t e = 0; e < o.experts; ++e)
      mlp(p + "mlp.experts." + std::to_string(e) + ".", D, o.moe_inter, o.expert_k);
    mlp(p + "mlp.shared_experts.", D, o.moe_inter * o.shared_experts, o.other_k);
  }
};

nlohmann::json config_json(const SynthOptions& o) {
  nlohmann::json layer_types = nlohmann::json::array(), mlp_types = nlohmann::json::array();
  for (int l = 0; l < o.layers; ++l) {
    layer_types.push_back(l % 4 == 3 ? "deepseek_sparse_attention" : "linear_attention");
    mlp_types.push_back(l < o.dense_layers ? "dense" : "sparse");
  }
  nlohmann::json text = {
      {"model_type", "glm5_next_text"}, {"vocab_size", o.vocab}, {"hidden_size", o.hidden},
      {"intermediate_size", o.inter}, {"moe_intermediate_size", o.moe_inter}, {"num_hidden_layers", o.layers},
      {"num_attention_heads", o.heads}, {"num_key_value_heads", o.heads}, {"n_shared_experts", o.shared_experts},
      {"n_routed_experts", o.experts}, {"num_experts_per_tok", o.experts_per_tok}, {"routed_scaling_factor", 2.5},
      {"kv_lora_rank", o.kv_lora}, {"q_lora_rank", o.q_lora}, {"qk_rope_head_dim", 0}, {"qk_nope_head_dim", o.qk_nope},
      {"v_head_dim", o.v_head_dim}, {"n_group", 1}, {"topk_group", 1}, {"norm_topk_prob", true},
      {"hidden_act", "silu"}, {"rms_norm_eps", 1e-5}, {"tie_word_embeddings", false}, {"attention_bias", false},
      {"index_topk", o.index_topk}, {"index_head_dim", o.index_head_dim}, {"index_n_heads", o.index_heads},
      {"index_kpool", o.index_kpool}, {"swiglu_limit", 10.0}, {"linear_head_dim", o.linear_head_dim},
      {"linear_num_heads", o.linear_heads}, {"linear_conv_kernel_dim", 4}, {"linear_lower_bound", -5.0},
      {"hc_mult", o.hc_mult}, {"hc_eps", 1e-6}, {"hc_sinkhorn_iters", 20}, {"layer_types", layer_types},
      {"mlp_layer_types", mlp_types}};
  nlohmann::json q = {{"quant_method", "exl3"},
                      {"version", "1.4.1"},
                      {"bits", static_cast<double>(o.expert_k)},
                      {"head_bits", o.head_bits},
                      {"calibration", {{"rows", 250}, {"cols", 2048}}},
                      {"out_scales", "always"},
                      {"codebook", codebook_name(o.codebook)}};
  return {{"architectures", {"Glm5NextForConditionalGeneration"}},
          {"model_type", "glm5_next"},
          {"tie_word_embeddings", false},
          {"text_config", text},
          {"quantization_config", q},
          {"synthetic", "random EXL3 trellis bits written by tools/exl3/exl3-synth; not a trained model"}};
}

}  // namespace

uint64_t write_synthetic_model(const SynthOptions& o) {
  if (o.expert_k < 1 || o.expert_k > 8 || o.other_k < 1 || o.other_k > 8)
    throw Error("exl3-synth: K must be in 1..8");
  if (!((o.head_bits >= 1 && o.head_bits <= 8) || o.head_bits == 16))
    throw Error("exl3-synth: head bits must be in 1..8 or 16");
  {
    std::ofstream f(o.out_dir + "/config.json");
    if (!f) throw Error(o.out_dir + "/config.json: cannot create (does the folder exist?)");
    f << config_json(o).dump(2) << "\n";
  }
  Builder b{o, {}};
  b.bf16("model.language_model.embed_tokens.weight", {o.vocab, o.hidden}, 0.02);
  for (int l = 0; l < o.layers; ++l) b.layer(l);
  b.bf16("model.language_model.norm.weight", {o.hidden}, 0.0, 1.0f);
  if (o.head_bits == 16) {
    Rng rng(name_key("lm_head.weight", o.seed));
    std::vector<float> v(static_cast<size_t>(o.vocab * o.hidden));
    for (auto& x : v) x = static_cast<float>(0.02 * rng.normal());
    b.w.add_bytes("lm_head.weight", DType::F16, {o.vocab, o.hidden}, b.f16_bytes(v));
  } else {
    b.exl3("lm_head", o.vocab, o.hidden, o.head_bits);
  }
  return b.w.write(o.out_dir, o.shard_bytes);
}

}  // namespace ft::exl3
