#pragma once
// Streaming detokenization: feed ids one at a time, get text deltas. A delta never ends inside a
// UTF-8 sequence that the next token might complete, and the deltas of a whole stream (plus
// finish()) concatenate to exactly Tokenizer::decode of all its ids.
#include <cstdint>
#include <string>

#include "shared/text/tokenizer.h"

namespace ft::text {

class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens = false)
      : tok_(&tok), skip_special_(skip_special_tokens) {}

  // Returns the text that became final with this token (often empty for a partial character).
  std::string push(int32_t id);
  // Flushes what is held back; an unfinished sequence becomes U+FFFD, as decode() does.
  std::string finish();

  // Bytes held back, waiting for the rest of a character (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace ft::text
