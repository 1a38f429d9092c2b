#include "shared/grammar/ebnf.h"

#include <cctype>
#include <map>
#include <string>

#include "shared/grammar/codepoints.h"
#include "shared/grammar/regex.h"
#include "shared/text/utf8.h"

namespace ft::grammar {

namespace {

bool name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'; }

class EbnfParser {
 public:
  EbnfParser(Grammar& g, std::string_view s) : g_(g), s_(s) {}

  int32_t parse() {
    skip_space(true);
    if (pos_ >= s_.size()) fail("the grammar is empty");
    while (pos_ < s_.size()) {
      const size_t at = pos_;
      const std::string name = read_name();
      if (name.empty()) fail("expected a rule name");
      skip_space(true);
      if (s_.substr(pos_, 3) != "::=") fail("expected '::=' after '" + name + "'");
      pos_ += 3;
      const int32_t rule = rule_for(name);
      if (g_.rules()[size_t(rule)].body >= 0) fail_at(at, "rule '" + name + "' is defined twice");
      g_.define(rule, alternation());
      skip_space(true);
    }
    for (const auto& [name, r] : names_)
      if (g_.rules()[size_t(r)].body < 0) throw GrammarError("rule '" + name + "' is used but never defined");
    auto it = names_.find("root");
    if (it == names_.end()) throw GrammarError("the grammar has no 'root' rule");
    return it->second;
  }

 private:
  [[noreturn]] void fail_at(size_t at, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') ++line, col = 1;
      else ++col;
    }
    throw GrammarError("line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + what);
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }

  int32_t rule_for(const std::string& name) {
    auto it = names_.find(name);
    if (it != names_.end()) return it->second;
    const int32_t r = g_.add_rule(name);
    names_[name] = r;
    return r;
  }

  // Whitespace and comments; newlines only when `newlines` (inside parentheses, or between rules).
  void skip_space(bool newlines) {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) ++pos_;
      else if (c == '#') while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      else break;
    }
  }

  std::string read_name() {
    const size_t b = pos_;
    while (pos_ < s_.size() && name_char(s_[pos_])) ++pos_;
    return std::string(s_.substr(b, pos_ - b));
  }

