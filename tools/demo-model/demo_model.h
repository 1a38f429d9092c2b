#pragma once
// A small glm5_next model with random weights, a byte-level BPE tokenizer carrying GLM's special
// tokens and GLM-5.3's chat template: the whole stack runs on it where real weights can't be had.
#include <cstdint>
#include <string>
#include <vector>

namespace ft::demo {

struct DemoOptions {
  std::string out_dir;
  int64_t hidden = 256;
  int64_t layers = 8;
  int64_t experts = 32;
  int64_t top_k = 4;
  int64_t merges = 1500;
  uint64_t seed = 1234;
  bool fp32 = false;  // bf16 weights unless asked
  // Exact vocabulary size (BPE tokens + GLM specials), e.g. to give a tokenizer to a model that
  // has none; 0: whatever `merges` yields.
  int64_t vocab = 0;
  bool tokenizer_only = false;
};

// Trains byte-level BPE merges on a built-in corpus; writes tokenizer.json and
// tokenizer_config.json (with the chat template). Returns the vocabulary size.
int64_t write_demo_tokenizer(const DemoOptions& o);

// Writes config.json, generation_config.json and model.safetensors for `vocab` tokens.
void write_demo_weights(const DemoOptions& o, int64_t vocab, const std::vector<int64_t>& eos_ids);

const char* glm53_chat_template();

// GLM special tokens, in the order they get ids after the BPE vocabulary.
const std::vector<std::string>& glm_special_tokens();

}  // namespace ft::demo
