#pragma once
// Sets of Unicode code points and their byte-level forms: a grammar works on bytes, so "any
// character but a quote" becomes alternatives of UTF-8 byte ranges (a token may then end in the
// middle of a character and the next one finish it). Surrogates are never part of a set.
#include <cstdint>
#include <utility>
#include <vector>

#include "shared/grammar/grammar.h"

namespace ft::grammar {

constexpr char32_t kMaxCodepoint = 0x10FFFF;

class CodepointSet {
 public:
  CodepointSet() = default;
  static CodepointSet of(char32_t c) { return range(c, c); }
  static CodepointSet range(char32_t lo, char32_t hi);
  static CodepointSet all() { return range(0, kMaxCodepoint); }

  void add(char32_t lo, char32_t hi);
  void add(const CodepointSet& o);
  void remove(char32_t lo, char32_t hi);
  void remove(const CodepointSet& o);
  CodepointSet complement() const;  // within [0, 0x10FFFF], surrogates excluded
  bool contains(char32_t c) const;
  bool empty() const { return ranges_.empty(); }
  const std::vector<std::pair<char32_t, char32_t>>& ranges() const { return ranges_; }

 private:
  void normalize();
  std::vector<std::pair<char32_t, char32_t>> ranges_;  // sorted, disjoint, not adjacent
};

// How characters are written where a grammar produces them.
enum class CharContext : uint8_t {
  Raw,         // UTF-8 as is (regex and EBNF grammars over the whole output)
  JsonString,  // inside a JSON string: '"', '\\' and control characters as escapes
  TagText,     // raw text between XML-like tags (GLM tool-call values): never '<'
};

// One character of the set, in UTF-8 (or escaped, per context).
int32_t char_set_expr(Grammar& g, const CodepointSet& set, CharContext ctx);

// The JavaScript/PCRE shorthand classes (\d, \w, \s) as JSON Schema's ECMA-262 patterns read them.
CodepointSet digit_class();
CodepointSet word_class();
CodepointSet space_class();

}  // namespace ft::grammar
