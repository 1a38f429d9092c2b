#include "shared/sampling/token_constraint.h"

#include <algorithm>
#include <limits>

namespace ft {

TokenConstraint::TokenConstraint(ConstraintOptions o, std::shared_ptr<TokenMatcher> grammar)
    : o_(std::move(o)), grammar_(std::move(grammar)) {}

bool TokenConstraint::mask(std::span<uint32_t> words) {
  const bool active_grammar = grammar_ && !broken_;
  const bool before_min = generated_ < o_.min_tokens;
  if (!active_grammar && !before_min) return false;
  auto set_end_ids = [&](bool on) {
    for (int32_t id : o_.end_ids) {
      if (id < 0 || size_t(id) >= o_.vocab_size) continue;
      if (on) words[size_t(id) >> 5] |= 1u << (id & 31);
      else words[size_t(id) >> 5] &= ~(1u << (id & 31));
    }
  };
  if (active_grammar) {
    grammar_->allowed(words);
    const bool complete = grammar_->accepting();
    const bool more = grammar_->can_continue();
    set_end_ids(false);
    if (complete && (!before_min || !more)) set_end_ids(true);
  } else {
    std::fill(words.begin(), words.end(), ~0u);
    // Bits past the vocabulary stay clear.
    if (o_.vocab_size % 32) words[words.size() - 1] = (1u << (o_.vocab_size % 32)) - 1;
    set_end_ids(false);
  }
  bool any = false;
  for (uint32_t w : words) any = any || w != 0;
  if (!any) set_end_ids(true);
  any = false;
  for (uint32_t w : words) any = any || w != 0;
  if (!any) std::fill(words.begin(), words.end(), ~0u);  // nothing can end it either: run free
  return true;
}

void TokenConstraint::accept(int32_t token) {
  ++generated_;
  if (grammar_ && !broken_ && !grammar_->accept(token)) {
    const bool end = std::find(o_.end_ids.begin(), o_.end_ids.end(), token) != o_.end_ids.end();
    if (!end) broken_ = true;
  }
}

void apply_bias(std::span<float> logits, const TokenConstraint& c) {
  const float ninf = -std::numeric_limits<float>::infinity();
  // OpenAI: -100 bans the token; anything else is added.
  for (const auto& [id, b] : c.bias())
    if (id >= 0 && size_t(id) < logits.size()) logits[size_t(id)] = b <= -100.0f ? ninf : logits[size_t(id)] + b;
}

void apply_constraint(std::span<float> logits, TokenConstraint& c, std::vector<uint32_t>& words) {
  apply_bias(logits, c);
  words.resize(c.words());
  if (c.mask(words)) apply_mask(logits, words);
}

void apply_mask(std::span<float> logits, std::span<const uint32_t> words) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const size_t full = std::min(logits.size() / 32, words.size());
  for (size_t w = 0; w < full; ++w) {
    const uint32_t bits = words[w];
    if (bits == ~0u) continue;
    float* row = logits.data() + w * 32;
    if (bits == 0) {
      std::fill(row, row + 32, ninf);
      continue;
    }
    for (int j = 0; j < 32; ++j)
      if (!((bits >> j) & 1)) row[j] = ninf;
  }
  for (size_t i = full * 32; i < logits.size(); ++i)
    if (i / 32 >= words.size() || !((words[i >> 5] >> (i & 31)) & 1)) logits[i] = ninf;
}

}  // namespace ft
