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
  // The model's vocabulary size. At least kGlmFirstSpecialId + the specials (e.g. GLM-5.3-Flash's
  // 154880): GLM's layout, the `merges` BPE tokens from id 0, the specials at their real ids and
  // ids without a token in between and after. Smaller: exactly this many ids, BPE tokens filling
  // up to the specials (e.g. to give a tokenizer to a model that has none). 0: whatever `merges`
  // yields, specials right after.
  int64_t vocab = 0;
  bool tokenizer_only = false;
};

// GLM-5.3-Flash's id of <|endoftext|>, the first of its added tokens (glm-chat-format.md).
constexpr int64_t kGlmFirstSpecialId = 154820;

struct DemoVocab {
  int64_t model_vocab = 0;     // the model's vocab_size (embedding rows)
  std::vector<int64_t> eos_ids;  // <|endoftext|>, <|user|>, <|observation|>
};

// Trains byte-level BPE merges on a built-in corpus; writes tokenizer.json and
// tokenizer_config.json (with the chat template).
DemoVocab write_demo_tokenizer(const DemoOptions& o);

// Writes config.json, generation_config.json and model.safetensors for `vocab` tokens.
void write_demo_weights(const DemoOptions& o, int64_t vocab, const std::vector<int64_t>& eos_ids);

const char* glm53_chat_template();

// GLM's added tokens, in the order they get ids (after the BPE vocabulary, or from
// kGlmFirstSpecialId).
const std::vector<std::string>& glm_special_tokens();

}  // namespace ft::demo
