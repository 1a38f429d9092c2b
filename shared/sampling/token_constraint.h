#pragma once
// What a sequence may sample next, beyond the sampling settings: a grammar (structured outputs,
// enforced tool calls), `min_tokens` and `logit_bias`. Engines use it the same way:
//   1. mask(words) fills the allowed-token bitmask (bit i of word i/32 = token i may come next);
//      false means every token is allowed and nothing needs masking this step;
//   2. the bias is added and disallowed logits set to -inf before penalties, temperature,
//      top-k/top-p/min-p (the CPU engine: apply_constraint; a GPU engine uploads the words);
//   3. accept(token) after sampling advances the grammar.
// End ids (EOS unless ignored, and the stop ids) are allowed only once the grammar accepts and
// min_tokens tokens were generated. If a grammar is complete and can take nothing more, the end
// ids are allowed even before min_tokens (the grammar wins). A state that allows nothing at all
// (a vocabulary that cannot spell what the grammar needs) allows the end ids, so a sequence never
// samples from an empty distribution.
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace ft {

// The grammar part, implemented by shared/grammar (Matcher).
class TokenMatcher {
 public:
  virtual ~TokenMatcher() = default;
  virtual void allowed(std::span<uint32_t> words) = 0;  // ordinary and added tokens, no end ids
  virtual bool accepting() const = 0;
  virtual bool can_continue() const = 0;
  virtual bool accept(int32_t token) = 0;  // false: the token was not allowed (state unchanged)
};

struct ConstraintOptions {
  size_t vocab_size = 0;
  std::vector<int32_t> end_ids;  // EOS ids (unless ignore_eos) and stop token ids
  uint32_t min_tokens = 0;
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logits, [-100, 100]; -100 bans
};

class TokenConstraint {
 public:
  TokenConstraint(ConstraintOptions o, std::shared_ptr<TokenMatcher> grammar);

  size_t words() const { return (o_.vocab_size + 31) / 32; }
  bool mask(std::span<uint32_t> words);
  const std::vector<std::pair<int32_t, float>>& bias() const { return o_.logit_bias; }
  void accept(int32_t token);

  uint32_t generated() const { return generated_; }
  bool has_grammar() const { return grammar_ != nullptr; }
  // The grammar is complete and nothing can follow: the sequence is done (the scheduler stops it
  // without waiting for an end token).
  bool complete() const { return grammar_ && !broken_ && grammar_->accepting() && !grammar_->can_continue(); }
  // A token the grammar refused was sampled anyway (an engine that ignored the mask): the
  // grammar stops constraining and the sequence runs on unconstrained.
  bool broken() const { return broken_; }

 private:
  ConstraintOptions o_;
  std::shared_ptr<TokenMatcher> grammar_;
  uint32_t generated_ = 0;
  bool broken_ = false;
};

// Host side of step 2: bias added, tokens outside the mask set to -inf. `words` is scratch.
void apply_constraint(std::span<float> logits, TokenConstraint& c, std::vector<uint32_t>& words);
// Its two halves, for an engine that computes the mask (mask()) while its forward pass runs.
void apply_bias(std::span<float> logits, const TokenConstraint& c);
// Logits of tokens outside `words` set to -inf (word-at-a-time: whole words of allowed or banned
// tokens cost one test).
void apply_mask(std::span<float> logits, std::span<const uint32_t> words);

}  // namespace ft
