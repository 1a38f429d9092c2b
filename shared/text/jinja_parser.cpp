#include "shared/text/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include "shared/text/jinja_error.h"

namespace ft::jinja {

namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse_template() {
    Body body = subparse({});
    if (cur().type != Tok::Eof) fail("unexpected '" + cur().value + "'");
    return body;
  }

 private:
  // ---- token helpers
  const Token& cur() const { return t_[p_]; }
  const Token& look(size_t k = 1) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  void next() {
    if (p_ + 1 < t_.size()) ++p_;
  }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().value == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const std::string& msg) const { throw SyntaxError{msg, cur().line}; }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case Tok::Name:
      case Tok::Op: return "'" + t.value + "'";
      case Tok::String: return "string";
      default: return tok_name(t.type);
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail("expected a name, got " + describe(cur()));
    std::string n = cur().value;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) fail("expected end of statement block, got " + describe(cur()));
    next();
  }
  ExprPtr make(Expr::K k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = cur().line;
    return e;
  }

  // ---- statements

  // Parses until a "{% name" with name in `ends` (left current at that name) or the end.
  Body subparse(std::initializer_list<const char*> ends) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::Eof) {
        if (ends.size() != 0) {
          std::string list;
          for (const char* e : ends) list += (list.empty() ? "'" : " or '") + std::string(e) + "'";
          fail("unexpected end of template; jinja was looking for " + list);
        }
        return body;
      }
      if (t.type == Tok::Data) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::K::Data;
        s->line = t.line;
        s->text = t.value;
        body.push_back(std::move(s));
        next();
      } else if (t.type == Tok::VarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::K::Emit;
        s->line = cur().line;
        s->expr = parse_tuple(true, {}, false);
        if (cur().type != Tok::VarEnd) fail("expected end of print statement, got " + describe(cur()));
        next();
        body.push_back(std::move(s));
      } else if (t.type == Tok::BlockBegin) {
        next();
        if (cur().type == Tok::Name)
          for (const char* e : ends)
            if (cur().value == e) return body;
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(t));
      }
    }
  }

  // After a statement header: "%}" then the body up to one of `ends`; consumes the end tag
  // name when `drop` (and its "%}" when it is the only end).
  Body statements(std::initializer_list<const char*> ends, bool drop) {
    expect_block_end();
    Body b = subparse(ends);
    if (drop) next();
    return b;
  }

  StmtPtr new_stmt(Stmt::K k) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = cur().line;
    return s;
  }

  StmtPtr parse_statement() {
    if (cur().type != Tok::Name) fail("tag name expected");
    const std::string tag = cur().value;
    if (tag == "if") return parse_if();
    if (tag == "for") return parse_for();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "call") return parse_call_block();
    if (tag == "filter") return parse_filter_block();
    if (tag == "with") return parse_with();
    if (tag == "break" || tag == "continue") {
      auto s = new_stmt(tag == "break" ? Stmt::K::Break : Stmt::K::Continue);
      next();
      expect_block_end();
      return s;
    }
    if (tag == "generation") {
      auto s = new_stmt(Stmt::K::Scope);
      next();
      s->body = statements({"endgeneration"}, true);
      expect_block_end();
      return s;
    }
    fail("encountered unknown tag '" + tag + "'");
  }

  StmtPtr parse_if() {
    auto s = new_stmt(Stmt::K::If);
    next();  // if
    s->conds.push_back(parse_tuple(false, {}, false));
    s->bodies.push_back(statements({"elif", "else", "endif"}, false));
    while (true) {
      if (skip_name("elif")) {
        s->conds.push_back(parse_tuple(false, {}, false));
        s->bodies.push_back(statements({"elif", "else", "endif"}, false));
      } else if (skip_name("else")) {
        s->else_body = statements({"endif"}, true);
        break;
      } else {
        next();  // endif
        break;
      }
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_for() {
    auto s = new_stmt(Stmt::K::For);
    next();  // for
    s->target = parse_assign_target(true, {"in"});
    if (!skip_name("in")) fail("expected 'in', got " + describe(cur()));
    s->expr = parse_tuple(false, {"recursive"}, false);
    if (skip_name("if")) s->cond = parse_expression(true);
    if (is_name("recursive")) fail("recursive for loops are not supported");
    s->body = statements({"endfor", "else"}, false);
    if (skip_name("else")) {
      s->else_body = statements({"endfor"}, true);
    } else {
      next();  // endfor
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set() {
    next();  // set
    ExprPtr target = parse_assign_target(true, {}, true);
    if (skip_op("=")) {
      auto s = new_stmt(Stmt::K::Set);
      s->target = std::move(target);
      s->expr = parse_tuple(true, {}, false);
      expect_block_end();
      return s;
    }
    auto s = new_stmt(Stmt::K::SetBlock);
    s->target = std::move(target);
    if (is_op("|")) s->expr = parse_filter(nullptr, false);
    s->body = statements({"endset"}, true);
    expect_block_end();
    return s;
  }

  void parse_signature(std::vector<MacroParam>& params) {
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      MacroParam p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = parse_expression(true);
      params.push_back(std::move(p));
    }
    expect_op(")");
  }

  StmtPtr parse_macro() {
    auto s = new_stmt(Stmt::K::Macro);
    next();  // macro
    s->text = expect_name();
    parse_signature(s->params);
    s->body = statements({"endmacro"}, true);
    if (cur().type == Tok::Name) next();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = new_stmt(Stmt::K::CallBlock);
    next();  // call
    if (is_op("(")) parse_signature(s->params);
    s->expr = parse_expression(true);
    if (s->expr->kind != Expr::K::Call) fail("expected call");
    s->body = statements({"endcall"}, true);
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = new_stmt(Stmt::K::FilterBlock);
    next();  // filter
    s->expr = parse_filter(nullptr, true);
    s->body = statements({"endfilter"}, true);
    expect_block_end();
    return s;
  }

  StmtPtr parse_with() {
    auto s = new_stmt(Stmt::K::With);
    next();  // with
    while (cur().type != Tok::BlockEnd) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(parse_assign_target(true, {}));
      expect_op("=");
      s->values.push_back(parse_expression(true));
    }
    s->body = statements({"endwith"}, true);
    expect_block_end();
    return s;
  }

  ExprPtr parse_assign_target(bool with_tuple, std::initializer_list<const char*> extra_end,
                              bool with_namespace = false) {
    ExprPtr target;
    if (with_namespace && cur().type == Tok::Name && look().type == Tok::Op && look().value == ".") {
      auto ns = make(Expr::K::Name);
      ns->name = expect_name();
      next();  // .
      auto attr = make(Expr::K::GetAttr);
      attr->a = std::move(ns);
      attr->name = expect_name();
      return attr;
    }
    target = with_tuple ? parse_tuple(true, extra_end, false, /*simplified=*/true) : parse_primary();
    auto check = [&](const Expr& e) {
      if (e.kind != Expr::K::Name) fail("can't assign to this expression");
      if (e.name == "true" || e.name == "false" || e.name == "none" || e.name == "True" ||
          e.name == "False" || e.name == "None")
        fail("can't assign to constant '" + e.name + "'");
    };
    if (target->kind == Expr::K::Tuple) {
      for (auto& e : target->args) check(*e);
    } else {
      check(*target);
    }
    return target;
  }

  // ---- expressions

  bool tuple_end(std::initializer_list<const char*> extra) const {
    const Token& t = cur();
    if (t.type == Tok::VarEnd || t.type == Tok::BlockEnd || t.type == Tok::Eof) return true;
    if (t.type == Tok::Op && t.value == ")") return true;
    if (t.type == Tok::Name)
      for (const char* e : extra)
        if (t.value == e) return true;
    return false;
  }

  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<const char*> extra_end, bool explicit_parens,
                      bool simplified = false) {
    const int line = cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (tuple_end(extra_end)) break;
      if (simplified)
        args.push_back(parse_primary());
      else
        args.push_back(parse_expression(with_condexpr));
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) fail("expected an expression, got " + describe(cur()));
    }
    auto t = std::make_unique<Expr>();
    t->kind = Expr::K::Tuple;
    t->line = line;
    t->args = std::move(args);
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    ExprPtr e1 = parse_or();
    while (is_name("if")) {
      auto c = make(Expr::K::CondExpr);
      next();
      c->a = parse_or();
      c->b = std::move(e1);
      if (skip_name("else")) c->c = parse_condexpr();
      e1 = std::move(c);
    }
    return e1;
  }

  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = Expr::K::Binary;
    e->line = line;
    e->name = op;
    e->a = std::move(l);
    e->b = std::move(r);
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      const int line = cur().line;
      next();
      l = binary("or", std::move(l), parse_and(), line);
    }
    return l;
  }

  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      const int line = cur().line;
      next();
      l = binary("and", std::move(l), parse_not(), line);
    }
    return l;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      auto n = make(Expr::K::Not);
      next();
      n->a = parse_not();
      return n;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> rest;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::Op &&
          (t.value == "==" || t.value == "!=" || t.value == "<" || t.value == "<=" || t.value == ">" || t.value == ">=")) {
        ops.push_back(t.value);
        next();
      } else if (is_name("in")) {
        ops.push_back("in");
        next();
      } else if (is_name("not") && look().type == Tok::Name && look().value == "in") {
        ops.push_back("notin");
        next();
        next();
      } else {
        break;
      }
      rest.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto c = std::make_unique<Expr>();
    c->kind = Expr::K::Compare;
    c->line = line;
    c->a = std::move(first);
    c->ops = std::move(ops);
    c->args = std::move(rest);
    return c;
  }

  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = cur().value;
      const int line = cur().line;
      next();
      l = binary(op, std::move(l), parse_concat(), line);
    }
    return l;
  }

  ExprPtr parse_concat() {
    const int line = cur().line;
    std::vector<ExprPtr> args;
    args.push_back(parse_math2());
    while (skip_op("~")) args.push_back(parse_math2());
    if (args.size() == 1) return std::move(args[0]);
    auto c = std::make_unique<Expr>();
    c->kind = Expr::K::Concat;
    c->line = line;
    c->args = std::move(args);
    return c;
  }

  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = cur().value;
      const int line = cur().line;
      next();
      l = binary(op, std::move(l), parse_pow(), line);
    }
    return l;
  }

  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {
      const int line = cur().line;
      next();
      l = binary("**", std::move(l), parse_unary(true), line);
    }
    return l;
  }

  ExprPtr parse_unary(bool with_filter) {
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      auto u = make(is_op("-") ? Expr::K::Neg : Expr::K::Pos);
      next();
      u->a = parse_unary(false);
      node = std::move(u);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    if (t.type == Tok::Name) {
      auto e = make(Expr::K::Const);
      if (t.value == "true" || t.value == "True") {
        e->literal = Value(true);
      } else if (t.value == "false" || t.value == "False") {
        e->literal = Value(false);
      } else if (t.value == "none" || t.value == "None") {
        e->literal = Value::none();
      } else {
        e->kind = Expr::K::Name;
        e->name = t.value;
      }
      next();
      return e;
    }
    if (t.type == Tok::String) {
      auto e = make(Expr::K::Const);
      std::string buf;
      while (cur().type == Tok::String) {
        buf += cur().value;
        next();
      }
      e->literal = Value(std::move(buf));
      return e;
    }
    if (t.type == Tok::Int || t.type == Tok::Float) {
      auto e = make(Expr::K::Const);
      e->literal = t.type == Tok::Int ? Value(t.ival) : Value(t.fval);
      next();
      return e;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      auto e = make(Expr::K::List);
      next();
      while (!is_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("]")) break;
        e->args.push_back(parse_expression(true));
      }
      expect_op("]");
      return e;
    }
    if (is_op("{")) {
      auto e = make(Expr::K::Dict);
      next();
      while (!is_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("}")) break;
        e->args.push_back(parse_expression(true));
        expect_op(":");
        e->args.push_back(parse_expression(true));
      }
      expect_op("}");
      return e;
    }
    fail("unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter(std::move(node), false);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    if (skip_op(".")) {
      if (cur().type == Tok::Name) {
        auto e = make(Expr::K::GetAttr);
        e->a = std::move(node);
        e->name = cur().value;
        next();
        return e;
      }
      if (cur().type == Tok::Int) {
        auto e = make(Expr::K::GetItem);
        e->a = std::move(node);
        auto k = make(Expr::K::Const);
        k->literal = Value(cur().ival);
        e->b = std::move(k);
        next();
        return e;
      }
      fail("expected name or number after '.'");
    }
    expect_op("[");
    const int line = cur().line;
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto e = make(Expr::K::GetItem);
    e->a = std::move(node);
    if (args.size() == 1) {
      e->b = std::move(args[0]);
    } else {
      auto t = std::make_unique<Expr>();
      t->kind = Expr::K::Tuple;
      t->line = line;
      t->args = std::move(args);
      e->b = std::move(t);
    }
    return e;
  }

  ExprPtr parse_subscribed() {
    auto slice = make(Expr::K::Slice);
    if (skip_op(":")) {
      slice->args.push_back(nullptr);
    } else {
      ExprPtr node = parse_expression(true);
      if (!skip_op(":")) return node;
      slice->args.push_back(std::move(node));
    }
    if (is_op(":") || is_op("]") || is_op(","))
      slice->args.push_back(nullptr);
    else
      slice->args.push_back(parse_expression(true));
    if (skip_op(":")) {
      if (is_op("]") || is_op(","))
        slice->args.push_back(nullptr);
      else
        slice->args.push_back(parse_expression(true));
    } else {
      slice->args.push_back(nullptr);
    }
    return slice;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (!e.args.empty() || !e.kwargs.empty()) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) fail("*args / **kwargs in calls are not supported");
      if (cur().type == Tok::Name && look().type == Tok::Op && look().value == "=") {
        std::string key = cur().value;
        next();
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.kwargs.empty()) fail("positional argument after keyword argument");
        e.args.push_back(parse_expression(true));
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(Expr::K::Call);
    e->a = std::move(node);
    parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      auto f = make(Expr::K::Filter);
      f->name = expect_name();
      while (skip_op(".")) {
        f->name += '.';
        f->name += expect_name();
      }
      if (is_op("(")) parse_call_args(*f);
      f->a = std::move(node);
      node = std::move(f);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    next();  // is
    const bool negated = skip_name("not");
    auto t = make(Expr::K::Test);
    t->name = expect_name();
    while (skip_op(".")) {
      t->name += '.';
      t->name += expect_name();
    }
    t->a = std::move(node);
    const Token& c = cur();
    if (is_op("(")) {
      parse_call_args(*t);
    } else if ((c.type == Tok::Name || c.type == Tok::String || c.type == Tok::Int || c.type == Tok::Float ||
                is_op("[") || is_op("{")) &&
               !(c.type == Tok::Name && (c.value == "else" || c.value == "or" || c.value == "and"))) {
      if (is_name("is")) fail("you cannot chain multiple tests with is");
      t->args.push_back(parse_postfix(parse_primary()));
    }
    if (!negated) return t;
    auto n = std::make_unique<Expr>();
    n->kind = Expr::K::Not;
    n->line = t->line;
    n->a = std::move(t);
    return n;
  }

  std::vector<Token> t_;
  size_t p_ = 0;
};

}  // namespace

Body parse(std::vector<Token> tokens) { return Parser(std::move(tokens)).parse_template(); }

}  // namespace ft::jinja
