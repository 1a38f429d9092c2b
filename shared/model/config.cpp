#include "shared/model/config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "shared/core/error.h"

namespace ft {

using json = nlohmann::json;

namespace {

constexpr const char* kSupported =
    "flashtier serves model_type glm5_next (architectures Glm5NextForConditionalGeneration or "
    "Glm5NextForCausalLM; text config model_type glm5_next_text)";

class Reader {
 public:
  Reader(const json& j, const std::string& src) : j_(j), src_(src) {}

  bool has_value(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  int64_t i(const char* key, int64_t def) const {
    if (!has_value(key)) return def;
    const json& v = j_[key];
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
      // A whole float within int64's range (2^63 is exact in a double; casting beyond it is UB).
      const double x = v.get<double>();
      if (x >= -9223372036854775808.0 && x < 9223372036854775808.0 && x == std::trunc(x))
        return static_cast<int64_t>(x);
    }
    throw Error(src_ + ": field " + key + " must be an integer, got " + v.dump());
  }
  double d(const char* key, double def) const {
    if (!has_value(key)) return def;
    const json& v = j_[key];
    if (!v.is_number()) throw Error(src_ + ": field " + key + " must be a number, got " + v.dump());
    return v.get<double>();
  }
  bool b(const char* key, bool def) const {
    if (!has_value(key)) return def;
    const json& v = j_[key];
    if (!v.is_boolean()) throw Error(src_ + ": field " + key + " must be true or false, got " + v.dump());
    return v.get<bool>();
  }
  std::string s(const char* key, const std::string& def) const {
    if (!has_value(key)) return def;
    const json& v = j_[key];
    if (!v.is_string()) throw Error(src_ + ": field " + key + " must be a string, got " + v.dump());
    return v.get<std::string>();
  }
  std::vector<std::string> strings(const char* key) const {
    std::vector<std::string> out;
    if (!has_value(key)) return out;
    const json& v = j_[key];
    if (!v.is_array()) throw Error(src_ + ": field " + key + " must be a list of strings");
    for (const auto& e : v) {
      if (!e.is_string()) throw Error(src_ + ": field " + key + " must be a list of strings, found " + e.dump());
      out.push_back(e.get<std::string>());
    }
    return out;
  }

