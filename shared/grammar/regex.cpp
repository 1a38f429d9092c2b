#include "shared/grammar/regex.h"

#include <string>

namespace ft::grammar {

namespace {

[[noreturn]] void fail(size_t at, const std::string& what) {
  throw GrammarError("at offset " + std::to_string(at) + ": " + what);
}

// Decodes the UTF-8 character at s[pos] (advancing pos); malformed bytes are an error.
char32_t next_char(std::string_view s, size_t& pos) {
  const unsigned char c = static_cast<unsigned char>(s[pos]);
  int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || pos + n > s.size()) fail(pos, "invalid UTF-8");
  char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (int i = 1; i < n; ++i) {
    const unsigned char d = static_cast<unsigned char>(s[pos + i]);
    if ((d & 0xC0) != 0x80) fail(pos, "invalid UTF-8");
    cp = (cp << 6) | (d & 0x3F);
  }
  pos += n;
  return cp;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

char32_t read_hex(std::string_view s, size_t& pos, int digits, size_t at) {
  char32_t v = 0;
  for (int i = 0; i < digits; ++i) {
    if (pos >= s.size() || hex_value(s[pos]) < 0) fail(at, "expected " + std::to_string(digits) + " hex digits");
    v = v * 16 + static_cast<char32_t>(hex_value(s[pos++]));
  }
  return v;
}

// One escape after '\' (pos is past the backslash). Returns the set it stands for.
CodepointSet escape(std::string_view s, size_t& pos, bool in_class) {
  const size_t at = pos - 1;
  if (pos >= s.size()) fail(at, "the pattern ends with a lone backslash");
  const char c = s[pos++];
  switch (c) {
    case 'd': return digit_class();
    case 'D': return digit_class().complement();
    case 'w': return word_class();
    case 'W': return word_class().complement();
    case 's': return space_class();
    case 'S': return space_class().complement();
    case 'n': return CodepointSet::of('\n');
    case 'r': return CodepointSet::of('\r');
    case 't': return CodepointSet::of('\t');
    case 'f': return CodepointSet::of('\f');
    case 'v': return CodepointSet::of('\v');
    case '0': return CodepointSet::of(0);
    case 'x': return CodepointSet::of(read_hex(s, pos, 2, at));
    case 'u': {
      if (pos < s.size() && s[pos] == '{') {
        ++pos;
        char32_t v = 0;
        int n = 0;
        while (pos < s.size() && hex_value(s[pos]) >= 0 && n < 7) v = v * 16 + char32_t(hex_value(s[pos++])), ++n;
        if (n == 0 || pos >= s.size() || s[pos] != '}' || v > kMaxCodepoint) fail(at, "malformed \\u{...} escape");
        ++pos;
        return CodepointSet::of(v);
      }
      const char32_t v = read_hex(s, pos, 4, at);
      if (v >= 0xD800 && v <= 0xDFFF) fail(at, "surrogate escapes (\\uD800-\\uDFFF) are not supported");
      return CodepointSet::of(v);
    }
    case 'b':
      if (in_class) return CodepointSet::of('\b');
      fail(at, "word boundaries (\\b) are not supported");
    case 'B': fail(at, "word boundaries (\\B) are not supported");
    case 'p':
    case 'P': fail(at, "Unicode property classes (\\p{...}) are not supported");
    case 'k': fail(at, "backreferences (\\k<name>) are not supported");
    case 'c': fail(at, "control escapes (\\cX) are not supported");
    default:
      if (c >= '1' && c <= '9') fail(at, "backreferences (\\" + std::string(1, c) + ") are not supported");
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) fail(at, "unknown escape \\" + std::string(1, c));
      --pos;
      return CodepointSet::of(next_char(s, pos));
  }
}

class RegexParser {
 public:
  RegexParser(Grammar& g, std::string_view s, CharContext ctx) : g_(g), s_(s), ctx_(ctx) {}

  int32_t parse() {
    size_t end = s_.size();
    if (pos_ < end && s_[pos_] == '^') ++pos_;
    // A trailing '$' that is not escaped ends the pattern.
    if (end > pos_ && s_[end - 1] == '$') {
      size_t bs = 0;
      while (end - 1 - bs > 0 && s_[end - 2 - bs] == '\\') ++bs;
      if (bs % 2 == 0) end_ = end - 1;
    }
    if (end_ == std::string_view::npos) end_ = end;
    const int32_t e = alternation();
    if (pos_ < end_) fail(pos_, s_[pos_] == ')' ? "unbalanced ')'" : "unexpected '" + std::string(1, s_[pos_]) + "'");
    return e;
  }

 private:
  bool at_end() const { return pos_ >= end_; }

  int32_t alternation() {
    std::vector<int32_t> alts{sequence()};
    while (!at_end() && s_[pos_] == '|') {
      ++pos_;
      alts.push_back(sequence());
    }
    return g_.alt(std::move(alts));
  }

  int32_t sequence() {
    std::vector<int32_t> items;
    while (!at_end() && s_[pos_] != '|' && s_[pos_] != ')') items.push_back(quantified(atom()));
    return g_.seq(std::move(items));
  }

