#pragma once
// The pre-tokenizer chain of a byte-level BPE tokenizer.json: Split / Digits / ByteLevel steps that
// cut text into pieces, each later merged by BPE on its own.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shared/text/regex.h"

namespace ft::text {

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

class PreTokenizer {
 public:
  void add_split(const std::string& pattern, bool literal, SplitBehavior behavior, bool invert);
  void add_digits(bool individual_digits);
  // The ByteLevel step: optional GPT-2 regex split and prefix space. Its byte-to-character
  // mapping is done by the BPE model, which works on bytes directly.
  void add_byte_level(bool add_prefix_space, bool use_regex);

  // Cuts `text` into pieces (appended to `out`); pieces are never empty.
  void run(std::string_view text, std::vector<std::string>& out) const;

  bool empty() const { return steps_.empty(); }

 private:
  struct Step {
    std::shared_ptr<Regex> regex;  // null for a ByteLevel step without regex
    SplitBehavior behavior = SplitBehavior::Isolated;
    bool invert = false;
    bool add_prefix_space = false;
  };
  std::vector<Step> steps_;
};

}  // namespace ft::text
