#include "shared/grammar/automaton.h"

#include <functional>
#include <unordered_map>

namespace ft::grammar {

namespace {

// Nullability of every expression (a rule is nullable when its body is), by fixpoint over the
// rules, and the rules an expression can reach before consuming any input.
class StartAnalysis {
 public:
  explicit StartAnalysis(const Grammar& g) : g_(g), rule_nullable_(g.rules().size(), 0) {
    for (bool changed = true; changed;) {
      changed = false;
      memo_.clear();
      for (size_t r = 0; r < g.rules().size(); ++r) {
        const int32_t b = g.rules()[r].body;
        if (!rule_nullable_[r] && b >= 0 && nullable(b)) rule_nullable_[r] = 1, changed = true;
      }
    }
  }

  bool nullable(int32_t e) {
    if (auto it = memo_.find(e); it != memo_.end()) return it->second;
    const Expr& x = g_.expr(e);
    bool n = false;
    switch (x.op) {
      case Op::Nothing: n = false; break;
      case Op::Empty: n = true; break;
      case Op::Bytes:
      case Op::Token: n = false; break;
      case Op::Ref: n = rule_nullable_[size_t(x.id)] != 0; break;
      case Op::Seq:
        n = true;
        for (int32_t k : x.kids) n = n && nullable(k);
        break;
      case Op::Alt:
        for (int32_t k : x.kids) n = n || nullable(k);
        break;
      case Op::Repeat: n = x.min == 0 || nullable(x.kids[0]); break;
    }
    memo_[e] = n;
    return n;
  }

  void first_rules(int32_t e, std::vector<int32_t>& out) {
    const Expr& x = g_.expr(e);
    switch (x.op) {
      case Op::Ref: out.push_back(x.id); break;
      case Op::Seq:
        for (int32_t k : x.kids) {
          first_rules(k, out);
          if (!nullable(k)) break;
        }
        break;
      case Op::Alt:
        for (int32_t k : x.kids) first_rules(k, out);
        break;
      case Op::Repeat: first_rules(x.kids[0], out); break;
      default: break;
    }
  }

 private:
  const Grammar& g_;
  std::vector<uint8_t> rule_nullable_;
  std::unordered_map<int32_t, bool> memo_;
};

void check_left_recursion(const Grammar& g) {
  StartAnalysis a(g);
  const size_t n = g.rules().size();
  std::vector<std::vector<int32_t>> first(n);
  for (size_t r = 0; r < n; ++r)
    if (g.rules()[r].body >= 0) a.first_rules(g.rules()[r].body, first[r]);
  // Depth-first search for a cycle; colour 1 = on the current path.
  std::vector<uint8_t> colour(n, 0);
  std::vector<int32_t> path;
  std::function<void(int32_t)> visit = [&](int32_t r) {
    colour[size_t(r)] = 1;
    path.push_back(r);
    for (int32_t s : first[size_t(r)]) {
      if (colour[size_t(s)] == 1) {
        std::string cycle;
        bool on = false;
        for (int32_t p : path) {
          on = on || p == s;
          if (on) cycle += g.rules()[size_t(p)].name + " -> ";
        }
        throw GrammarError("left recursion is not supported: " + cycle + g.rules()[size_t(s)].name);
      }
      if (colour[size_t(s)] == 0) visit(s);
    }
    path.pop_back();
    colour[size_t(r)] = 2;
  };
  for (size_t r = 0; r < n; ++r)
    if (colour[r] == 0) visit(int32_t(r));
}

}  // namespace

class PdaBuilder {
 public:
  PdaBuilder(const Grammar& g, Pda& p) : g_(g), p_(p) { p_.tokens_ = g.tokens(); }

  void build() {
    if (g_.root < 0 || size_t(g_.root) >= g_.rules().size()) throw GrammarError("the grammar has no root rule");
    rule_machine_.assign(g_.rules().size(), -1);
    p_.root_ = machine_for_rule(g_.root);
    while (!pending_.empty()) {
      auto [m, body] = pending_.back();
      pending_.pop_back();
      build_expr(body, p_.machines_[size_t(m)].start, p_.machines_[size_t(m)].end, m);
    }
    for (PdaNode& n : p_.nodes_)
      for (const PdaEdge& e : n.edges) n.consumes = n.consumes || e.kind == PdaEdge::Byte || e.kind == PdaEdge::Token;
  }

 private:
  int32_t node(int32_t machine) {
    if (p_.nodes_.size() >= kMaxNodes)
      throw GrammarError("the constraint is too large (more than " + std::to_string(kMaxNodes) + " automaton states)");
    p_.nodes_.push_back(PdaNode{{}, machine, false});
    return int32_t(p_.nodes_.size() - 1);
  }

  int32_t new_machine(std::string name, int32_t body) {
    const int32_t m = int32_t(p_.machines_.size());
    p_.machines_.push_back({-1, -1, std::move(name)});
    const int32_t s = node(m), e = node(m);
    p_.machines_[size_t(m)].start = s;
    p_.machines_[size_t(m)].end = e;
    pending_.emplace_back(m, body);
    return m;
  }

