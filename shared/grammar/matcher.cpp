#include "shared/grammar/matcher.h"

#include <algorithm>
#include <unordered_set>

namespace ft::grammar {

namespace {

// Bounds per sequence: deeper nesting than this is a dead end, not an unbounded allocation.
constexpr uint16_t kMaxStackDepth = 2000;
// Interned sets before the caches are dropped and rebuilt from the current state.
constexpr size_t kMaxSets = 50000;
constexpr size_t kMaxCachedMasks = 256;

constexpr uint64_t config(int32_t node, int32_t stack) { return uint64_t(uint32_t(node)) << 32 | uint32_t(stack); }
constexpr int32_t node_of(uint64_t c) { return int32_t(c >> 32); }
constexpr int32_t stack_of(uint64_t c) { return int32_t(c & 0xFFFFFFFFu); }

}  // namespace

size_t Matcher::ConfigsHash::operator()(const std::vector<Config>& v) const {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ v.size();
  for (Config c : v) {
    h ^= c + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
  }
  return size_t(h ^ (h >> 31));
}

Matcher::Matcher(std::shared_ptr<const Pda> pda, std::shared_ptr<const Vocabulary> vocab)
    : pda_(std::move(pda)), vocab_(std::move(vocab)) {
  for (size_t t = 0; t < pda_->tokens().size(); ++t) {
    std::vector<int32_t> ids = vocab_->added_ids(pda_->tokens()[t]);
    if (ids.empty()) throw GrammarError("the tokenizer has no added token '" + pda_->tokens()[t] + "'");
    for (int32_t id : ids) added_token_[id] = int32_t(t);
    token_ids_.push_back(std::move(ids));
  }
  stacks_.emplace_back(-1, -1);
  stack_depth_.push_back(0);
  std::vector<Config> seed{config(pda_->machines()[size_t(pda_->root())].start, 0)};
  current_ = closure(seed);
}

int32_t Matcher::push_stack(int32_t ret, int32_t parent) {
  if (stack_depth_[size_t(parent)] >= kMaxStackDepth) return -1;
  const uint64_t key = uint64_t(uint32_t(ret)) << 32 | uint32_t(parent);
  auto [it, fresh] = stack_index_.emplace(key, int32_t(stacks_.size()));
  if (fresh) {
    stacks_.emplace_back(ret, parent);
    stack_depth_.push_back(uint16_t(stack_depth_[size_t(parent)] + 1));
  }
  return it->second;
}

int32_t Matcher::closure(std::vector<Config>& work) {
  const auto& nodes = pda_->nodes();
  // Closures are small: a sorted-on-demand vector beats a hash set. Large ones switch to a set.
  seen_.clear();
  std::unordered_set<Config> big;
  auto first_visit = [&](Config c) {
    if (!big.empty()) return big.insert(c).second;
    if (std::find(seen_.begin(), seen_.end(), c) != seen_.end()) return false;
    seen_.push_back(c);
    if (seen_.size() > 64) big.insert(seen_.begin(), seen_.end());
    return true;
  };
  std::vector<Config> kernel;
  bool accepting = false;
  while (!work.empty()) {
    const Config c = work.back();
    work.pop_back();
    if (!first_visit(c)) continue;
    const int32_t n = node_of(c), st = stack_of(c);
    const PdaNode& pn = nodes[size_t(n)];
    if (pn.consumes) kernel.push_back(c);
    for (const PdaEdge& e : pn.edges) {
      if (e.kind == PdaEdge::Epsilon) {
        work.push_back(config(e.target, st));
      } else if (e.kind == PdaEdge::Call) {
        const int32_t s2 = push_stack(e.target, st);
        if (s2 >= 0) work.push_back(config(pda_->machines()[size_t(e.arg)].start, s2));
      }
    }
    if (pda_->is_end(n)) {
      if (st == 0) accepting = accepting || pn.machine == pda_->root();
      else work.push_back(config(stacks_[size_t(st)].first, stacks_[size_t(st)].second));
    }
  }
  if (kernel.empty() && !accepting) return -1;
  std::sort(kernel.begin(), kernel.end());
  return intern(std::move(kernel), accepting);
}

int32_t Matcher::intern(std::vector<Config> kernel, bool accepting) {
  auto& index = set_index_[accepting ? 1 : 0];
  if (auto it = index.find(kernel); it != index.end()) return it->second;
  const int32_t id = int32_t(sets_.size());
  index.emplace(kernel, id);
  sets_.push_back(SetInfo{std::move(kernel), accepting, -1, -1});
  stats_.sets = sets_.size();
  return id;
}

inline int32_t Matcher::step_byte(int32_t set, uint8_t b) {
  const int64_t off = sets_[size_t(set)].next;
  if (off >= 0) {
    const int32_t r = next_[size_t(off) + b];
    if (r != -2) return r;
  }
  return compute_step_byte(set, b);
}

int32_t Matcher::compute_step_byte(int32_t set, uint8_t b) {
  if (sets_[size_t(set)].next < 0) {
    sets_[size_t(set)].next = int64_t(next_.size());
    next_.resize(next_.size() + 256, -2);
  }
  const auto& nodes = pda_->nodes();
  const auto& bsets = pda_->byte_sets();
  seeds_.clear();
  for (Config c : sets_[size_t(set)].configs)
    for (const PdaEdge& e : nodes[size_t(node_of(c))].edges)
      if (e.kind == PdaEdge::Byte && bsets[size_t(e.arg)].test(b)) seeds_.push_back(config(e.target, stack_of(c)));
  int32_t r = -1;
  if (!seeds_.empty()) {
    std::sort(seeds_.begin(), seeds_.end());
    seeds_.erase(std::unique(seeds_.begin(), seeds_.end()), seeds_.end());
    auto it = seed_index_.find(seeds_);
    if (it != seed_index_.end()) {
      r = it->second;
    } else {
      std::vector<Config> key = seeds_;
      r = closure(seeds_);
      seed_index_.emplace(std::move(key), r);
    }
  }
  next_[size_t(sets_[size_t(set)].next) + b] = r;
  return r;
}

int32_t Matcher::step_token(int32_t set, int32_t grammar_token) {
  const uint64_t key = uint64_t(uint32_t(set)) << 32 | uint32_t(grammar_token);
  if (auto it = token_next_.find(key); it != token_next_.end()) return it->second;
  std::vector<Config> seeds;
  for (Config c : sets_[size_t(set)].configs)
    for (const PdaEdge& e : pda_->nodes()[size_t(node_of(c))].edges)
      if (e.kind == PdaEdge::Token && e.arg == grammar_token) seeds.push_back(config(e.target, stack_of(c)));
  const int32_t r = seeds.empty() ? -1 : closure(seeds);
  token_next_[key] = r;
  return r;
}

void Matcher::compute_mask(int32_t set, std::vector<uint32_t>& words) {
  words.assign(vocab_->words(), 0u);
  const auto& trie = vocab_->trie();
  const auto& ids = vocab_->token_ids();
  walk_.assign(vocab_->max_depth() + 1, -1);
  walk_[0] = set;
  const uint32_t n = uint32_t(trie.size());
  for (uint32_t i = 1; i < n;) {
    const Vocabulary::Node& t = trie[i];
    // A plain subtree the parent state survives whole: every token in it is allowed.
    if (t.plain_height && plain_run(walk_[t.depth - 1u]) >= t.plain_height) {
      const uint32_t end = vocab_->subtree_tokens_end(i);
      for (uint32_t k = t.first_token; k < end; ++k) {
        const uint32_t id = uint32_t(ids[k]);
        words[id >> 5] |= 1u << (id & 31);
      }
      i = t.subtree_end;
      continue;
    }
    const int32_t s = step_byte(walk_[t.depth - 1u], t.byte);
    if (s < 0) {
      i = t.subtree_end;
      continue;
    }
    walk_[t.depth] = s;
    for (uint32_t k = 0; k < t.n_tokens; ++k) {
      const uint32_t id = uint32_t(ids[t.first_token + k]);
      words[id >> 5] |= 1u << (id & 31);
    }
    ++i;
  }
  // Added tokens the grammar names here.
  for (Config c : sets_[size_t(set)].configs)
    for (const PdaEdge& e : pda_->nodes()[size_t(node_of(c))].edges)
      if (e.kind == PdaEdge::Token)
        for (int32_t id : token_ids_[size_t(e.arg)]) words[size_t(id) >> 5] |= 1u << (id & 31);
}

// How many plain bytes (Vocabulary::is_plain) the set survives whatever they are: the length of
// the chain set -> Y1 -> Y2 … where every plain byte leads from Y_k to the same live Y_{k+1}
// (a JSON string's character loop: unbounded; with maxLength: the characters left). The chain's
// sets get their own runs on the way.
int Matcher::plain_run(int32_t set) {
  if (sets_[size_t(set)].plain_run >= 0) return sets_[size_t(set)].plain_run;
  static const std::vector<uint8_t> plain = [] {
    std::vector<uint8_t> v;
    for (int b = 0; b < 256; ++b)
      if (Vocabulary::is_plain(uint8_t(b))) v.push_back(uint8_t(b));
    return v;
  }();
  std::vector<int32_t> chain{set};
  int run = 0;
  while (run < 255) {
    const int32_t y = chain.back();
    if (sets_[size_t(y)].plain_run >= 0) {
      run = std::min(255, int(chain.size()) - 1 + sets_[size_t(y)].plain_run);
      chain.pop_back();
      break;
    }
    const int32_t next = step_byte(y, plain[0]);
    bool same = next >= 0;
    for (size_t k = 1; same && k < plain.size(); ++k) same = step_byte(y, plain[k]) == next;
    if (!same) {
      run = int(chain.size()) - 1;
      break;
    }
    if (next == y || std::find(chain.begin(), chain.end(), next) != chain.end()) {
      run = 255;  // a loop: any number of plain bytes
      break;
    }
    chain.push_back(next);
    run = int(chain.size()) - 1;
  }
  for (size_t k = 0; k < chain.size(); ++k)
    sets_[size_t(chain[k])].plain_run = int16_t(run == 255 ? 255 : std::max(0, run - int(k)));
  return sets_[size_t(set)].plain_run;
}

void Matcher::reset_if_large() {
  if (sets_.size() <= kMaxSets) return;
  // Keep the current state only; everything else is a cache.
  SetInfo cur = sets_[size_t(current_)];
  sets_.clear();
  set_index_[0].clear();
  set_index_[1].clear();
  next_.clear();
  token_next_.clear();
  seed_index_.clear();
  masks_.clear();
  mask_index_.clear();
  current_ = intern(std::move(cur.configs), cur.accepting);
  ++stats_.resets;
}

void Matcher::allowed(std::span<uint32_t> words) {
  reset_if_large();
  ++stats_.masks;
  auto it = mask_index_.find(current_);
  if (it != mask_index_.end()) {
    ++stats_.mask_cache_hits;
    masks_.splice(masks_.end(), masks_, it->second);
  } else {
    std::vector<uint32_t> m;
    compute_mask(current_, m);
    masks_.emplace_back(current_, std::move(m));
    mask_index_[current_] = std::prev(masks_.end());
    if (masks_.size() > kMaxCachedMasks) {
      mask_index_.erase(masks_.front().first);
      masks_.pop_front();
    }
  }
  const std::vector<uint32_t>& m = masks_.back().second;
  std::copy_n(m.begin(), std::min(m.size(), words.size()), words.begin());
  if (words.size() > m.size()) std::fill(words.begin() + std::ptrdiff_t(m.size()), words.end(), 0u);
}

bool Matcher::accepting() const { return sets_[size_t(current_)].accepting; }

bool Matcher::can_continue() const { return !sets_[size_t(current_)].configs.empty(); }

bool Matcher::accept(int32_t token) {
  reset_if_large();
  int32_t s = -1;
  if (auto it = added_token_.find(token); it != added_token_.end()) {
    s = step_token(current_, it->second);
  } else {
    const std::string& b = vocab_->bytes(token);
    if (b.empty()) return false;
    s = current_;
    for (unsigned char c : b) {
      s = step_byte(s, c);
      if (s < 0) break;
    }
  }
  if (s < 0) return false;
  current_ = s;
  return true;
}

bool Matcher::accept_bytes(std::string_view bytes) {
  int32_t s = current_;
  for (unsigned char c : bytes) {
    s = step_byte(s, c);
    if (s < 0) return false;
  }
  current_ = s;
  return true;
}

}  // namespace ft::grammar
