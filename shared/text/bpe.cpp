#include "shared/text/bpe.h"

#include <functional>
#include <queue>

#include "shared/core/error.h"
#include "shared/text/byte_level.h"

namespace ft::text {

namespace {
uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
}  // namespace

BytePairEncoder::BytePairEncoder(const std::unordered_map<std::string, int32_t>& vocab,
                                 const std::vector<std::pair<std::string, std::string>>& merges,
                                 bool ignore_merges)
    : ignore_merges_(ignore_merges), cache_(new Shard[kShards]) {
  for (int b = 0; b < 256; ++b) {
    auto it = vocab.find(byte_to_vocab_char(static_cast<uint8_t>(b)));
    if (it == vocab.end())
      throw Error("tokenizer.json: byte-level vocabulary has no token for byte " + std::to_string(b) + " ('" +
                  byte_to_vocab_char(static_cast<uint8_t>(b)) + "')");
    byte_id_[b] = it->second;
  }
  merges_.reserve(merges.size() * 2);
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    auto ia = vocab.find(a), ib = vocab.find(b), inew = vocab.find(a + b);
    if (ia == vocab.end() || ib == vocab.end() || inew == vocab.end())
      throw Error("tokenizer.json: merge " + std::to_string(r) + " ('" + a + "' '" + b +
                  "') refers to a token missing from the vocabulary");
    // A later duplicate of a pair does not override the earlier (lower) rank.
    merges_.emplace(pair_key(ia->second, ib->second), MergeInfo{static_cast<int32_t>(r), inew->second});
  }
  if (ignore_merges_) {
    for (const auto& [tok, id] : vocab) {
      std::string bytes = byte_level_decode_token(tok);
      whole_.emplace(std::move(bytes), id);
    }
  }
}

void BytePairEncoder::merge(std::string_view piece, std::vector<int32_t>& out) const {
  // Same algorithm as tokenizers' Word::merge_all: a heap of (rank, position) candidates; pop the
  // lowest rank (leftmost on ties), skip stale entries, merge, and push the two new neighbour pairs.
  struct Sym {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  const int n = static_cast<int>(piece.size());
  std::vector<Sym> syms(n);
  for (int i = 0; i < n; ++i)
    syms[i] = {byte_id_[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1, true};

  struct Cand {
    int32_t rank, pos, new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push_pair = [&](int pos) {
    const int nx = syms[pos].next;
    if (nx < 0) return;
    auto it = merges_.find(pair_key(syms[pos].id, syms[nx].id));
    if (it != merges_.end()) heap.push({it->second.rank, pos, it->second.new_id});
  };
  for (int i = 0; i + 1 < n; ++i) push_pair(i);

  while (!heap.empty()) {
    const Cand top = heap.top();
    heap.pop();
    Sym& left = syms[top.pos];
    if (!left.alive || left.next < 0) continue;
    Sym& right = syms[left.next];
    auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (int i = 0; i >= 0 && i < n; i = syms[i].next) out.push_back(syms[i].id);
}

void BytePairEncoder::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    auto it = whole_.find(std::string(piece));
    if (it != whole_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() == 1) {
    out.push_back(byte_id_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (piece.size() > kMaxCachedLen) {
    merge(piece, out);
    return;
  }
  Shard& shard = cache_[std::hash<std::string_view>{}(piece) % kShards];
  std::string key(piece);
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.map.find(key);
    if (it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t before = out.size();
  merge(piece, out);
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() < kMaxEntriesPerShard)
    shard.map.emplace(std::move(key), std::vector<int32_t>(out.begin() + static_cast<long>(before), out.end()));
}

}  // namespace ft::text
