#include "shared/grammar/constraint.h"

#include <functional>

#include "shared/grammar/automaton.h"
#include "shared/grammar/codepoints.h"
#include "shared/grammar/ebnf.h"
#include "shared/grammar/json_schema.h"
#include "shared/grammar/matcher.h"
#include "shared/grammar/regex.h"

namespace ft::grammar {

namespace {

// Whether each rule derives some finite output, by fixpoint: a root that derives none would
// generate until max_tokens, so it is refused up front.
bool root_can_finish(const Grammar& g) {
  std::vector<uint8_t> ok(g.rules().size(), 0);
  std::function<bool(int32_t)> finite = [&](int32_t e) -> bool {
    const Expr& x = g.expr(e);
    switch (x.op) {
      case Op::Nothing: return false;
      case Op::Empty:
      case Op::Bytes:
      case Op::Token: return true;
      case Op::Ref: return ok[size_t(x.id)] != 0;
      case Op::Seq:
        for (int32_t k : x.kids)
          if (!finite(k)) return false;
        return true;
      case Op::Alt:
        for (int32_t k : x.kids)
          if (finite(k)) return true;
        return false;
      case Op::Repeat: return x.min == 0 || finite(x.kids[0]);
    }
    return false;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < g.rules().size(); ++r)
      if (!ok[r] && g.rules()[r].body >= 0 && finite(g.rules()[r].body)) ok[r] = 1, changed = true;
  }
  return ok[size_t(g.root)] != 0;
}

}  // namespace

Grammar compile_constraint(const ConstraintSource& s) {
  Grammar g;
  int32_t body = -1;
  switch (s.kind) {
    case ConstraintSource::Kind::None: throw GrammarError("no constraint given");
    case ConstraintSource::Kind::JsonSchema: body = g.ref(json_schema_rule(g, s.text)); break;
    case ConstraintSource::Kind::JsonObject: body = g.ref(json_object_rule(g)); break;
    case ConstraintSource::Kind::Regex: body = regex_expr(g, s.text, CharContext::Raw); break;
    case ConstraintSource::Kind::Ebnf: body = g.ref(ebnf_rule(g, s.text)); break;
    case ConstraintSource::Kind::ToolCalls: body = g.ref(tool_calls_rule(g, s.tools)); break;
  }
  const int32_t root = g.add_rule("output");
  if (s.after_reasoning) {
    const int32_t reasoning = g.star(char_set_expr(g, CodepointSet::all(), CharContext::Raw));
    g.define(root, g.seq({reasoning, g.token("</think>"), body}));
  } else {
    g.define(root, body);
  }
  g.root = root;
  if (!root_can_finish(g)) throw GrammarError("the constraint matches no finite output, so generation could never end");
  Pda::compile(g);  // undefined rules and left recursion are refused here, before any tokenizer is involved
  return g;
}

std::unique_ptr<TokenMatcher> make_matcher(const Grammar& g, std::shared_ptr<const Vocabulary> vocab) {
  return std::make_unique<Matcher>(Pda::compile(g), std::move(vocab));
}

}  // namespace ft::grammar
