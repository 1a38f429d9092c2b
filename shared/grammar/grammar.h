#pragma once
// The grammar every constraint compiles to (JSON Schema, regex, EBNF, GLM tool calls): named
// rules whose bodies are expressions over bytes and added tokens. It knows no tokenizer, so the
// gateway can check a constraint without one; automaton.h turns it into the byte-level pushdown
// automaton the matcher runs, and token_masks.h precomputes that automaton against a vocabulary.
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "shared/core/error.h"

namespace ft::grammar {

// A constraint that cannot be compiled. The message names the keyword, rule or position; callers
// prefix the request field ("constraint.json_schema: ...").
class GrammarError : public Error {
 public:
  using Error::Error;
};

// A set of byte values.
struct ByteSet {
  std::array<uint64_t, 4> w{};
  void set(uint8_t b) { w[b >> 6] |= uint64_t{1} << (b & 63); }
  void set_range(unsigned lo, unsigned hi) {
    for (unsigned b = lo; b <= hi && b < 256; ++b) set(static_cast<uint8_t>(b));
  }
  bool test(uint8_t b) const { return (w[b >> 6] >> (b & 63)) & 1; }
  bool empty() const { return (w[0] | w[1] | w[2] | w[3]) == 0; }
  ByteSet& operator|=(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) w[i] |= o.w[i];
    return *this;
  }
  bool operator==(const ByteSet& o) const { return w == o.w; }
  static ByteSet of(uint8_t b) {
    ByteSet s;
    s.set(b);
    return s;
  }
  static ByteSet range(unsigned lo, unsigned hi) {
    ByteSet s;
    s.set_range(lo, hi);
    return s;
  }
};

enum class Op : uint8_t {
  Nothing,  // matches no input at all (a `false` schema, an empty character class)
  Empty,    // matches the empty string
  Bytes,    // one byte of a set
  Token,    // one added token (by index into Grammar::tokens), never its text
  Ref,      // a rule
  Seq,
  Alt,
  Repeat,   // kids[0] between min and max times (max < 0: unbounded)
};

constexpr int32_t kUnbounded = -1;

struct Expr {
  Op op = Op::Empty;
  ByteSet bytes;              // Bytes
  int32_t id = -1;            // Token: index into Grammar::tokens; Ref: rule index
  int32_t min = 0, max = 0;   // Repeat
  std::vector<int32_t> kids;  // Seq, Alt, Repeat
};

// Bounds that keep a hostile constraint from exhausting the worker.
constexpr size_t kMaxExprs = 400000;
constexpr int32_t kMaxRepeat = 10000;

class Grammar {
 public:
  struct Rule {
    std::string name;
    int32_t body = -1;  // -1: declared, not defined yet
  };

  // Expression builders; each returns the new expression's id.
  int32_t nothing();
  int32_t empty();
  int32_t bytes(const ByteSet& s);  // an empty set is Nothing
  int32_t byte(uint8_t b) { return bytes(ByteSet::of(b)); }
  int32_t literal(std::string_view s);        // the bytes of s in order
  int32_t token(std::string_view content);    // the added token whose content this is
  int32_t ref(int32_t rule);
  int32_t seq(std::vector<int32_t> kids);     // flattens nested sequences, drops Empty
  int32_t alt(std::vector<int32_t> kids);     // drops Nothing
  int32_t repeat(int32_t e, int32_t min, int32_t max);  // throws GrammarError past kMaxRepeat
  int32_t opt(int32_t e) { return repeat(e, 0, 1); }
  int32_t star(int32_t e) { return repeat(e, 0, kUnbounded); }
  int32_t plus(int32_t e) { return repeat(e, 1, kUnbounded); }
  // An alternation of literal strings, factored by common prefixes (a 1000-value enum stays one
  // path per prefix instead of 1000 parallel ones).
  int32_t literals(const std::vector<std::string>& words);

  int32_t add_rule(std::string name);  // unique name (a suffix is added when taken)
  void define(int32_t rule, int32_t body);
  int32_t find_rule(std::string_view name) const;  // -1 when absent

  const Expr& expr(int32_t e) const { return exprs_[static_cast<size_t>(e)]; }
  const std::vector<Rule>& rules() const { return rules_; }
  const std::vector<std::string>& tokens() const { return tokens_; }
  size_t expr_count() const { return exprs_.size(); }

  int32_t root = -1;  // the rule the whole output must match

  // Rules shared by everything compiled into this grammar (JSON whitespace, strings, numbers…),
  // created once by name.
  int32_t shared_rule(const std::string& key);  // -1 when not made yet
  void set_shared_rule(const std::string& key, int32_t rule) { shared_[key] = rule; }

  // GBNF-like text of every rule, for messages and tests.
  std::string to_string() const;

 private:
  int32_t push(Expr e);
  std::string expr_text(int32_t e) const;
  std::vector<Expr> exprs_;
  std::vector<Rule> rules_;
  std::vector<std::string> tokens_;
  std::map<std::string, int32_t> shared_;
};

}  // namespace ft::grammar
