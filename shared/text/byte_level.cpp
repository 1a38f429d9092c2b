#include "shared/text/byte_level.h"

#include <vector>

#include "shared/text/utf8.h"

namespace ft::text {

namespace {

struct Table {
  std::array<char32_t, 256> byte_to_cp{};
  std::array<std::string, 256> byte_to_str;
  std::vector<int16_t> cp_to_byte;  // indexed by code point < 512, -1 when absent

  Table() : cp_to_byte(512, -1) {
    // Printable Latin-1 bytes keep their own code point; the other 68 bytes are numbered from
    // U+0100 upward in byte order, which is what makes the table reversible.
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byte_to_cp[b] = keep ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      append_utf8(byte_to_str[b], byte_to_cp[b]);
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

const std::string& byte_to_vocab_char(uint8_t b) { return table().byte_to_str[b]; }

std::optional<uint8_t> vocab_char_to_byte(char32_t cp) {
  const Table& t = table();
  if (cp >= t.cp_to_byte.size() || t.cp_to_byte[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(t.cp_to_byte[cp]);
}

std::string byte_level_decode_token(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    const size_t before = i;
    const char32_t cp = next_code_point(token, i);
    const auto b = vocab_char_to_byte(cp);
    if (!b || utf8_valid_seq_len(token, before) == 0) return std::string(token);
    out.push_back(static_cast<char>(*b));
  }
  return out;
}

}  // namespace ft::text