 private:
  const json& j_;
  const std::string& src_;
};

void check_architecture(const json& top, const std::string& src) {
  const std::string mt = top.contains("model_type") && top["model_type"].is_string()
                             ? top["model_type"].get<std::string>()
                             : std::string();
  bool arch_ok = false;
  std::string archs;
  if (top.contains("architectures") && top["architectures"].is_array()) {
    for (const auto& a : top["architectures"]) {
      if (!a.is_string()) continue;
      const std::string s = a.get<std::string>();
      archs += (archs.empty() ? "" : ", ") + s;
      if (s.rfind("Glm5Next", 0) == 0) arch_ok = true;
    }
  }
  const bool type_ok = mt == "glm5_next" || mt == "glm5_next_text";
  if (type_ok || (mt.empty() && arch_ok)) return;
  throw Error(src + ": model_type '" + mt + "'" + (archs.empty() ? "" : " (architectures " + archs + ")") +
              " is not supported; " + kSupported);
}

}  // namespace

ModelConfig parse_config(const std::string& text, const std::string& src) {
  json top;
  try {
    top = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(src + ": bad JSON: " + e.what());
  }
  if (!top.is_object()) throw Error(src + ": not a JSON object");
  check_architecture(top, src);
  const json& t = (top.contains("text_config") && top["text_config"].is_object()) ? top["text_config"] : top;
  Reader r(t, src);
  Reader rtop(top, src);

  ModelConfig c;
  c.source = src;
  c.vocab_size = r.i("vocab_size", c.vocab_size);
  c.hidden_size = r.i("hidden_size", c.hidden_size);
  c.intermediate_size = r.i("intermediate_size", c.intermediate_size);
  c.moe_intermediate_size = r.i("moe_intermediate_size", c.moe_intermediate_size);
  c.num_hidden_layers = r.i("num_hidden_layers", c.num_hidden_layers);
  c.num_attention_heads = r.i("num_attention_heads", c.num_attention_heads);
  c.num_key_value_heads = r.i("num_key_value_heads", c.num_attention_heads);  // rule 1
  c.n_shared_experts = r.i("n_shared_experts", c.n_shared_experts);
  c.n_routed_experts = r.i("n_routed_experts", r.i("num_local_experts", c.n_routed_experts));
  c.routed_scaling_factor = r.d("routed_scaling_factor", c.routed_scaling_factor);
  c.kv_lora_rank = r.i("kv_lora_rank", c.kv_lora_rank);
  if (t.contains("q_lora_rank") && t["q_lora_rank"].is_null())
    throw Error(src + ": q_lora_rank is null; glm5_next needs a query low-rank projection");
  c.q_lora_rank = r.i("q_lora_rank", c.q_lora_rank);
  c.qk_rope_head_dim = r.i("qk_rope_head_dim", c.qk_rope_head_dim);
  c.v_head_dim = r.i("v_head_dim", c.v_head_dim);
  c.qk_nope_head_dim = r.i("qk_nope_head_dim", c.qk_nope_head_dim);
  c.n_group = r.i("n_group", c.n_group);
  c.topk_group = r.i("topk_group", c.topk_group);
  c.num_experts_per_tok = r.i("num_experts_per_tok", c.num_experts_per_tok);
  c.norm_topk_prob = r.b("norm_topk_prob", c.norm_topk_prob);
  c.hidden_act = r.s("hidden_act", c.hidden_act);
  c.max_position_embeddings = r.i("max_position_embeddings", c.max_position_embeddings);
  c.rms_norm_eps = r.d("rms_norm_eps", c.rms_norm_eps);
  if (r.has_value("pad_token_id")) c.pad_token_id = r.i("pad_token_id", 0);
  c.tie_word_embeddings = r.b("tie_word_embeddings", rtop.b("tie_word_embeddings", false));
  c.attention_bias = r.b("attention_bias", c.attention_bias);
  c.index_topk = r.i("index_topk", c.index_topk);
  c.index_head_dim = r.i("index_head_dim", c.index_head_dim);
  c.index_n_heads = r.i("index_n_heads", c.index_n_heads);
  c.index_kpool = r.i("index_kpool", c.index_kpool);
  c.index_kpool_always_select_tail = r.b("index_kpool_always_select_tail", c.index_kpool_always_select_tail);
  c.swiglu_limit = r.d("swiglu_limit", c.swiglu_limit);
  c.linear_head_dim = r.i("linear_head_dim", c.linear_head_dim);
  c.linear_num_heads = r.i("linear_num_heads", c.linear_num_heads);
  c.linear_conv_kernel_dim = r.i("linear_conv_kernel_dim", c.linear_conv_kernel_dim);
  // Absent → −5; explicit null → softplus decay.
  if (t.contains("linear_lower_bound"))
    c.linear_lower_bound = t["linear_lower_bound"].is_null() ? std::nullopt
                                                             : std::optional<double>(r.d("linear_lower_bound", -5.0));
  c.hc_mult = r.i("hc_mult", c.hc_mult);
  c.hc_eps = r.d("hc_eps", c.hc_eps);
  c.hc_sinkhorn_iters = r.i("hc_sinkhorn_iters", c.hc_sinkhorn_iters);
  const int64_t L = c.num_hidden_layers;
  if (L < 1) throw Error(src + ": num_hidden_layers must be >= 1");

  // Rule 2: mlp_layer_types.
  const auto mlp = r.strings("mlp_layer_types");
  if (mlp.empty()) {
    for (int64_t i = 0; i < L; ++i) c.mlp_layer_types.push_back(i < 3 ? MlpKind::Dense : MlpKind::Moe);
  } else {
    for (const auto& s : mlp) {
      if (s == "dense") c.mlp_layer_types.push_back(MlpKind::Dense);
      else if (s == "sparse") c.mlp_layer_types.push_back(MlpKind::Moe);
      else throw Error(src + ": mlp_layer_types entry '" + s + "' is neither 'dense' nor 'sparse'");
    }
  }
  // Rule 3: layer_types.
  const auto lt = r.strings("layer_types");
  if (lt.empty()) {
    for (int64_t i = 0; i < L; ++i) c.layer_types.push_back(i % 4 == 3 ? AttnKind::Sparse : AttnKind::Linear);
  } else {
    for (const auto& s : lt) {
      if (s == "linear_attention") c.layer_types.push_back(AttnKind::Linear);
      else if (s == "deepseek_sparse_attention" || s == "full_attention") c.layer_types.push_back(AttnKind::Sparse);
      else
        throw Error(src + ": layer_types entry '" + s +
                    "' is not one of linear_attention, deepseek_sparse_attention, full_attention");
    }
  }
  // Rule 4: indexer_types.
  auto parse_indexer = [&](const std::string& s) {
    if (s == "full" || s == "F") return IndexerKind::Full;
    if (s == "shared" || s == "S") return IndexerKind::Shared;
    throw Error(src + ": indexer type '" + s + "' is neither 'full' nor 'shared'");
  };
  const auto it = r.strings("indexer_types");
  if (!it.empty()) {
    for (const auto& s : it) c.indexer_types.push_back(parse_indexer(s));
  } else if (r.has_value("index_topk_pattern")) {
    const json& p = t["index_topk_pattern"];
    if (p.is_string()) {
      for (char ch : p.get<std::string>()) c.indexer_types.push_back(parse_indexer(std::string(1, ch)));
    } else {
      for (const auto& s : r.strings("index_topk_pattern")) c.indexer_types.push_back(parse_indexer(s));
    }
  } else {
    const int64_t freq = std::max<int64_t>(r.i("index_topk_freq", 1), 1);
    const int64_t off = r.i("index_skip_topk_offset", 2);
    for (int64_t i = 0; i < L; ++i) {
      const int64_t v = std::max<int64_t>(i - off + 1, 0);
      c.indexer_types.push_back(v % freq == 0 ? IndexerKind::Full : IndexerKind::Shared);
    }
  }
  // Rule 5: linear_attn_config alias object.
  if (t.contains("linear_attn_config") && t["linear_attn_config"].is_object()) {
    const json& la = t["linear_attn_config"];
    Reader rl(la, src);
    c.linear_head_dim = rl.i("head_dim", c.linear_head_dim);
    c.linear_num_heads = rl.i("num_heads", c.linear_num_heads);
    c.linear_conv_kernel_dim = rl.i("short_conv_kernel_size", c.linear_conv_kernel_dim);
    if (la.contains("gate_lower_bound"))
      c.linear_lower_bound = la["gate_lower_bound"].is_null()
                                 ? std::nullopt
                                 : std::optional<double>(rl.d("gate_lower_bound", -5.0));
    if (rl.b("safe_gate", true) && !c.linear_lower_bound) c.linear_lower_bound = -5.0;
  }
  // Rule 6.
  c.qk_head_dim = c.qk_rope_head_dim + c.qk_nope_head_dim;

  if (top.contains("quantization_config") && top["quantization_config"].is_object())
    c.quantization_config_json = top["quantization_config"].dump();
  else if (t.contains("quantization_config") && t["quantization_config"].is_object())
    c.quantization_config_json = t["quantization_config"].dump();

  // §1.4 validation, then the engine-side checks.
  auto fail = [&](const std::string& m) { throw Error(src + ": " + m); };
  if (c.num_key_value_heads != c.num_attention_heads)
    fail("num_key_value_heads (" + std::to_string(c.num_key_value_heads) + ") must equal num_attention_heads (" +
         std::to_string(c.num_attention_heads) + ")");
  if (c.index_kpool < 1) fail("index_kpool must be >= 1");
  if (c.index_topk % c.index_kpool != 0) fail("index_topk must be a multiple of index_kpool");
  if (c.qk_rope_head_dim != 0) fail("qk_rope_head_dim must be 0 (glm5_next sparse attention has no RoPE)");
  if (c.hidden_act != "silu") fail("hidden_act '" + c.hidden_act + "' is not supported (only silu)");
  const int64_t positive[] = {c.vocab_size, c.hidden_size, c.num_attention_heads, c.kv_lora_rank, c.q_lora_rank,
                              c.qk_nope_head_dim, c.v_head_dim, c.index_head_dim, c.index_n_heads,
                              c.linear_head_dim, c.linear_num_heads, c.linear_conv_kernel_dim, c.hc_mult,
                              c.index_topk};
  for (int64_t v : positive)
    if (v < 1) fail("every size field must be >= 1 (found " + std::to_string(v) + ")");
  if (static_cast<int64_t>(c.layer_types.size()) != L)
    fail("layer_types has " + std::to_string(c.layer_types.size()) + " entries for " + std::to_string(L) + " layers");
  if (static_cast<int64_t>(c.mlp_layer_types.size()) != L)
    fail("mlp_layer_types has " + std::to_string(c.mlp_layer_types.size()) + " entries for " + std::to_string(L) +
         " layers");
  if (static_cast<int64_t>(c.indexer_types.size()) != L)
    fail("indexer_types has " + std::to_string(c.indexer_types.size()) + " entries for " + std::to_string(L) +
         " layers");
  bool any_moe = false;
  for (auto m : c.mlp_layer_types) any_moe |= m == MlpKind::Moe;
  if (any_moe) {
    if (c.n_routed_experts < 1 || c.moe_intermediate_size < 1) fail("MoE layers need n_routed_experts and moe_intermediate_size >= 1");
    if (c.n_group < 1 || c.n_routed_experts % c.n_group != 0)
      fail("n_routed_experts (" + std::to_string(c.n_routed_experts) + ") must be divisible by n_group (" +
           std::to_string(c.n_group) + ")");
    if (c.n_group > 1 && c.n_routed_experts / c.n_group < 2) fail("group-limited routing needs >= 2 experts per group");
    if (c.topk_group < 1 || c.topk_group > c.n_group) fail("topk_group must be in 1..n_group");
    if (c.num_experts_per_tok < 1 || c.num_experts_per_tok > c.topk_group * (c.n_routed_experts / c.n_group))
      fail("num_experts_per_tok must be in 1..(experts in the kept groups)");
  }
  for (int64_t i = 0; i < L; ++i) {
    if (c.layer_types[i] == AttnKind::Sparse && c.indexer_types[i] == IndexerKind::Shared) {
      if (i == 0 || c.layer_types[i - 1] != AttnKind::Sparse || c.indexer_types[i - 1] != IndexerKind::Full)
        fail("layer " + std::to_string(i) +
             " is a shared-indexer sparse layer but layer " + std::to_string(i - 1) +
             " is not a sparse layer with its own indexer (the selection is only handed to the next layer)");
    }
  }
  return c;
}

ModelConfig load_config(const std::string& dir_or_file) {
  namespace fs = std::filesystem;
  fs::path p(dir_or_file);
  if (fs::is_directory(p)) p /= "config.json";
  std::ifstream in(p);
  if (!in) throw Error(p.string() + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), p.string());
}

}  // namespace ft