  int32_t machine_for_rule(int32_t rule) {
    if (rule_machine_[size_t(rule)] >= 0) return rule_machine_[size_t(rule)];
    const Grammar::Rule& r = g_.rules()[size_t(rule)];
    if (r.body < 0) throw GrammarError("rule '" + r.name + "' is used but never defined");
    return rule_machine_[size_t(rule)] = new_machine(r.name, r.body);
  }

  void edge(int32_t from, PdaEdge e) { p_.nodes_[size_t(from)].edges.push_back(e); }
  void eps(int32_t from, int32_t to) { edge(from, {PdaEdge::Epsilon, to, -1}); }

  int32_t byte_set(const ByteSet& s) {
    if (auto it = byte_set_index_.find(key(s)); it != byte_set_index_.end()) return it->second;
    p_.byte_sets_.push_back(s);
    return byte_set_index_[key(s)] = int32_t(p_.byte_sets_.size() - 1);
  }
  static std::string key(const ByteSet& s) { return std::string(reinterpret_cast<const char*>(s.w.data()), sizeof s.w); }

  // Expression tree size (not through references), to decide whether a repeated body is copied
  // inline or compiled once as its own machine.
  size_t size_of(int32_t e) {
    if (auto it = size_memo_.find(e); it != size_memo_.end()) return it->second;
    const Expr& x = g_.expr(e);
    size_t s = 1;
    for (int32_t k : x.kids) s += size_of(k);
    if (x.op == Op::Repeat) s *= size_t(std::max(1, x.max == kUnbounded ? x.min + 1 : x.max));
    return size_memo_[e] = std::min<size_t>(s, 1u << 30);
  }

  void build_expr(int32_t e, int32_t from, int32_t to, int32_t m) {
    const Expr& x = g_.expr(e);
    switch (x.op) {
      case Op::Nothing: return;
      case Op::Empty: eps(from, to); return;
      case Op::Bytes: edge(from, {PdaEdge::Byte, to, byte_set(x.bytes)}); return;
      case Op::Token: edge(from, {PdaEdge::Token, to, x.id}); return;
      case Op::Ref: edge(from, {PdaEdge::Call, to, machine_for_rule(x.id)}); return;
      case Op::Seq: {
        int32_t cur = from;
        for (size_t i = 0; i < x.kids.size(); ++i) {
          const int32_t next = i + 1 == x.kids.size() ? to : node(m);
          build_expr(x.kids[i], cur, next, m);
          cur = next;
        }
        return;
      }
      case Op::Alt:
        for (int32_t k : x.kids) {
          // Each alternative gets its own entry node so a loop inside one never leaks into another.
          const int32_t a = node(m);
          eps(from, a);
          build_expr(k, a, to, m);
        }
        return;
      case Op::Repeat: build_repeat(x, from, to, m); return;
    }
  }

  void build_repeat(const Expr& x, int32_t from, int32_t to, int32_t m) {
    const int32_t body = x.kids[0];
    const Expr& b = g_.expr(body);
    const int64_t copies = int64_t(x.min) + (x.max == kUnbounded ? 1 : int64_t(x.max) - x.min);
    // Large bodies repeated several times become one machine called each time: the automaton
    // grows with the body plus the count, not their product.
    int32_t callee = -1;
    if (b.op != Op::Bytes && b.op != Op::Token && b.op != Op::Ref && copies > 1 && size_of(body) * size_t(copies) > 256) {
      auto it = body_machine_.find(body);
      callee = it != body_machine_.end() ? it->second : (body_machine_[body] = new_machine(p_.machines_[size_t(m)].name + "/repeat", body));
    }
    auto one = [&](int32_t a, int32_t z) {
      if (callee >= 0) edge(a, {PdaEdge::Call, z, callee});
      else build_expr(body, a, z, m);
    };
    int32_t cur = node(m);
    eps(from, cur);
    for (int32_t i = 0; i < x.min; ++i) {
      const int32_t next = node(m);
      one(cur, next);
      cur = next;
    }
    if (x.max == kUnbounded) {
      const int32_t loop = node(m);
      eps(cur, loop);
      const int32_t back = node(m);
      one(loop, back);
      eps(back, loop);
      eps(loop, to);
      return;
    }
    eps(cur, to);
    for (int32_t i = x.min; i < x.max; ++i) {
      const int32_t next = node(m);
      one(cur, next);
      eps(next, to);
      cur = next;
    }
  }

  const Grammar& g_;
  Pda& p_;
  std::vector<int32_t> rule_machine_;
  std::unordered_map<int32_t, int32_t> body_machine_;
  std::unordered_map<int32_t, size_t> size_memo_;
  std::unordered_map<std::string, int32_t> byte_set_index_;
  std::vector<std::pair<int32_t, int32_t>> pending_;
};

std::shared_ptr<const Pda> Pda::compile(const Grammar& g) {
  check_left_recursion(g);
  auto p = std::make_shared<Pda>();
  PdaBuilder(g, *p).build();
  return p;
}

}  // namespace ft::grammar
