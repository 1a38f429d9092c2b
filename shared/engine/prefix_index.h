#pragma once
// Which cached sequence states exist for which token prefixes: entries keyed by a hash chain over
// fixed-size blocks of token ids (plus the tokens after the last whole block), found by the
// longest prefix of a new prompt, verified token by token (a hash collision can never restore the
// wrong state), kept in least-recently-used order for eviction. Engines store their own payloads
// (what a snapshot holds is backend-specific); the index only knows their token lists.
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

namespace ft {

// Hash of the prefix tokens[0, (q+1)·block) given the hash of tokens[0, q·block).
uint64_t prefix_block_hash(uint64_t previous, std::span<const int32_t> block);

class PrefixIndex {
 public:
  using Tokens = std::shared_ptr<const std::vector<int32_t>>;
  struct Entry {
    uint64_t id = 0;
    Tokens tokens;  // the prefix the state covers
    std::shared_ptr<void> payload;
  };

  explicit PrefixIndex(int64_t block_tokens = 64) : block_(block_tokens) {}

  int64_t block_tokens() const { return block_; }
  size_t size() const { return lru_.size(); }

  // The longest entry whose tokens are a prefix of `prompt` with length ≤ max_len and a multiple
  // of `align`; it becomes the most recently used. Null when none.
  const Entry* find(std::span<const int32_t> prompt, int64_t max_len, int64_t align = 1);

  // Adds an entry (an existing one with the same tokens is replaced) as the most recently used.
  const Entry& insert(Tokens tokens, std::shared_ptr<void> payload);

  // The least recently used entry, or null; erase by id.
  const Entry* oldest() const { return lru_.empty() ? nullptr : &lru_.back(); }
  void erase(uint64_t id);
  void clear();

 private:
  struct Key {
    uint64_t chain;  // hash of the whole blocks
    int64_t blocks;
    bool operator==(const Key& o) const { return chain == o.chain && blocks == o.blocks; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return static_cast<size_t>(k.chain ^ (k.blocks * 0x9E3779B97F4A7C15ull)); }
  };
  Key key_of(std::span<const int32_t> tokens) const;

  int64_t block_;
  uint64_t next_id_ = 1;
  std::list<Entry> lru_;  // front: most recently used
  std::unordered_map<uint64_t, std::list<Entry>::iterator> by_id_;
  std::unordered_multimap<Key, uint64_t, KeyHash> by_key_;
};

}  // namespace ft
