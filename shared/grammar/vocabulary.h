#pragma once
// A tokenizer's vocabulary as the matcher needs it: the bytes of every ordinary token in a trie
// laid out in preorder (a mask is one linear walk that skips dead subtrees), and the added tokens
// (<tool_call>, <|user|>, …) by content: those are matched only where a grammar names them,
// never as their text. Built once per tokenizer, shared by every constraint.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ft::text {
class Tokenizer;
}

namespace ft::grammar {

class Vocabulary {
 public:
  // bytes[id]: the token's bytes (empty: no token at that id). added: ids matched by content only.
  // size: the model's vocabulary (≥ bytes.size(); real checkpoints pad it).
  Vocabulary(const std::vector<std::string>& bytes, const std::vector<std::pair<int32_t, std::string>>& added, size_t size);
  // Every id below max(model_vocab, tokenizer size); the tokenizer's added tokens are the added ones.
  static std::shared_ptr<const Vocabulary> from_tokenizer(const text::Tokenizer& t, size_t model_vocab);

  size_t size() const { return size_; }
  size_t words() const { return (size_ + 31) / 32; }  // uint32 words of a mask

  // The trie, preorder. Node 0 is the root (depth 0, no byte).
  struct Node {
    uint8_t byte = 0;
    // Plain subtrees: when this node and everything below it are plain bytes (is_plain), the
    // longest path from the parent through it, in bytes (≤ 255); else 0. A state that survives
    // any run of that many plain bytes allows the whole subtree without walking it.
    uint8_t plain_height = 0;
    uint16_t depth = 0;
    uint32_t subtree_end = 0;  // one past the last node of this node's subtree
    uint32_t first_token = 0;  // tokens ending here: token_ids()[first_token, first_token + n_tokens)
    uint32_t n_tokens = 0;
  };
  const std::vector<Node>& trie() const { return trie_; }
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  // Tokens of node i's subtree: token_ids()[trie()[i].first_token, subtree_tokens_end(i)).
  uint32_t subtree_tokens_end(uint32_t i) const {
    const uint32_t e = trie_[i].subtree_end;
    return e < trie_.size() ? trie_[e].first_token : uint32_t(token_ids_.size());
  }
  // The bytes most tokens are made of: ASCII letters, digits and space.
  static bool is_plain(uint8_t b) { return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') || b == ' '; }
  size_t max_depth() const { return max_depth_; }

  const std::string& bytes(int32_t id) const;  // empty for added tokens and unused ids
  bool is_added(int32_t id) const { return added_by_id_.count(id) != 0; }
  // The ids of the added token with this content (empty when the tokenizer has none).
  std::vector<int32_t> added_ids(std::string_view content) const;

 private:
  size_t size_;
  std::vector<std::string> bytes_;
  std::unordered_map<int32_t, std::string> added_by_id_;
  std::unordered_map<std::string, std::vector<int32_t>> added_by_content_;
  std::vector<Node> trie_;
  std::vector<int32_t> token_ids_;
  size_t max_depth_ = 0;
};

}  // namespace ft::grammar
