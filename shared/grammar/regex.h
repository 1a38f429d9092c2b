#pragma once
// Regular expressions (ECMAScript syntax, the subset docs/grammar.md lists) as grammar
// expressions. A pattern constrains the whole text it is applied to: the expression matches
// exactly the strings the pattern matches in full.
#include <string_view>

#include "shared/grammar/codepoints.h"
#include "shared/grammar/grammar.h"

namespace ft::grammar {

// Throws GrammarError ("at offset N: ...") for malformed patterns and unsupported features
// (backreferences, lookaround, word boundaries, anchors inside the pattern, flags). A leading
// '^' and a trailing '$' are accepted and mean nothing more.
int32_t regex_expr(Grammar& g, std::string_view pattern, CharContext ctx);

// The character class syntax shared with the EBNF dialect: parses "[...]" starting at s[pos]
// (which is '['), leaves pos after the closing ']'.
CodepointSet parse_char_class(std::string_view s, size_t& pos);

}  // namespace ft::grammar
