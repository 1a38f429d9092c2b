#pragma once
// The raw grammar dialect (GBNF-like, as llama.cpp and xgrammar read it; docs/grammar.md):
//   root ::= "{" ws item ("," ws item)* "}"     rules `name ::= expression`; `root` is the start
//   item ::= [a-z]+ | "lit\n" | ( a | b ) c      literals with \n \t \r \\ \" \xHH \uHHHH escapes
//   x* x+ x? x{2} x{2,} x{2,5}  [^"\\]  .         classes as in regexes; `.` any character
//   <think> <|user|>                              an added token of the tokenizer, by content
//   # comment to the end of the line
// A rule ends where the next `name ::=` starts. Errors name the line and column.
#include <string_view>

#include "shared/grammar/grammar.h"

namespace ft::grammar {

// Adds the grammar's rules to g and returns its root rule.
int32_t ebnf_rule(Grammar& g, std::string_view text);

}  // namespace ft::grammar
