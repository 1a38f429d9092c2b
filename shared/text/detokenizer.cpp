#include "shared/text/detokenizer.h"

#include "shared/text/utf8.h"

namespace ft::text {

std::string IncrementalDetokenizer::push(int32_t id) {
  if (skip_special_ && tok_->is_special(id)) return {};
  pending_ += tok_->token_bytes(id);
  // Everything before a trailing valid-but-incomplete sequence is final: the lossy replacement of
  // an invalid run only depends on bytes up to the first byte that breaks it.
  const size_t hold = utf8_incomplete_tail(pending_);
  std::string out = utf8_lossy(std::string_view(pending_).substr(0, pending_.size() - hold));
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string IncrementalDetokenizer::finish() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace ft::text