  // The next line starts a new rule ("name ::=")?
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < s_.size() && name_char(s_[p])) ++p;
    if (p == pos_) return false;
    while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t')) ++p;
    return s_.substr(p, 3) == "::=";
  }

  // Inside a rule body newlines continue the rule unless the next line starts a rule.
  void skip_body_space() {
    for (;;) {
      skip_space(depth_ > 0);
      if (pos_ < s_.size() && s_[pos_] == '\n') {
        const size_t save = pos_;
        ++pos_;
        skip_space(true);
        if (pos_ >= s_.size() || at_rule_start()) {
          pos_ = save;
          return;
        }
        continue;
      }
      return;
    }
  }

  bool body_end() {
    skip_body_space();
    return pos_ >= s_.size() || s_[pos_] == '\n' || s_[pos_] == ')' || s_[pos_] == '|';
  }

  int32_t alternation() {
    std::vector<int32_t> alts{sequence()};
    while (pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      alts.push_back(sequence());
    }
    return g_.alt(std::move(alts));
  }

  int32_t sequence() {
    std::vector<int32_t> items;
    while (!body_end()) items.push_back(quantified(atom()));
    return g_.seq(std::move(items));
  }

  int32_t quantified(int32_t e) {
    for (;;) {
      if (pos_ >= s_.size()) return e;
      const char c = s_[pos_];
      if (c == '*') ++pos_, e = g_.star(e);
      else if (c == '+') ++pos_, e = g_.plus(e);
      else if (c == '?') ++pos_, e = g_.opt(e);
      else if (c == '{') e = braces(e);
      else return e;
    }
  }

  int32_t braces(int32_t e) {
    const size_t at = pos_++;
    auto number = [&](int64_t& v) {
      skip_space(false);
      const size_t b = pos_;
      v = 0;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') v = std::min<int64_t>(v * 10 + (s_[pos_++] - '0'), 1000000);
      return pos_ > b;
    };
    int64_t lo = 0, hi = 0;
    if (!number(lo)) fail_at(at, "expected a number after '{'");
    skip_space(false);
    if (pos_ < s_.size() && s_[pos_] == ',') {
      ++pos_;
      if (!number(hi)) hi = kUnbounded;
    } else {
      hi = lo;
    }
    skip_space(false);
    if (pos_ >= s_.size() || s_[pos_] != '}') fail_at(at, "unterminated '{'");
    ++pos_;
    try {
      return g_.repeat(e, int32_t(std::min<int64_t>(lo, kMaxRepeat + 1)), hi == kUnbounded ? kUnbounded : int32_t(std::min<int64_t>(hi, kMaxRepeat + 1)));
    } catch (const GrammarError& x) {
      fail_at(at, x.what());
    }
  }

  int32_t atom() {
    const size_t at = pos_;
    const char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      ++depth_;
      const int32_t e = alternation();
      --depth_;
      skip_body_space();
      if (pos_ >= s_.size() || s_[pos_] != ')') fail_at(at, "unbalanced '('");
      ++pos_;
      return e;
    }
    if (c == '"') return literal();
    if (c == '[') {
      try {
        return char_set_expr(g_, parse_char_class(s_, pos_), CharContext::Raw);
      } catch (const GrammarError& x) {
        fail_at(at, x.what());
      }
    }
    if (c == '.') {
      ++pos_;
      return char_set_expr(g_, CodepointSet::all(), CharContext::Raw);
    }
    if (c == '<') {
      const size_t close = s_.find('>', pos_ + 1);
      if (close == std::string_view::npos || s_.substr(pos_, close - pos_).find('\n') != std::string_view::npos)
        fail("unterminated token '<...>'");
      const std::string content(s_.substr(pos_, close + 1 - pos_));
      pos_ = close + 1;
      return g_.token(content);
    }
    if (name_char(c)) {
      const std::string name = read_name();
      return g_.ref(rule_for(name));
    }
    fail(std::string("unexpected '") + c + "'");
  }

  int32_t literal() {
    const size_t at = pos_++;
    std::string bytes;
    for (;;) {
      if (pos_ >= s_.size() || s_[pos_] == '\n') fail_at(at, "unterminated string literal");
      const char c = s_[pos_++];
      if (c == '"') break;
      if (c != '\\') {
        bytes += c;
        continue;
      }
      if (pos_ >= s_.size()) fail_at(at, "unterminated string literal");
      const char e = s_[pos_++];
      switch (e) {
        case 'n': bytes += '\n'; break;
        case 't': bytes += '\t'; break;
        case 'r': bytes += '\r'; break;
        case '\\': bytes += '\\'; break;
        case '"': bytes += '"'; break;
        case '[': bytes += '['; break;
        case ']': bytes += ']'; break;
        case 'x':
        case 'u':
        case 'U': {
          const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t v = 0;
          for (int i = 0; i < n; ++i) {
            if (pos_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[pos_]))) fail_at(pos_, "bad \\" + std::string(1, e) + " escape");
            const char h = s_[pos_++];
            v = v * 16 + uint32_t(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
          }
          if (v > kMaxCodepoint || (v >= 0xD800 && v <= 0xDFFF)) fail_at(at, "escape outside Unicode");
          text::append_utf8(bytes, char32_t(v));
          break;
        }
        default: fail_at(pos_ - 2, std::string("unknown escape \\") + e);
      }
    }
    return g_.literal(bytes);
  }

  Grammar& g_;
  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::map<std::string, int32_t> names_;
};

}  // namespace

int32_t ebnf_rule(Grammar& g, std::string_view text) { return EbnfParser(g, text).parse(); }

}  // namespace ft::grammar
