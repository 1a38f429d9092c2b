#include "shared/grammar/grammar.h"

#include <algorithm>
#include <cstdio>
#include <memory>

namespace ft::grammar {

namespace {
Expr make(Op op) {
  Expr e;
  e.op = op;
  return e;
}
}  // namespace

int32_t Grammar::push(Expr e) {
  if (exprs_.size() >= kMaxExprs)
    throw GrammarError("the constraint is too large (more than " + std::to_string(kMaxExprs) + " grammar expressions)");
  exprs_.push_back(std::move(e));
  return static_cast<int32_t>(exprs_.size() - 1);
}

int32_t Grammar::nothing() { return push(make(Op::Nothing)); }
int32_t Grammar::empty() { return push(make(Op::Empty)); }

int32_t Grammar::bytes(const ByteSet& s) {
  if (s.empty()) return nothing();
  Expr e = make(Op::Bytes);
  e.bytes = s;
  return push(std::move(e));
}

int32_t Grammar::literal(std::string_view s) {
  std::vector<int32_t> kids;
  kids.reserve(s.size());
  for (unsigned char c : s) kids.push_back(byte(c));
  return seq(std::move(kids));
}

int32_t Grammar::token(std::string_view content) {
  auto it = std::find(tokens_.begin(), tokens_.end(), content);
  int32_t id = static_cast<int32_t>(it - tokens_.begin());
  if (it == tokens_.end()) tokens_.emplace_back(content);
  Expr e = make(Op::Token);
  e.id = id;
  return push(std::move(e));
}

int32_t Grammar::ref(int32_t rule) {
  Expr e = make(Op::Ref);
  e.id = rule;
  return push(std::move(e));
}

int32_t Grammar::seq(std::vector<int32_t> kids) {
  std::vector<int32_t> flat;
  for (int32_t k : kids) {
    const Expr& x = expr(k);
    if (x.op == Op::Empty) continue;
    if (x.op == Op::Nothing) return nothing();
    if (x.op == Op::Seq) flat.insert(flat.end(), x.kids.begin(), x.kids.end());
    else flat.push_back(k);
  }
  if (flat.empty()) return empty();
  if (flat.size() == 1) return flat[0];
  Expr e = make(Op::Seq);
  e.kids = std::move(flat);
  return push(std::move(e));
}

int32_t Grammar::alt(std::vector<int32_t> kids) {
  std::vector<int32_t> flat;
  for (int32_t k : kids) {
    const Expr& x = expr(k);
    if (x.op == Op::Nothing) continue;
    if (x.op == Op::Alt) flat.insert(flat.end(), x.kids.begin(), x.kids.end());
    else flat.push_back(k);
  }
  if (flat.empty()) return nothing();
  if (flat.size() == 1) return flat[0];
  Expr e = make(Op::Alt);
  e.kids = std::move(flat);
  return push(std::move(e));
}

int32_t Grammar::repeat(int32_t k, int32_t min, int32_t max) {
  if (min < 0 || (max != kUnbounded && max < min))
    throw GrammarError("bad repetition {" + std::to_string(min) + "," + std::to_string(max) + "}");
  if (min > kMaxRepeat || max > kMaxRepeat)
    throw GrammarError("repetition counts above " + std::to_string(kMaxRepeat) + " are not supported");
  if (max == 0) return empty();
  if (min == 1 && max == 1) return k;
  const Expr& x = expr(k);
  if (x.op == Op::Empty) return empty();
  if (x.op == Op::Nothing) return min == 0 ? empty() : nothing();
  Expr e = make(Op::Repeat);
  e.kids = {k};
  e.min = min;
  e.max = max;
  return push(std::move(e));
}

int32_t Grammar::literals(const std::vector<std::string>& words) {
  struct Node {
    bool end = false;
    std::map<unsigned char, std::unique_ptr<Node>> kids;
  };
  Node root;
  for (const auto& w : words) {
    Node* n = &root;
    for (unsigned char c : w) {
      auto& k = n->kids[c];
      if (!k) k = std::make_unique<Node>();
      n = k.get();
    }
    n->end = true;
  }
  // Depth-first with an explicit stack would be tidier for huge enums; words are bounded by the
  // request size, and this recursion is as deep as the longest word.
  auto build = [&](auto& self, const Node& n) -> int32_t {
    std::vector<int32_t> alts;
    if (n.end) alts.push_back(empty());
    for (const auto& [c, k] : n.kids) alts.push_back(seq({byte(c), self(self, *k)}));
    return alt(std::move(alts));
  };
  return build(build, root);
}

int32_t Grammar::add_rule(std::string name) {
  std::string n = name;
  for (int i = 2; find_rule(n) >= 0; ++i) n = name + "-" + std::to_string(i);
  rules_.push_back({n, -1});
  return static_cast<int32_t>(rules_.size() - 1);
}

void Grammar::define(int32_t rule, int32_t body) { rules_.at(static_cast<size_t>(rule)).body = body; }

int32_t Grammar::find_rule(std::string_view name) const {
  for (size_t i = 0; i < rules_.size(); ++i)
    if (rules_[i].name == name) return static_cast<int32_t>(i);
  return -1;
}

int32_t Grammar::shared_rule(const std::string& key) {
  auto it = shared_.find(key);
  return it == shared_.end() ? -1 : it->second;
}

namespace {

std::string byte_text(unsigned b) {
  if (b == '\\' || b == ']' || b == '[' || b == '-' || b == '^' || b == '"') return std::string("\\") + char(b);
  if (b >= 0x20 && b < 0x7f) return std::string(1, char(b));
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02X", b);
  return buf;
}

}  // namespace

std::string Grammar::expr_text(int32_t id) const {
  const Expr& e = expr(id);
  switch (e.op) {
    case Op::Nothing: return "[]";
    case Op::Empty: return "\"\"";
    case Op::Bytes: {
      int count = 0, single = -1;
      for (int b = 0; b < 256; ++b)
        if (e.bytes.test(uint8_t(b))) ++count, single = b;
      if (count == 1) return "\"" + byte_text(unsigned(single)) + "\"";
      std::string s = "[";
      for (int b = 0; b < 256;) {
        if (!e.bytes.test(uint8_t(b))) {
          ++b;
          continue;
        }
        int c = b;
        while (c + 1 < 256 && e.bytes.test(uint8_t(c + 1))) ++c;
        s += byte_text(unsigned(b));
        if (c > b) s += "-" + byte_text(unsigned(c));
        b = c + 1;
      }
      return s + "]";
    }
    case Op::Token: return tokens_[static_cast<size_t>(e.id)];
    case Op::Ref: return rules_[static_cast<size_t>(e.id)].name;
    case Op::Seq: {
      std::string s;
      for (size_t i = 0; i < e.kids.size(); ++i) {
        if (i) s += " ";
        const Op k = expr(e.kids[i]).op;
        s += k == Op::Alt ? "(" + expr_text(e.kids[i]) + ")" : expr_text(e.kids[i]);
      }
      return s;
    }
    case Op::Alt: {
      std::string s;
      for (size_t i = 0; i < e.kids.size(); ++i) s += (i ? " | " : "") + expr_text(e.kids[i]);
      return s;
    }
    case Op::Repeat: {
      const Op k = expr(e.kids[0]).op;
      std::string s = (k == Op::Seq || k == Op::Alt) ? "(" + expr_text(e.kids[0]) + ")" : expr_text(e.kids[0]);
      if (e.min == 0 && e.max == kUnbounded) return s + "*";
      if (e.min == 1 && e.max == kUnbounded) return s + "+";
      if (e.min == 0 && e.max == 1) return s + "?";
      if (e.max == kUnbounded) return s + "{" + std::to_string(e.min) + ",}";
      if (e.min == e.max) return s + "{" + std::to_string(e.min) + "}";
      return s + "{" + std::to_string(e.min) + "," + std::to_string(e.max) + "}";
    }
  }
  return "?";
}

std::string Grammar::to_string() const {
  std::string out;
  for (size_t r = 0; r < rules_.size(); ++r)
    out += rules_[r].name + " ::= " + (rules_[r].body >= 0 ? expr_text(rules_[r].body) : "<undefined>") + "\n";
  return out;
}

}  // namespace ft::grammar
