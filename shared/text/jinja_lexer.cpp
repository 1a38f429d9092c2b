#include "shared/text/jinja_lexer.h"

#include <cstring>

#include "shared/text/jinja_error.h"
#include "shared/text/utf8.h"

namespace ft::jinja {

const char* tok_name(Tok t) {
  switch (t) {
    case Tok::Data: return "template data";
    case Tok::VarBegin: return "'{{'";
    case Tok::VarEnd: return "'}}'";
    case Tok::BlockBegin: return "'{%'";
    case Tok::BlockEnd: return "'%}'";
    case Tok::Name: return "name";
    case Tok::String: return "string";
    case Tok::Int: return "integer";
    case Tok::Float: return "float";
    case Tok::Op: return "operator";
    case Tok::Eof: return "end of template";
  }
  return "?";
}

namespace {

bool is_py_space_at(std::string_view s, size_t i, size_t& len) {
  size_t k = i;
  const char32_t c = text::next_code_point(s, k);
  len = k - i;
  return text::py_isspace(c);
}

// Python str.rstrip() (Unicode whitespace).
std::string_view rstrip_ws(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t len;
    if (!is_py_space_at(s, start, len)) break;
    end = start;
  }
  return s.substr(0, end);
}

// Length of the run of Unicode whitespace starting at i.
size_t skip_ws(std::string_view s, size_t i) {
  size_t j = i;
  while (j < s.size()) {
    size_t len;
    if (!is_py_space_at(s, j, len)) break;
    j += len;
  }
  return j - i;
}

bool all_ws(std::string_view s) { return !s.empty() && skip_ws(s, 0) == s.size(); }

int count_nl(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// Decodes a Python string literal body with the "unicode-escape" codec rules jinja2 applies.
std::string unescape(std::string_view body, int line) {
  std::string out;
  out.reserve(body.size());
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out.push_back(c);
      continue;
    }
    const char n = body[++i];
    auto hex = [&](size_t digits) -> char32_t {
      char32_t v = 0;
      for (size_t k = 1; k <= digits; ++k) {
        if (i + k >= body.size()) throw SyntaxError{"truncated escape in string literal", line};
        const char h = body[i + k];
        v <<= 4;
        if (h >= '0' && h <= '9') v |= static_cast<char32_t>(h - '0');
        else if (h >= 'a' && h <= 'f') v |= static_cast<char32_t>(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F') v |= static_cast<char32_t>(h - 'A' + 10);
        else throw SyntaxError{"invalid escape in string literal", line};
      }
      i += digits;
      return v;
    };
    switch (n) {
      case '\n': break;  // line continuation
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'v': out.push_back('\v'); break;
      case 'x': text::append_utf8(out, hex(2)); break;
      case 'u': text::append_utf8(out, hex(4)); break;
      case 'U': text::append_utf8(out, hex(8)); break;
      default:
        if (n >= '0' && n <= '7') {
          char32_t v = static_cast<char32_t>(n - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
            v = v * 8 + static_cast<char32_t>(body[++i] - '0');
          text::append_utf8(out, v);
        } else {
          out.push_back('\\');
          out.push_back(n);
        }
    }
  }
  return out;
}

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (c & 0x80); }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  explicit Lexer(std::string_view src) {
    // Newlines normalized and one trailing newline dropped (keep_trailing_newline=False).
    src_.reserve(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      if (src[i] == '\r') {
        src_.push_back('\n');
        if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
      } else {
        src_.push_back(src[i]);
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    const std::string_view s = src_;
    bool line_starting = true;
    while (pos_ < s.size()) {
      size_t tag = find_tag(pos_);
      if (tag == std::string_view::npos) {
        emit_data(s.substr(pos_));
        pos_ = s.size();
        break;
      }
      std::string_view text = s.substr(pos_, tag - pos_);
      const char kind = s[tag + 1];
      char sign = 0;
      if (tag + 2 < s.size() && (s[tag + 2] == '-' || s[tag + 2] == '+')) sign = s[tag + 2];
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: drop the indentation before a block or comment tag that starts a line.
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && all_ws(text.substr(l_pos))) text = text.substr(0, l_pos);
      }
      emit_data(text);
      line_ += count_nl(s.substr(pos_, tag - pos_));
      pos_ = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        line_starting = lex_comment();
      } else if (kind == '%' && lex_raw()) {
        line_starting = last_end_newline_;
      } else {
        line_starting = lex_tag(kind == '{');
      }
    }
    out_.push_back({Tok::Eof, "", line_});
    return std::move(out_);
  }

 private:
  size_t find_tag(size_t from) const {
    const std::string_view s = src_;
    for (size_t i = s.find('{', from); i != std::string_view::npos; i = s.find('{', i + 1)) {
      if (i + 1 < s.size() && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')) return i;
    }
    return std::string_view::npos;
  }

  void emit_data(std::string_view text) {
    if (!text.empty()) out_.push_back({Tok::Data, std::string(text), line_});
  }

  // After "{#": skips to the end marker; returns whether the consumed end ends with a newline.
  bool lex_comment() {
    const std::string_view s = src_;
    const size_t end = s.find("#}", pos_);
    if (end == std::string_view::npos) throw SyntaxError{"missing end of comment tag", line_};
    line_ += count_nl(s.substr(pos_, end - pos_));
    size_t after = end + 2;
    const char mod = end > pos_ ? s[end - 1] : 0;
    if (mod == '-') {
      after += skip_ws(s, after);
    } else if (mod != '+' && after < s.size() && s[after] == '\n') {
      ++after;  // trim_blocks
    }
    line_ += count_nl(s.substr(end, after - end));
    pos_ = after;
    return after > 0 && s[after - 1] == '\n';
  }

  // "{% raw %}...{% endraw %}" becomes one data token. Returns false when the tag is not raw.
  bool lex_raw() {
    const std::string_view s = src_;
    size_t p = pos_ + skip_ws(s, pos_);
    if (s.compare(p, 3, "raw") != 0 || (p + 3 < s.size() && is_name_char(s[p + 3]))) return false;
    p += 3;
    p += skip_ws(s, p);
    if (s.compare(p, 3, "-%}") == 0) {
      p += 3;
      p += skip_ws(s, p);
    } else if (s.compare(p, 2, "%}") == 0) {
      p += 2;
    } else {
      return false;
    }
    // Find "{%[-+]? endraw [-+]?%}".
    for (size_t i = s.find("{%", p); i != std::string_view::npos; i = s.find("{%", i + 1)) {
      size_t q = i + 2;
      char sign = 0;
      if (q < s.size() && (s[q] == '-' || s[q] == '+')) sign = s[q++];
      q += skip_ws(s, q);
      if (s.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      q += skip_ws(s, q);
      size_t end;
      if (s.compare(q, 3, "-%}") == 0) {
        end = q + 3 + skip_ws(s, q + 3);
      } else if (s.compare(q, 3, "+%}") == 0) {
        end = q + 3;
      } else if (s.compare(q, 2, "%}") == 0) {
        end = q + 2;
        if (end < s.size() && s[end] == '\n') ++end;
      } else {
        continue;
      }
      std::string_view body = s.substr(p, i - p);
      if (sign == '-') {
        body = rstrip_ws(body);
      } else if (sign != '+') {
        const size_t nl = body.rfind('\n');
        const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if (l_pos > 0 && all_ws(body.substr(l_pos))) body = body.substr(0, l_pos);
      }
      emit_data(body);
      line_ += count_nl(s.substr(pos_, end - pos_));
      pos_ = end;
      last_end_newline_ = end > 0 && s[end - 1] == '\n';
      return true;
    }
    throw SyntaxError{"missing end of raw directive", line_};
  }

  // Lexes the inside of "{{" or "{%" up to and including its end marker. Returns whether the
  // consumed end marker ends with a newline.
  bool lex_tag(bool variable) {
    const std::string_view s = src_;
    out_.push_back({variable ? Tok::VarBegin : Tok::BlockBegin, "", line_});
    std::vector<char> balance;
    while (true) {
      if (pos_ >= s.size()) throw SyntaxError{variable ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'", line_};
      if (balance.empty()) {
        if (variable) {
          if (s.compare(pos_, 3, "-}}") == 0) {
            size_t after = pos_ + 3;
            after += skip_ws(s, after);
            return finish_end(Tok::VarEnd, after);
          }
          if (s.compare(pos_, 2, "}}") == 0) return finish_end(Tok::VarEnd, pos_ + 2);
        } else {
          if (s.compare(pos_, 3, "+%}") == 0) return finish_end(Tok::BlockEnd, pos_ + 3);
          if (s.compare(pos_, 3, "-%}") == 0) {
            size_t after = pos_ + 3;
            after += skip_ws(s, after);
            return finish_end(Tok::BlockEnd, after);
          }
          if (s.compare(pos_, 2, "%}") == 0) {
            size_t after = pos_ + 2;
            if (after < s.size() && s[after] == '\n') ++after;  // trim_blocks
            return finish_end(Tok::BlockEnd, after);
          }
        }
      }
      const char c = s[pos_];
      size_t wlen;
      if (is_py_space_at(s, pos_, wlen)) {
        if (c == '\n') ++line_;
        pos_ += wlen;
        continue;
      }
      if (is_digit(c)) {
        lex_number();
        continue;
      }
      if (is_name_start(c)) {
        size_t e = pos_;
        while (e < s.size() && is_name_char(s[e])) ++e;
        out_.push_back({Tok::Name, std::string(s.substr(pos_, e - pos_)), line_});
        pos_ = e;
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t e = pos_ + 1;
        while (e < s.size() && s[e] != c) {
          if (s[e] == '\\') ++e;
          ++e;
        }
        if (e >= s.size()) throw SyntaxError{"unterminated string literal", line_};
        const int start_line = line_;
        line_ += count_nl(s.substr(pos_, e - pos_));
        out_.push_back({Tok::String, unescape(s.substr(pos_ + 1, e - pos_ - 1), start_line), start_line});
        pos_ = e + 1;
        continue;
      }
      static const char* const two[] = {"//", "**", "==", "!=", ">=", "<="};
      std::string op;
      for (const char* t : two)
        if (s.compare(pos_, 2, t) == 0) op = t;
      if (op.empty()) {
        if (!std::strchr("+-/*%~[](){}><=.:|,;", c)) throw SyntaxError{std::string("unexpected char '") + c + "'", line_};
        op = std::string(1, c);
      }
      if (op == "(" || op == "[" || op == "{") {
        balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
      } else if (op == ")" || op == "]" || op == "}") {
        if (balance.empty()) throw SyntaxError{"unexpected '" + op + "'", line_};
        if (balance.back() != op[0])
          throw SyntaxError{"unexpected '" + op + "', expected '" + std::string(1, balance.back()) + "'", line_};
        balance.pop_back();
      }
      out_.push_back({Tok::Op, op, line_});
      pos_ += op.size();
    }
  }

  bool finish_end(Tok t, size_t after) {
    line_ += count_nl(std::string_view(src_).substr(pos_, after - pos_));
    out_.push_back({t, "", line_});
    pos_ = after;
    return after > 0 && src_[after - 1] == '\n';
  }

  void lex_number() {
    const std::string_view s = src_;
    size_t e = pos_;
    auto digits = [&](size_t& k) {
      const size_t b = k;
      while (k < s.size() && (is_digit(s[k]) || (s[k] == '_' && k + 1 < s.size() && is_digit(s[k + 1]) && k > b))) ++k;
      return k > b;
    };
    // A number right after '.' is an attribute index (`x.0.y`): never a float.
    const bool after_dot = pos_ > 0 && s[pos_ - 1] == '.';
    if (s[e] == '0' && e + 1 < s.size() && std::strchr("bBoOxX", s[e + 1])) {
      const int base = (s[e + 1] == 'b' || s[e + 1] == 'B') ? 2 : (s[e + 1] == 'o' || s[e + 1] == 'O') ? 8 : 16;
      size_t k = e + 2;
      std::string d;
      while (k < s.size() && (std::isxdigit(static_cast<unsigned char>(s[k])) || s[k] == '_')) {
        if (s[k] != '_') d.push_back(s[k]);
        ++k;
      }
      out_.push_back({Tok::Int, std::string(s.substr(pos_, k - pos_)), line_, std::stoll(d, nullptr, base)});
      pos_ = k;
      return;
    }
    digits(e);
    bool is_float = false;
    size_t k = e;
    if (!after_dot) {
      if (k + 1 < s.size() && s[k] == '.' && is_digit(s[k + 1])) {
        ++k;
        digits(k);
        is_float = true;
      }
      if (k < s.size() && (s[k] == 'e' || s[k] == 'E')) {
        size_t x = k + 1;
        if (x < s.size() && (s[x] == '+' || s[x] == '-')) ++x;
        if (x < s.size() && is_digit(s[x])) {
          digits(x);
          k = x;
          is_float = true;
        }
      }
    }
    std::string text;
    for (size_t i = pos_; i < k; ++i)
      if (s[i] != '_') text.push_back(s[i]);
    Token t{is_float ? Tok::Float : Tok::Int, std::string(s.substr(pos_, k - pos_)), line_};
    if (is_float)
      t.fval = std::stod(text);
    else
      t.ival = std::stoll(text);
    out_.push_back(std::move(t));
    pos_ = k;
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool last_end_newline_ = false;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> lex(std::string_view source) { return Lexer(source).run(); }

}  // namespace ft::jinja
