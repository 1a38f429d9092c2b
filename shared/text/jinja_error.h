#pragma once
// Template errors carry the template name and line so a user can find the offending spot.
#include <string>

#include "shared/core/error.h"

namespace ft::jinja {

class TemplateError : public Error {
 public:
  using Error::Error;
};

// Internal: thrown by the lexer/parser with a line number; wrapped into TemplateError with the
// template's name by the Template class.
struct SyntaxError {
  std::string message;
  int line;
};

}  // namespace ft::jinja
