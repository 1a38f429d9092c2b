#pragma once
// UTF-8 helpers shared by the tokenizer, the detokenizer, the Jinja interpreter and the parsers.
// Semantics follow Rust's `String::from_utf8_lossy` and Python's `str` where the two matter.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ft::text {

// Appends the UTF-8 encoding of code point `cp` (no validation of surrogates).
void append_utf8(std::string& out, char32_t cp);

// Length of the valid UTF-8 sequence starting at s[i], or 0 when s[i] does not start one
// (invalid lead byte, bad continuation, overlong form, surrogate, or truncated at the end).
size_t utf8_valid_seq_len(std::string_view s, size_t i);

// Replaces each maximal invalid subsequence by U+FFFD, exactly as Rust's from_utf8_lossy does.
std::string utf8_lossy(std::string_view bytes);

// Number of bytes at the end of `s` that form a valid but incomplete UTF-8 prefix (0..3): the
// bytes a streaming decoder must hold back because the next chunk may complete them.
size_t utf8_incomplete_tail(std::string_view s);

// Decodes valid UTF-8 into code points; invalid bytes become U+FFFD one byte at a time.
std::u32string utf8_to_u32(std::string_view s);
std::string u32_to_utf8(std::u32string_view s);

// Decodes the code point at s[i] (valid UTF-8 expected) and advances i.
char32_t next_code_point(std::string_view s, size_t& i);

size_t utf8_length(std::string_view s);  // code points

// Python's str.isspace() / Unicode White_Space for one code point.
bool py_isspace(char32_t c);
bool py_isalpha(char32_t c);
bool py_isdigit(char32_t c);
bool py_isalnum(char32_t c);
bool py_isprintable(char32_t c);
char32_t py_toupper(char32_t c);
char32_t py_tolower(char32_t c);
bool py_isupper(char32_t c);
bool py_islower(char32_t c);

}  // namespace ft::text
