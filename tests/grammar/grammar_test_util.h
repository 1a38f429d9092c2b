#pragma once
// Helpers for the grammar tests: a small vocabulary (every byte, some multi-byte tokens that cross
// grammar terminals, GLM's tags as added tokens) and "does this text match" on a compiled grammar.
#include <memory>
#include <string>
#include <vector>

#include "shared/grammar/constraint.h"
#include "shared/grammar/matcher.h"

namespace ft::grammar::testing {

inline const std::vector<std::string>& added_tags() {
  static const std::vector<std::string> t = {"<|endoftext|>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>",
                                             "<arg_value>", "</arg_value>", "<think>", "</think>", "<|observation|>"};
  return t;
}

// Ids 0-255: single bytes; then multi-byte tokens; then the added tags.
inline std::shared_ptr<const Vocabulary> small_vocab(std::vector<std::string> extra = {}) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, char(b)));
  for (const char* s : {"{\"", "\":", "\": ", "\",", "true", "false", "null", "12", "\"}", "}", "ab", "abc", " \"",
                        "\xC3\xA9", "\xC3", "e\xCC", "00", "-1", ".5", "[1", "],", "name", "\n"})
    bytes.push_back(s);
  for (auto& e : extra) bytes.push_back(e);
  std::vector<std::pair<int32_t, std::string>> added;
  for (const auto& t : added_tags()) {
    added.emplace_back(int32_t(bytes.size()), t);
    bytes.push_back(t);
  }
  return std::make_shared<Vocabulary>(bytes, added, bytes.size() + 5);  // 5 padding ids with no token
}

inline std::shared_ptr<const Vocabulary> shared_vocab() {
  static auto v = small_vocab();
  return v;
}

inline ConstraintSource schema(const std::string& s) {
  ConstraintSource c;
  c.kind = ConstraintSource::Kind::JsonSchema;
  c.text = s;
  return c;
}

// Whether `text`, fed byte by byte, is a complete match.
inline bool full_match(const Grammar& g, const std::string& text) {
  Matcher m(Pda::compile(g), shared_vocab());
  return m.accept_bytes(text) && m.accepting();
}

inline bool matches(const ConstraintSource& c, const std::string& text) { return full_match(compile_constraint(c), text); }

}  // namespace ft::grammar::testing
