#include "shared/grammar/vocabulary.h"

#include <algorithm>
#include <numeric>

#include "shared/text/tokenizer.h"

namespace ft::grammar {

Vocabulary::Vocabulary(const std::vector<std::string>& bytes, const std::vector<std::pair<int32_t, std::string>>& added,
                       size_t size)
    : size_(std::max(size, bytes.size())), bytes_(bytes) {
  bytes_.resize(size_);
  for (const auto& [id, content] : added) {
    if (id < 0 || size_t(id) >= size_) continue;
    added_by_id_[id] = content;
    added_by_content_[content].push_back(id);
    bytes_[size_t(id)].clear();
  }
  // Sorting the ids by their bytes makes the trie's preorder the sorted order: each token's node
  // follows its longest common prefix with the previous token.
  std::vector<int32_t> order;
  for (size_t i = 0; i < size_; ++i)
    if (!bytes_[i].empty()) order.push_back(int32_t(i));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return bytes_[size_t(a)] != bytes_[size_t(b)] ? bytes_[size_t(a)] < bytes_[size_t(b)] : a < b;
  });
  trie_.push_back(Node{});
  std::vector<uint32_t> path{0};  // path[d]: the node at depth d on the current branch
  std::vector<std::vector<int32_t>> ends;  // tokens per node, flattened below
  ends.emplace_back();
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = bytes_[size_t(id)];
    size_t common = 0;
    if (prev)
      while (common < prev->size() && common < s.size() && (*prev)[common] == s[common]) ++common;
    path.resize(common + 1);
    for (size_t d = common; d < s.size(); ++d) {
      Node n;
      n.byte = uint8_t(s[d]);
      n.depth = uint16_t(std::min<size_t>(d + 1, 65535));
      trie_.push_back(n);
      ends.emplace_back();
      path.push_back(uint32_t(trie_.size() - 1));
    }
    ends[path.back()].push_back(id);
    max_depth_ = std::max(max_depth_, s.size());
    prev = &s;
  }
  // Subtree ends: a node's subtree stops at the next node of equal or smaller depth.
  std::vector<uint32_t> open;
  for (uint32_t i = 0; i < trie_.size(); ++i) {
    while (!open.empty() && trie_[open.back()].depth >= trie_[i].depth) trie_[open.back()].subtree_end = i, open.pop_back();
    open.push_back(i);
  }
  for (uint32_t o : open) trie_[o].subtree_end = uint32_t(trie_.size());
  // Plain heights, children before parents (reverse preorder), parents from a depth stack.
  std::vector<uint32_t> parent(trie_.size(), 0);
  {
    std::vector<uint32_t> at_depth{0};
    for (uint32_t i = 1; i < trie_.size(); ++i) {
      at_depth.resize(trie_[i].depth);
      parent[i] = at_depth.back();
      at_depth.push_back(i);
    }
  }
  std::vector<uint8_t> plain(trie_.size(), 1);
  std::vector<uint32_t> height(trie_.size(), 1);
  for (uint32_t i = uint32_t(trie_.size()); i-- > 1;) {
    plain[i] = plain[i] && is_plain(trie_[i].byte);
    trie_[i].plain_height = plain[i] ? uint8_t(std::min<uint32_t>(height[i], 255)) : 0;
    const uint32_t p = parent[i];
    plain[p] = plain[p] && plain[i];
    height[p] = std::max(height[p], height[i] + 1);
  }
  for (size_t i = 0; i < trie_.size(); ++i) {
    trie_[i].first_token = uint32_t(token_ids_.size());
    trie_[i].n_tokens = uint32_t(ends[i].size());
    token_ids_.insert(token_ids_.end(), ends[i].begin(), ends[i].end());
  }
}

std::shared_ptr<const Vocabulary> Vocabulary::from_tokenizer(const text::Tokenizer& t, size_t model_vocab) {
  const size_t n = std::max(model_vocab, t.vocab_size());
  std::vector<std::string> bytes(n);
  std::vector<std::pair<int32_t, std::string>> added;
  for (size_t i = 0; i < t.vocab_size(); ++i) {
    const int32_t id = int32_t(i);
    if (t.is_added(id)) added.emplace_back(id, t.id_to_token(id).value_or(""));
    else bytes[i] = t.token_bytes(id);
  }
  return std::make_shared<Vocabulary>(bytes, added, n);
}

const std::string& Vocabulary::bytes(int32_t id) const {
  static const std::string empty;
  return id >= 0 && size_t(id) < size_ ? bytes_[size_t(id)] : empty;
}

std::vector<int32_t> Vocabulary::added_ids(std::string_view content) const {
  auto it = added_by_content_.find(std::string(content));
  return it == added_by_content_.end() ? std::vector<int32_t>{} : it->second;
}

}  // namespace ft::grammar
