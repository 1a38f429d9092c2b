#include "shared/engine/prefix_index.h"

#include <algorithm>

namespace ft {

uint64_t prefix_block_hash(uint64_t h, std::span<const int32_t> block) {
  // FNV-1a over the ids' bytes, seeded with the previous block's hash: equal chains mean equal
  // prefixes up to collisions, which find() rules out by comparing tokens.
  h ^= 0xcbf29ce484222325ull;
  for (int32_t t : block) {
    uint32_t v = static_cast<uint32_t>(t);
    for (int i = 0; i < 4; ++i) {
      h ^= v & 0xffu;
      h *= 0x100000001b3ull;
      v >>= 8;
    }
  }
  return h;
}

PrefixIndex::Key PrefixIndex::key_of(std::span<const int32_t> tokens) const {
  const int64_t q = static_cast<int64_t>(tokens.size()) / block_;
  uint64_t h = 0;
  for (int64_t b = 0; b < q; ++b) h = prefix_block_hash(h, tokens.subspan(static_cast<size_t>(b * block_), block_));
  return {h, q};
}

const PrefixIndex::Entry* PrefixIndex::find(std::span<const int32_t> prompt, int64_t max_len, int64_t align) {
  max_len = std::min<int64_t>(max_len, static_cast<int64_t>(prompt.size()));
  if (max_len <= 0 || lru_.empty()) return nullptr;
  align = std::max<int64_t>(align, 1);
  // Chain hashes of the prompt's whole blocks up to max_len.
  const int64_t qmax = max_len / block_;
  std::vector<uint64_t> chain(static_cast<size_t>(qmax + 1), 0);
  for (int64_t b = 0; b < qmax; ++b)
    chain[b + 1] = prefix_block_hash(chain[b], prompt.subspan(static_cast<size_t>(b * block_), block_));
  for (int64_t q = qmax; q >= 0; --q) {
    const Entry* best = nullptr;
    auto [lo, hi] = by_key_.equal_range(Key{chain[q], q});
    for (auto it = lo; it != hi; ++it) {
      const Entry& e = *by_id_.at(it->second);
      const int64_t n = static_cast<int64_t>(e.tokens->size());
      if (n > max_len || n % align != 0) continue;
      if (best && n <= static_cast<int64_t>(best->tokens->size())) continue;
      if (!std::equal(e.tokens->begin(), e.tokens->end(), prompt.begin())) continue;
      best = &e;
    }
    if (best) {
      auto it = by_id_.at(best->id);
      lru_.splice(lru_.begin(), lru_, it);
      return &lru_.front();
    }
  }
  return nullptr;
}

const PrefixIndex::Entry& PrefixIndex::insert(Tokens tokens, std::shared_ptr<void> payload) {
  const Key k = key_of(*tokens);
  auto [lo, hi] = by_key_.equal_range(k);
  for (auto it = lo; it != hi; ++it)
    if (*by_id_.at(it->second)->tokens == *tokens) {
      erase(it->second);
      break;
    }
  Entry e{next_id_++, std::move(tokens), std::move(payload)};
  lru_.push_front(std::move(e));
  by_id_[lru_.front().id] = lru_.begin();
  by_key_.emplace(k, lru_.front().id);
  return lru_.front();
}

void PrefixIndex::erase(uint64_t id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  const Key k = key_of(*it->second->tokens);
  auto [lo, hi] = by_key_.equal_range(k);
  for (auto kt = lo; kt != hi; ++kt)
    if (kt->second == id) {
      by_key_.erase(kt);
      break;
    }
  lru_.erase(it->second);
  by_id_.erase(it);
}

void PrefixIndex::clear() {
  lru_.clear();
  by_id_.clear();
  by_key_.clear();
}

}  // namespace ft
