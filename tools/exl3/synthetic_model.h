#pragma once
// A synthetic glm5_next checkpoint in EXL3 form with the real GLM-5.3-Flash widths (or smaller
// ones), random trellis bits (every bit pattern is a valid EXL3 tensor), for benchmarks and
// loader tests. Quantized like the published model: attention, MLP, expert and lm_head linears in
// EXL3; norms, mHC, KDA low-rank gates and the indexer in BF16; routers in F16.
#include <cstdint>
#include <string>

#include "shared/exl3/codebook.h"

namespace ft::exl3 {

struct SynthOptions {
  std::string out_dir;
  int layers = 1;
  int dense_layers = 0;  // the first `dense_layers` layers get a dense MLP, the rest MoE
  int expert_k = 3;      // K of the routed experts
  int other_k = 4;       // K of every other quantized linear
  int head_bits = 6;     // K of lm_head, or 16 for an FP16 lm_head
  Codebook codebook = Codebook::Mul1;
  uint64_t seed = 1;
  uint64_t shard_bytes = 4ull << 30;

  // GLM-5.3-Flash widths (glm5-next-architecture §1.2, §8).
  int64_t vocab = 154880, hidden = 4096, inter = 12288, moe_inter = 2048, experts = 288, experts_per_tok = 8,
          shared_experts = 1;
  int64_t linear_heads = 64, linear_head_dim = 128, heads = 64, q_lora = 1536, kv_lora = 512, qk_nope = 256,
          v_head_dim = 256;
  int64_t index_heads = 32, index_head_dim = 128, index_kpool = 16, index_topk = 2048, hc_mult = 4;
};

// Writes config.json and the safetensors into opts.out_dir (which must exist). Returns the
// number of tensor bytes written.
uint64_t write_synthetic_model(const SynthOptions& opts);

}  // namespace ft::exl3