  // {n}, {n,}, {n,m} at pos_ (which is '{'); false (pos_ unchanged) when it is a literal brace.
  bool bounds(int32_t& lo, int32_t& hi) {
    size_t p = pos_ + 1;
    auto number = [&](int64_t& v) {
      size_t b = p;
      v = 0;
      while (p < end_ && s_[p] >= '0' && s_[p] <= '9') {
        v = v * 10 + (s_[p++] - '0');
        if (v > 1000000) v = 1000000;
      }
      return p > b;
    };
    int64_t a = 0, b = -1;
    if (!number(a)) return false;
    if (p < end_ && s_[p] == ',') {
      ++p;
      if (!number(b)) b = -1;
    } else {
      b = a;
    }
    if (p >= end_ || s_[p] != '}') return false;
    if (b >= 0 && b < a) fail(pos_, "quantifier {" + std::to_string(a) + "," + std::to_string(b) + "} has max < min");
    if (a > kMaxRepeat || b > kMaxRepeat) fail(pos_, "repetition counts above " + std::to_string(kMaxRepeat) + " are not supported");
    lo = static_cast<int32_t>(a);
    hi = b < 0 ? kUnbounded : static_cast<int32_t>(b);
    pos_ = p + 1;
    return true;
  }

  int32_t quantified(int32_t e) {
    for (;;) {
      if (at_end()) return e;
      const char c = s_[pos_];
      int32_t lo = 0, hi = 0;
      if (c == '*') lo = 0, hi = kUnbounded, ++pos_;
      else if (c == '+') lo = 1, hi = kUnbounded, ++pos_;
      else if (c == '?') lo = 0, hi = 1, ++pos_;
      else if (c == '{' && bounds(lo, hi)) {
      } else return e;
      if (!at_end() && s_[pos_] == '?') ++pos_;  // lazy: the same strings
      else if (!at_end() && s_[pos_] == '+') fail(pos_, "possessive quantifiers are not supported");
      e = g_.repeat(e, lo, hi);
    }
  }

  int32_t atom() {
    const size_t at = pos_;
    const char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      if (pos_ < end_ && s_[pos_] == '?') {
        ++pos_;
        if (pos_ < end_ && s_[pos_] == ':') {
          ++pos_;
        } else if (pos_ < end_ && (s_[pos_] == '<' || s_[pos_] == 'P')) {
          if (s_[pos_] == 'P') ++pos_;
          if (pos_ + 1 < end_ && s_[pos_] == '<' && (s_[pos_ + 1] == '=' || s_[pos_ + 1] == '!'))
            fail(at, "lookbehind assertions are not supported");
          const size_t close = s_.find('>', pos_);
          if (close == std::string_view::npos || close >= end_) fail(at, "unterminated group name");
          pos_ = close + 1;
        } else if (pos_ < end_ && (s_[pos_] == '=' || s_[pos_] == '!')) {
          fail(at, "lookahead assertions are not supported");
        } else {
          fail(at, "inline flags and other (?...) groups are not supported");
        }
      }
      const int32_t e = alternation();
      if (at_end() || s_[pos_] != ')') fail(at, "unbalanced '('");
      ++pos_;
      return e;
    }
    if (c == '[') return g_chars(parse_char_class(s_.substr(0, end_), pos_));
    if (c == '.') {
      ++pos_;
      CodepointSet s = CodepointSet::all();
      for (char32_t x : {char32_t('\n'), char32_t('\r'), char32_t(0x2028), char32_t(0x2029)}) s.remove(x, x);
      return g_chars(s);
    }
    if (c == '\\') {
      ++pos_;
      return g_chars(escape(s_, pos_, false));
    }
    if (c == '^' || c == '$') fail(at, "anchors ('^', '$') are only supported at the start and end of the pattern");
    if (c == '*' || c == '+' || c == '?') fail(at, "nothing to repeat before '" + std::string(1, c) + "'");
    if (c == '{') {
      int32_t lo, hi;
      if (bounds(lo, hi)) fail(at, "nothing to repeat before '{'");
    }
    return g_chars(CodepointSet::of(next_char(s_, pos_)));
  }

  int32_t g_chars(const CodepointSet& s) { return char_set_expr(g_, s, ctx_); }

  Grammar& g_;
  std::string_view s_;
  CharContext ctx_;
  size_t pos_ = 0;
  size_t end_ = std::string_view::npos;
};

}  // namespace

CodepointSet parse_char_class(std::string_view s, size_t& pos) {
  const size_t at = pos;
  ++pos;  // '['
  bool negate = false;
  if (pos < s.size() && s[pos] == '^') negate = true, ++pos;
  CodepointSet set;
  for (;;) {
    if (pos >= s.size()) fail(at, "unterminated character class");
    if (s[pos] == ']') {  // as in ECMAScript, "[]" is the empty class and "[^]" any character
      ++pos;
      break;
    }
    // One item: a character, an escape, or a range of two characters.
    auto item = [&](bool& single, char32_t& cp) -> CodepointSet {
      if (s[pos] == '\\') {
        ++pos;
        CodepointSet e = escape(s, pos, true);
        single = e.ranges().size() == 1 && e.ranges()[0].first == e.ranges()[0].second;
        cp = single ? e.ranges()[0].first : 0;
        return e;
      }
      if (s[pos] == '[' && pos + 1 < s.size() && s[pos + 1] == ':') fail(pos, "POSIX classes ([:alpha:]) are not supported");
      single = true;
      cp = next_char(s, pos);
      return CodepointSet::of(cp);
    };
    bool single_a = false, single_b = false;
    char32_t a = 0, b = 0;
    CodepointSet first_item = item(single_a, a);
    if (single_a && pos + 1 < s.size() && s[pos] == '-' && s[pos + 1] != ']') {
      const size_t dash = pos;
      ++pos;
      CodepointSet second = item(single_b, b);
      if (!single_b) fail(dash, "a range needs a single character on each side");
      if (b < a) fail(dash, "character range out of order");
      set.add(a, b);
      continue;
    }
    set.add(first_item);
  }
  return negate ? set.complement() : set;
}

int32_t regex_expr(Grammar& g, std::string_view pattern, CharContext ctx) { return RegexParser(g, pattern, ctx).parse(); }

}  // namespace ft::grammar
