// config.json parsing for glm5_next: both layouts, the defaulting/alias rules of the spec §1.3,
// validation, and refusal of other architectures.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "shared/core/error.h"
#include "shared/model/config.h"
#include "tests/support/test_paths.h"

using namespace ft;
using ::testing::HasSubstr;

namespace {

const char* kArch = R"("architectures": ["Glm5NextForConditionalGeneration"], "model_type": "glm5_next")";

ModelConfig nested(const std::string& text_fields) {
  return parse_config(std::string("{") + kArch + R"(, "text_config": {)" + text_fields + "}}", "cfg.json");
}

std::string error_of(const std::string& json) {
  try {
    parse_config(json, "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST(Config, TinyAFixture) {
  const ModelConfig c = load_config(test::fixture("glm5-tiny-a/model"));
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_hidden_layers, 8);
  EXPECT_EQ(c.nmix(), 24);
  EXPECT_EQ(c.qk_head_dim, 16);
  EXPECT_EQ(c.index_pool_budget(), 4);
  ASSERT_EQ(c.layer_types.size(), 8u);
  EXPECT_TRUE(c.is_sparse(3));
  EXPECT_TRUE(c.is_sparse(7));
  EXPECT_FALSE(c.is_sparse(4));
  EXPECT_FALSE(c.is_moe(2));
  EXPECT_TRUE(c.is_moe(3));
  EXPECT_TRUE(c.has_indexer(3));
  ASSERT_TRUE(c.linear_lower_bound.has_value());
  EXPECT_EQ(*c.linear_lower_bound, -5.0);
}

TEST(Config, DefaultsOfTheRealModel) {
  const ModelConfig c = nested("");
  EXPECT_EQ(c.num_hidden_layers, 45);
  EXPECT_EQ(c.vocab_size, 154880);
  int sparse = 0, moe = 0;
  for (int64_t i = 0; i < 45; ++i) {
    sparse += c.is_sparse(i);
    moe += c.is_moe(i);
    EXPECT_EQ(c.is_sparse(i), i % 4 == 3) << i;
    EXPECT_EQ(c.indexer_types[i], IndexerKind::Full);
  }
  EXPECT_EQ(sparse, 11);
  EXPECT_EQ(moe, 42);
  EXPECT_EQ(c.index_kpool, 16);
  EXPECT_EQ(c.num_key_value_heads, 64);
  EXPECT_EQ(c.qk_head_dim, 256);
}

TEST(Config, FlatFormAndTextConfigItself) {
  const ModelConfig flat = parse_config(
      R"({"architectures": ["Glm5NextForCausalLM"], "hidden_size": 32, "num_hidden_layers": 4, "vocab_size": 100})",
      "flat.json");
  EXPECT_EQ(flat.hidden_size, 32);
  EXPECT_EQ(flat.num_hidden_layers, 4);
  EXPECT_EQ(flat.mlp_layer_types.size(), 4u);
  EXPECT_TRUE(flat.is_sparse(3));
  const ModelConfig text = parse_config(R"({"model_type": "glm5_next_text", "hidden_size": 48})", "t.json");
  EXPECT_EQ(text.hidden_size, 48);
}

TEST(Config, RefusesOtherArchitecturesNamingWhatIsSupported) {
  const std::string e = error_of(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})");
  EXPECT_THAT(e, HasSubstr("cfg.json: model_type 'llama'"));
  EXPECT_THAT(e, HasSubstr("LlamaForCausalLM"));
  EXPECT_THAT(e, HasSubstr("glm5_next"));
  EXPECT_THAT(error_of(R"({"model_type": "glm4_moe"})"), HasSubstr("not supported"));
  EXPECT_THAT(error_of("[1, 2]"), HasSubstr("not a JSON object"));
  EXPECT_THAT(error_of("{oops"), HasSubstr("bad JSON"));
}

TEST(Config, NullsAndAliases) {
  const ModelConfig c = nested(
      R"("num_attention_heads": 8, "num_key_value_heads": null, "num_local_experts": 32, "num_hidden_layers": 4,
         "layer_types": ["linear_attention", "full_attention", "linear_attention", "deepseek_sparse_attention"],
         "head_dim": 77, "qk_head_dim": 999, "qk_nope_head_dim": 24)");
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.n_routed_experts, 32);
  EXPECT_TRUE(c.is_sparse(1));  // full_attention is renamed
  EXPECT_EQ(c.qk_head_dim, 24);  // recomputed, the stored value is ignored
}

