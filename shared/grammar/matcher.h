#pragma once
// Runs a Pda over one sequence's output and answers, per step, which tokens may come next.
//
// The state is a set of (node, stack) configurations, kept only at nodes that consume input.
// Sets are interned, and each set's byte transitions are computed once and memoised, so the
// automaton is determinised lazily: a mask is one preorder walk of the vocabulary trie that does
// one table lookup per trie node and skips every subtree whose prefix is dead. Masks are cached
// per set (a JSON string, a run of digits, the same object key… are the same set step after step).
// Stacks are interned too (a stack id is a (return node, parent stack) pair), so equal stacks
// compare as equal ids and repeated states hit the caches.
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "shared/grammar/automaton.h"
#include "shared/grammar/vocabulary.h"
#include "shared/sampling/token_constraint.h"

namespace ft::grammar {

struct MatcherStats {
  uint64_t masks = 0, mask_cache_hits = 0;
  uint64_t sets = 0;  // interned configuration sets now
  uint64_t resets = 0;
};

class Matcher final : public TokenMatcher {
 public:
  // Throws GrammarError when the grammar names an added token the vocabulary lacks.
  Matcher(std::shared_ptr<const Pda> pda, std::shared_ptr<const Vocabulary> vocab);
  Matcher(const Matcher&) = delete;  // the mask cache holds iterators into itself
  Matcher& operator=(const Matcher&) = delete;

  void allowed(std::span<uint32_t> words) override;  // one bit per vocabulary id; EOS not included
  bool accepting() const override;                    // the output so far is a complete match
  bool can_continue() const override;                 // some token may follow
  bool accept(int32_t token) override;                // false (state unchanged): the token is not allowed

  bool accept_bytes(std::string_view bytes);  // plain text, for tests and for forced prefixes
  const MatcherStats& stats() const { return stats_; }

 private:
  using Config = uint64_t;  // node << 32 | stack
  struct SetInfo {
    std::vector<Config> configs;  // sorted
    bool accepting = false;
    int64_t next = -1;  // offset of its 256 byte transitions in next_, -1: none computed yet
    int16_t plain_run = -1;  // plain bytes it survives (any of them, any order; 255: unbounded), -1 unknown
  };
  struct ConfigsHash {
    size_t operator()(const std::vector<Config>& v) const;
  };

  int32_t closure(std::vector<Config>& seeds);
  int32_t intern(std::vector<Config> kernel, bool accepting);
  int32_t push_stack(int32_t ret, int32_t parent);
  int32_t step_byte(int32_t set, uint8_t b);
  int32_t compute_step_byte(int32_t set, uint8_t b);
  int32_t step_token(int32_t set, int32_t grammar_token);
  void compute_mask(int32_t set, std::vector<uint32_t>& words);
  int plain_run(int32_t set);
  void reset_if_large();

  std::shared_ptr<const Pda> pda_;
  std::shared_ptr<const Vocabulary> vocab_;
  std::vector<std::vector<int32_t>> token_ids_;        // grammar token -> vocabulary ids
  std::unordered_map<int32_t, int32_t> added_token_;  // vocabulary id -> grammar token

  std::vector<std::pair<int32_t, int32_t>> stacks_;  // id -> (return node, parent); 0: empty
  std::vector<uint16_t> stack_depth_;
  std::unordered_map<uint64_t, int32_t> stack_index_;

  std::vector<SetInfo> sets_;
  std::unordered_map<std::vector<Config>, int32_t, ConfigsHash> set_index_[2];  // by accepting
  std::vector<int32_t> next_;  // byte transitions: -2 unknown, -1 dead, else a set
  std::unordered_map<uint64_t, int32_t> token_next_;
  // Closures by their seeds: most bytes of a character class lead to the same nodes, so one
  // closure serves them all.
  std::unordered_map<std::vector<Config>, int32_t, ConfigsHash> seed_index_;
  std::vector<Config> seeds_;  // scratch
  std::vector<Config> seen_;   // scratch of closure()

  // Masks by set, least recently used last.
  std::list<std::pair<int32_t, std::vector<uint32_t>>> masks_;
  std::unordered_map<int32_t, std::list<std::pair<int32_t, std::vector<uint32_t>>>::iterator> mask_index_;
  std::vector<int32_t> walk_;  // set per trie depth during a mask walk

  int32_t current_ = -1;
  MatcherStats stats_;
};

}  // namespace ft::grammar
