#pragma once
// Tokenizer for Jinja template source, configured as transformers configures jinja2:
// trim_blocks, lstrip_blocks, no trailing newline kept, "\r\n"/"\r" normalized to "\n".
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ft::jinja {

enum class Tok : uint8_t { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type;
  std::string value;  // Data text, name, decoded string, operator spelling
  int line = 1;
  int64_t ival = 0;
  double fval = 0;
};

// Throws TemplateSyntaxError (see jinja_template.h) on malformed tags.
std::vector<Token> lex(std::string_view source);

const char* tok_name(Tok t);

}  // namespace ft::jinja