TEST(Config, LowerBoundAbsentNullAndLinearAttnConfig) {
  EXPECT_EQ(*nested("").linear_lower_bound, -5.0);
  EXPECT_FALSE(nested(R"("linear_lower_bound": null)").linear_lower_bound.has_value());
  EXPECT_EQ(*nested(R"("linear_lower_bound": -3.5)").linear_lower_bound, -3.5);
  // The alias object overrides, and its safe_gate (default true) restores −5 over a null bound.
  const ModelConfig a = nested(
      R"("linear_lower_bound": null, "linear_attn_config": {"head_dim": 32, "num_heads": 3, "short_conv_kernel_size": 2})");
  EXPECT_EQ(a.linear_head_dim, 32);
  EXPECT_EQ(a.linear_num_heads, 3);
  EXPECT_EQ(a.linear_conv_kernel_dim, 2);
  EXPECT_EQ(*a.linear_lower_bound, -5.0);
  const ModelConfig b = nested(R"("linear_attn_config": {"gate_lower_bound": null, "safe_gate": false})");
  EXPECT_FALSE(b.linear_lower_bound.has_value());
  const ModelConfig g = nested(R"("linear_attn_config": {"gate_lower_bound": -2.0})");
  EXPECT_EQ(*g.linear_lower_bound, -2.0);
}

TEST(Config, IndexerTypesFromPatternOrFrequency) {
  const ModelConfig p = nested(R"("num_hidden_layers": 4, "layer_types": ["deepseek_sparse_attention",
      "deepseek_sparse_attention", "deepseek_sparse_attention", "deepseek_sparse_attention"],
      "index_topk_pattern": "FSFS")");
  EXPECT_TRUE(p.has_indexer(0));
  EXPECT_FALSE(p.has_indexer(1));
  EXPECT_TRUE(p.has_indexer(2));
  // freq 2, offset 2: layer i is full iff max(i − 1, 0) is even → F F S F S F
  const ModelConfig f = nested(R"("num_hidden_layers": 6, "index_topk_freq": 2, "layer_types": [
      "deepseek_sparse_attention", "deepseek_sparse_attention", "deepseek_sparse_attention",
      "deepseek_sparse_attention", "deepseek_sparse_attention", "deepseek_sparse_attention"])");
  const std::vector<IndexerKind> want = {IndexerKind::Full, IndexerKind::Full, IndexerKind::Shared,
                                         IndexerKind::Full, IndexerKind::Shared, IndexerKind::Full};
  EXPECT_EQ(f.indexer_types, want);
}

TEST(Config, Validation) {
  auto cfg = [](const std::string& text) { return std::string("{") + kArch + R"(, "text_config": {)" + text + "}}"; };
  EXPECT_THAT(error_of(cfg(R"("num_attention_heads": 4, "num_key_value_heads": 2)")),
              HasSubstr("num_key_value_heads (2) must equal num_attention_heads (4)"));
  EXPECT_THAT(error_of(cfg(R"("index_topk": 10, "index_kpool": 4)")), HasSubstr("multiple of index_kpool"));
  EXPECT_THAT(error_of(cfg(R"("index_kpool": 0)")), HasSubstr("index_kpool must be >= 1"));
  EXPECT_THAT(error_of(cfg(R"("q_lora_rank": null)")), HasSubstr("q_lora_rank is null"));
  EXPECT_THAT(error_of(cfg(R"("qk_rope_head_dim": 64)")), HasSubstr("qk_rope_head_dim must be 0"));
  EXPECT_THAT(error_of(cfg(R"("hidden_act": "gelu")")), HasSubstr("hidden_act 'gelu'"));
  EXPECT_THAT(error_of(cfg(R"("n_routed_experts": 10, "n_group": 4)")), HasSubstr("divisible by n_group"));
  EXPECT_THAT(error_of(cfg(R"("num_hidden_layers": 3, "layer_types": ["linear_attention"])")),
              HasSubstr("layer_types has 1 entries for 3 layers"));
  EXPECT_THAT(error_of(cfg(R"("num_hidden_layers": 2, "mlp_layer_types": ["dense", "moe"])")),
              HasSubstr("'moe' is neither"));
  EXPECT_THAT(error_of(cfg(R"("hidden_size": "big")")), HasSubstr("field hidden_size must be an integer"));
  // Whole floats beyond int64 (fuzz_config found 4e34: its cast was undefined behaviour).
  EXPECT_THAT(error_of(cfg(R"("hidden_size": 4e34)")), HasSubstr("field hidden_size must be an integer"));
  EXPECT_THAT(error_of(cfg(R"("hidden_size": 9.3e18)")), HasSubstr("field hidden_size must be an integer"));
  // A shared-indexer layer must directly follow a sparse layer with its own indexer.
  EXPECT_THAT(error_of(cfg(R"("num_hidden_layers": 2, "layer_types": ["linear_attention", "deepseek_sparse_attention"],
                             "indexer_types": ["full", "shared"])")),
              HasSubstr("layer 1 is a shared-indexer sparse layer"));
}
