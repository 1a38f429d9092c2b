#pragma once
// All weights of a glm5_next text model in fp32, grouped by layer and op, as the reference
// engine consumes them. Loading resolves both on-disk spellings (spec §2.1, §2.4) and checks
// every shape against the config.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shared/engine/linear_source.h"
#include "shared/model/config.h"

namespace ft {

struct MhcWeights {
  std::vector<float> fn, base, scale;  // [NMIX, HC·D], [NMIX], [3]
};

struct KdaWeights {
  DenseLinear q, k, v;        // [Q, D]
  std::vector<float> conv;    // [3Q, K]: q channels, then k, then v
  DenseLinear f_a, f_b;       // [dl, D], [Q, dl]
  std::vector<float> dt_bias; // [Q]
  std::vector<float> a_log;   // [Hl]
  DenseLinear b;              // [Hl, D]
  DenseLinear g_a, g_b;       // [dl, D], [Q, dl]
  std::vector<float> o_norm;  // [dl]
  DenseLinear o;              // [D, Q]
};

struct IndexerWeights {
  DenseLinear wq_b;                   // [IH·ID, Rq]
  DenseLinear wk;                     // [ID, D]
  std::vector<float> k_norm_w, k_norm_b;  // [ID]
  DenseLinear weights_proj;           // [IH, D]
  DenseLinear gate;                   // [ID, D] index_kpool_compress_gate
  std::vector<float> ape;             // [κ, ID]
};

struct MlaWeights {
  DenseLinear q_a;                 // [Rq, D] (+ bias)
  std::vector<float> q_a_norm;     // [Rq]
  DenseLinear q_b;                 // [NH·dqk, Rq]
  DenseLinear kv_a;                // [Rkv, D] (+ bias)
  std::vector<float> kv_a_norm;    // [Rkv]
  DenseLinear kv_b;                // [NH·(dn+dv), Rkv]
  DenseLinear o;                   // [D, NH·dv] (+ bias)
  std::optional<IndexerWeights> indexer;  // absent on shared-indexer layers
};

struct MlpWeights {
  DenseLinear gate, up, down;
};

struct MoeWeights {
  DenseLinear router;                   // [E, D]
  std::vector<float> correction_bias;   // [E]
  std::vector<MlpWeights> experts;      // empty when routed experts live elsewhere
  MlpWeights shared;
};

struct LayerWeights {
  MhcWeights attn_hc, ffn_hc;
  std::vector<float> input_norm, post_norm;  // [D]
  std::optional<KdaWeights> kda;
  std::optional<MlaWeights> mla;
  std::optional<MlpWeights> dense;
  std::optional<MoeWeights> moe;
};

struct ModelWeights {
  ModelConfig cfg;
  // The checkpoint's mapped files (quantized linears point into them).
  std::shared_ptr<const TensorStore> store;
  std::vector<float> embed;  // [V, D]
  std::vector<float> final_norm;
  DenseLinear lm_head;       // [V, D]
  std::vector<LayerWeights> layers;
};

struct LoadOptions {
  // The gpu-worker leaves routed experts to the cpu-expert-worker and never reads them.
  bool routed_experts = true;
  // The CUDA engine keeps EXL3 linears quantized (DenseLinear::exl3) instead of densifying them.
  bool keep_quantized = false;
};

// Loads config.json and the safetensors of `dir`. Throws ft::Error naming file and tensor.
ModelWeights load_model(const std::string& dir, const LoadOptions& opts = {});

}  // namespace ft
