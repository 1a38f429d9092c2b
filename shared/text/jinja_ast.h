#pragma once
// Syntax tree of a parsed template. One node type per category keeps the interpreter a plain
// switch; the fields a kind uses are listed next to it.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shared/text/jinja_value.h"

namespace ft::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class K {
    Const,     // literal
    Name,      // name
    List,      // args
    Tuple,     // args
    Dict,      // args = k0, v0, k1, v1...
    GetAttr,   // a.name
    GetItem,   // a[b]
    Slice,     // args = start, stop, step (each may be null)
    Call,      // a(args, kwargs)
    Filter,    // a | name(args, kwargs); a is null inside a filter block chain head
    Test,      // a is name(args, kwargs)
    Neg,       // -a
    Pos,       // +a
    Not,       // not a
    Binary,    // a op b, op in + - * / // % ** and or
    Concat,    // args joined by ~
    Compare,   // a ops[i] args[i]...
    CondExpr,  // b if a else c (c may be null)
  };
  K kind;
  int line = 0;
  Value literal;
  std::string name;
  ExprPtr a, b, c;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  enum class K {
    Data,        // text
    Emit,        // {{ expr }}
    If,          // conds[i] -> bodies[i]; else_body
    For,         // target in expr [if cond]; body; else_body
    Set,         // target = expr
    SetBlock,    // target = rendered body, piped through filter (may be null)
    Macro,       // name(params) body
    CallBlock,   // expr (a call) with caller(params) = body
    FilterBlock, // filter chain (expr with null head) applied to body
    With,        // targets = values; body
    Break,
    Continue,
    Scope,       // body (e.g. {% generation %}): rendered in place
  };
  K kind;
  int line = 0;
  std::string text;
  ExprPtr expr, target, cond;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body body, else_body;
  std::vector<MacroParam> params;
  std::vector<ExprPtr> targets, values;
};

}  // namespace ft::jinja
