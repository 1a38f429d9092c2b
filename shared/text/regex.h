#pragma once
// PCRE2 (UTF + Unicode properties + JIT) wrapper with the matching rules of the Oniguruma engine
// that Hugging Face `tokenizers` uses for its Split patterns.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ft::text {

class Regex {
 public:
  // `literal` compiles the pattern as a plain string. Throws ft::Error on a bad pattern.
  explicit Regex(const std::string& pattern, bool literal = false);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Appends the [start, end) byte ranges of every non-empty, non-overlapping match, left to
  // right. `text` must be valid UTF-8.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string pattern_;
};

}  // namespace ft::text
