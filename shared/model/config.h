#pragma once
// glm5_next text configuration: parsing of config.json (nested text_config or flat), the
// defaulting and alias rules of the architecture spec §1, and validation. Anything that is not a
// glm5_next model is refused with a message that names what is supported.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ft {

enum class AttnKind { Linear, Sparse };  // "linear_attention" (KDA) / "deepseek_sparse_attention"
enum class MlpKind { Dense, Moe };       // "dense" / "sparse"
enum class IndexerKind { Full, Shared };

struct ModelConfig {
  std::string source;  // path of config.json, for messages

  int64_t vocab_size = 154880;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 12288;
  int64_t moe_intermediate_size = 2048;
  int64_t num_hidden_layers = 45;
  int64_t num_attention_heads = 64;
  int64_t num_key_value_heads = 64;
  int64_t n_shared_experts = 1;
  int64_t n_routed_experts = 288;
  double routed_scaling_factor = 2.5;
  int64_t kv_lora_rank = 512;
  int64_t q_lora_rank = 1536;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 256;
  int64_t qk_nope_head_dim = 256;
  int64_t qk_head_dim = 256;  // always recomputed: rope + nope
  int64_t n_group = 1;
  int64_t topk_group = 1;
  int64_t num_experts_per_tok = 8;
  bool norm_topk_prob = true;
  std::string hidden_act = "silu";
  int64_t max_position_embeddings = 1048576;
  double rms_norm_eps = 1e-5;
  std::optional<int64_t> pad_token_id;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  int64_t index_topk = 2048;
  int64_t index_head_dim = 128;
  int64_t index_n_heads = 32;
  int64_t index_kpool = 16;
  bool index_kpool_always_select_tail = true;
  double swiglu_limit = 10.0;
  int64_t linear_head_dim = 128;
  int64_t linear_num_heads = 64;
  int64_t linear_conv_kernel_dim = 4;
  std::optional<double> linear_lower_bound = -5.0;  // nullopt: softplus decay (spec §4.3)
  int64_t hc_mult = 4;
  double hc_eps = 1e-6;
  int64_t hc_sinkhorn_iters = 20;

  std::vector<AttnKind> layer_types;
  std::vector<MlpKind> mlp_layer_types;
  std::vector<IndexerKind> indexer_types;

  // quantization_config as JSON text ("" when absent); read by the EXL3 loader.
  std::string quantization_config_json;

  // Derived sizes.
  int64_t nmix() const { return (2 + hc_mult) * hc_mult; }
  int64_t linear_dim() const { return linear_num_heads * linear_head_dim; }  // Q
  int64_t index_pool_budget() const { return index_topk / index_kpool; }    // Bp
  bool is_sparse(int64_t layer) const { return layer_types[layer] == AttnKind::Sparse; }
  bool is_moe(int64_t layer) const { return mlp_layer_types[layer] == MlpKind::Moe; }
  int64_t moe_layer_count() const {
    int64_t n = 0;
    for (int64_t l = 0; l < num_hidden_layers; ++l) n += is_moe(l);
    return n;
  }
  // True when sparse layer `layer` runs its own indexer; false for a shared-indexer layer.
  bool has_indexer(int64_t layer) const {
    return is_sparse(layer) && indexer_types[layer] == IndexerKind::Full;
  }
};

// Parses config.json text. `source` names the file in error messages.
ModelConfig parse_config(const std::string& json_text, const std::string& source);
// Reads <dir>/config.json (or the file itself when given a file path).
ModelConfig load_config(const std::string& dir_or_file);

}  // namespace ft
