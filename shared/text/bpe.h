#pragma once
// Byte-level BPE: merges by rank over the bytes of one pre-tokenized piece, with a per-word cache.
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ft::text {

class BytePairEncoder {
 public:
  // `vocab`: token spelling (byte-level characters) -> id. `merges`: pairs of spellings in rank
  // order. Throws ft::Error when a byte has no token or a merge names unknown tokens.
  BytePairEncoder(const std::unordered_map<std::string, int32_t>& vocab,
                  const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges);

  // Appends the ids of one piece (raw bytes) to `out`.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  void merge(std::string_view piece, std::vector<int32_t>& out) const;

  struct MergeInfo {
    int32_t rank;
    int32_t new_id;
  };
  std::array<int32_t, 256> byte_id_{};
  std::unordered_map<uint64_t, MergeInfo> merges_;
  bool ignore_merges_ = false;
  // ignore_merges: a piece that is itself a vocabulary entry is taken whole.
  std::unordered_map<std::string, int32_t> whole_;

  // The cache is shared between threads; shards keep lock contention low.
  static constexpr size_t kShards = 16;
  static constexpr size_t kMaxEntriesPerShard = 1 << 14;
  static constexpr size_t kMaxCachedLen = 256;
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>> map;
  };
  std::unique_ptr<Shard[]> cache_;
};

}  // namespace ft::text
