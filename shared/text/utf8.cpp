#include "shared/text/utf8.h"

#include <clocale>
#include <cwctype>
#include <locale.h>

namespace ft::text {

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// How many bytes of s starting at i form a valid prefix of some UTF-8 sequence, and the full
// length that sequence needs. Follows the Unicode table of well-formed byte sequences, which is
// what Rust (and the "maximal subpart" replacement rule) uses.
struct Prefix {
  size_t valid;   // bytes that are a valid prefix (>= 1 when the lead byte is valid)
  size_t needed;  // total length of the sequence (0 when the lead byte is invalid)
};

Prefix utf8_prefix(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {1, 1};
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {0, 0};
  }
  size_t k = 1;
  while (k < need && i + k < s.size()) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    const unsigned char l = (k == 1) ? lo : 0x80, h = (k == 1) ? hi : 0xBF;
    if (b < l || b > h) break;
    ++k;
  }
  return {k, need};
}

}  // namespace

size_t utf8_valid_seq_len(std::string_view s, size_t i) {
  const Prefix p = utf8_prefix(s, i);
  return (p.needed != 0 && p.valid == p.needed) ? p.needed : 0;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const Prefix p = utf8_prefix(bytes, i);
    if (p.needed != 0 && p.valid == p.needed) {
      out.append(bytes.substr(i, p.needed));
      i += p.needed;
    } else {
      out.append("\xEF\xBF\xBD");
      i += p.valid == 0 ? 1 : p.valid;
    }
  }
  return out;
}

size_t utf8_incomplete_tail(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t i = n - back;
    const auto b = static_cast<unsigned char>(s[i]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: look further back for the lead
    const Prefix p = utf8_prefix(s, i);
    if (p.needed > back && p.valid == back) return back;
    return 0;
  }
  return 0;
}

char32_t next_code_point(std::string_view s, size_t& i) {
  const size_t len = utf8_valid_seq_len(s, i);
  if (len == 0) {
    ++i;
    return 0xFFFD;
  }
  const auto b0 = static_cast<unsigned char>(s[i]);
  char32_t cp;
  if (len == 1) {
    cp = b0;
  } else if (len == 2) {
    cp = ((b0 & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
  } else if (len == 3) {
    cp = ((b0 & 0x0Fu) << 12) | ((static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 6) |
         (static_cast<unsigned char>(s[i + 2]) & 0x3Fu);
  } else {
    cp = ((b0 & 0x07u) << 18) | ((static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 12) |
         ((static_cast<unsigned char>(s[i + 2]) & 0x3Fu) << 6) |
         (static_cast<unsigned char>(s[i + 3]) & 0x3Fu);
  }
  i += len;
  return cp;
}

std::u32string utf8_to_u32(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) out.push_back(next_code_point(s, i));
  return out;
}

std::string u32_to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

bool py_isspace(char32_t c) {
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E:
    case 0x1F: case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

namespace {
// glibc's C.UTF-8 locale carries the Unicode character classes and case tables; the
// process-wide locale may be "C", so use an explicit one.
locale_t unicode_locale() {
  static locale_t loc = [] {
    locale_t l = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
    if (!l) l = newlocale(LC_CTYPE_MASK, "C.utf8", static_cast<locale_t>(0));
    return l;
  }();
  return loc;
}
}  // namespace

bool py_isalpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  locale_t l = unicode_locale();
  return l && iswalpha_l(static_cast<wint_t>(c), l) && !iswdigit_l(static_cast<wint_t>(c), l);
}
bool py_isdigit(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  locale_t l = unicode_locale();
  return l && iswdigit_l(static_cast<wint_t>(c), l);
}
bool py_isalnum(char32_t c) { return py_isalpha(c) || py_isdigit(c); }

bool py_isprintable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c < 0x7F) return true;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF || (c >= 0xD800 && c <= 0xF8FF) ||
      (c >= 0xFFF9 && c <= 0xFFFB) || c > 0x10FFFF)
    return false;
  return true;
}

char32_t py_toupper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  locale_t l = unicode_locale();
  return l ? static_cast<char32_t>(towupper_l(static_cast<wint_t>(c), l)) : c;
}
char32_t py_tolower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  locale_t l = unicode_locale();
  return l ? static_cast<char32_t>(towlower_l(static_cast<wint_t>(c), l)) : c;
}
bool py_isupper(char32_t c) { return py_tolower(c) != c; }
bool py_islower(char32_t c) { return py_toupper(c) != c; }

}  // namespace ft::text
