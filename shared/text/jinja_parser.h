#pragma once
// Recursive-descent parser with jinja2's grammar and operator precedence.
#include <string_view>

#include "shared/text/jinja_ast.h"
#include "shared/text/jinja_lexer.h"

namespace ft::jinja {

// Throws SyntaxError (jinja_error.h).
Body parse(std::vector<Token> tokens);

}  // namespace ft::jinja
