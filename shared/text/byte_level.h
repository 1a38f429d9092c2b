#pragma once
// GPT-2's reversible byte <-> printable-character table used by byte-level BPE vocabularies.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ft::text {

// The vocabulary spelling (UTF-8) of raw byte `b`, e.g. 0x20 -> "Ġ".
const std::string& byte_to_vocab_char(uint8_t b);

// Inverse of byte_to_vocab_char for one code point; nullopt when `cp` is not in the table.
std::optional<uint8_t> vocab_char_to_byte(char32_t cp);

// Decodes a vocabulary token spelling into raw bytes the way the ByteLevel decoder does: every
// character mapped through the table, or, when any character is outside it, the UTF-8 as is.
std::string byte_level_decode_token(std::string_view token);

}  // namespace ft::text
