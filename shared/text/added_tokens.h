#pragma once
// Added tokens of a tokenizer.json (special or not): matched whole, leftmost-longest, before any
// pre-tokenization, with the lstrip / rstrip / single_word options of `tokenizers`.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ft::text {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// One segment of the input: an added token (id >= 0) or plain text to pre-tokenize (id < 0).
struct Segment {
  size_t start, end;
  int32_t id;
};

class AddedTokenMatcher {
 public:
  void build(const std::vector<AddedToken>& tokens);
  // Splits `text` into segments covering it in order.
  std::vector<Segment> split(std::string_view text) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // byte -> node index
    int32_t token = -1;                                        // index into tokens_
  };
  struct Trie {
    std::vector<Node> nodes;
    bool first_byte[256] = {};
    void insert(std::string_view s, int32_t token);
    // Longest token starting at text[i], or -1.
    int32_t longest_at(std::string_view text, size_t i, size_t& len) const;
  };
  void split_with(const Trie& trie, std::string_view text, size_t base, std::vector<Segment>& out) const;

  std::vector<AddedToken> tokens_;
  Trie plain_, normalized_;
};

}  // namespace ft::text
