#include "shared/text/jinja_interpreter.h"

#include <cmath>

#include "shared/text/jinja_builtins.h"
#include "shared/text/utf8.h"

namespace ft::jinja {

const Value* Scope::lookup(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

namespace {

[[noreturn]] void raise_undefined(const Value& v) { raise(v.undefined_reason()); }

std::string obj_desc(const Value& v) { return "'" + type_name(v) + " object'"; }

// Python's floor division and modulo (result takes the divisor's sign).
int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

std::string printf_format(const std::string& fmt, const Value& args) {
  List vals = args.kind() == Kind::Tuple ? args.items() : List{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) raise("incomplete format");
    if (fmt[i] == '%') {
      out.push_back('%');
      continue;
    }
    if (next >= vals.size()) raise("not enough arguments for format string");
    const Value& v = vals[next++];
    switch (fmt[i]) {
      case 's': out += to_str(v); break;
      case 'r': out += repr(v); break;
      case 'd':
      case 'i':
        if (!v.is_number()) raise("%d format: a real number is required, not " + type_name(v));
        out += std::to_string(v.kind() == Kind::Float ? static_cast<int64_t>(v.as_float()) : v.as_int());
        break;
      case 'f': {
        if (!v.is_number()) raise("%f format: a real number is required, not " + type_name(v));
        char b[64];
        std::snprintf(b, sizeof b, "%f", v.as_float());
        out += b;
        break;
      }
      default: raise(std::string("unsupported format character '") + fmt[i] + "'");
    }
  }
  if (next < vals.size() && args.kind() == Kind::Tuple) raise("not all arguments converted during string formatting");
  return out;
}

}  // namespace

bool contains(const Value& c, const Value& item) {
  switch (c.kind()) {
    case Kind::String:
      if (!item.is_string()) raise("'in <string>' requires string as left operand, not " + type_name(item));
      return c.str().find(item.str()) != std::string::npos;
    case Kind::List:
    case Kind::Tuple:
      for (const Value& v : c.items())
        if (py_equal(v, item)) return true;
      return false;
    case Kind::Dict: return c.map().find(item) != nullptr;
    case Kind::Undefined: return false;
    default: raise("argument of type '" + type_name(c) + "' is not iterable");
  }
}

void Interpreter::render(const Body& body, const std::shared_ptr<Scope>& context, std::string& out) {
  exec(body, context, out);
}

Interpreter::Flow Interpreter::exec(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out) {
  for (const StmtPtr& sp : body) {
    const Stmt& s = *sp;
    line_ = s.line;
    switch (s.kind) {
      case Stmt::K::Data: out += s.text; break;
      case Stmt::K::Emit: {
        const Value v = eval(*s.expr, scope);
        if (v.is_string())
          out += v.str();
        else
          out += to_str(v);
        break;
      }
      case Stmt::K::If: {
        bool done = false;
        for (size_t i = 0; i < s.conds.size() && !done; ++i) {
          line_ = s.conds[i]->line;
          if (truthy(eval(*s.conds[i], scope))) {
            done = true;
            const Flow f = exec(s.bodies[i], scope, out);
            if (f != Flow::Normal) return f;
          }
        }
        if (!done) {
          const Flow f = exec(s.else_body, scope, out);
          if (f != Flow::Normal) return f;
        }
        break;
      }
      case Stmt::K::For: {
        exec_for(s, scope, out);
        break;
      }
      case Stmt::K::Set: assign(*s.target, eval(*s.expr, scope), scope); break;
      case Stmt::K::SetBlock: {
        std::string captured;
        exec(s.body, std::make_shared<Scope>(scope), captured);
        Value v(std::move(captured));
        if (s.expr) v = eval_filter_chain(*s.expr, scope, v);
        assign(*s.target, std::move(v), scope);
        break;
      }
      case Stmt::K::Macro: scope->vars[s.text] = make_macro(s, scope); break;
      case Stmt::K::CallBlock: {
        auto caller = std::make_shared<Function>();
        caller->name = "caller";
        caller->is_macro = true;
        const Stmt* def = &s;
        std::shared_ptr<Scope> closure = scope;
        caller->call = [this, def, closure](Interpreter&, CallArgs& args) -> Value {
          auto local = std::make_shared<Scope>(closure);
          for (size_t i = 0; i < def->params.size(); ++i) {
            const MacroParam& p = def->params[i];
            auto v = args.get(i, p.name);
            local->vars[p.name] = v ? *v : p.default_value ? eval(*p.default_value, local) : Value::undefined("parameter '" + p.name + "' was not provided");
          }
          std::string captured;
          exec(def->body, local, captured);
          return Value(std::move(captured));
        };
        const Expr& call = *s.expr;
        const Value callee = eval(*call.a, scope);
        CallArgs args;
        eval_args(call, scope, args);
        args.keyword.emplace_back("caller", Value::function(caller));
        out += to_str(this->call(callee, args));
        break;
      }
      case Stmt::K::FilterBlock: {
        std::string captured;
        exec(s.body, std::make_shared<Scope>(scope), captured);
        out += to_str(eval_filter_chain(*s.expr, scope, Value(std::move(captured))));
        break;
      }
      case Stmt::K::With: {
        auto inner = std::make_shared<Scope>(scope);
        for (size_t i = 0; i < s.targets.size(); ++i) assign(*s.targets[i], eval(*s.values[i], inner), inner);
        const Flow f = exec(s.body, inner, out);
        if (f != Flow::Normal) return f;
        break;
      }
      case Stmt::K::Break: return Flow::Break;
      case Stmt::K::Continue: return Flow::Continue;
      case Stmt::K::Scope: {
        const Flow f = exec(s.body, scope, out);
        if (f != Flow::Normal) return f;
        break;
      }
    }
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out) {
  const Value seq = eval(*s.expr, scope);
  List items = iterate(seq);
  if (s.cond) {
    // The filter sees the loop target but not `loop` (jinja2 evaluates it in its own frame).
    List kept;
    for (Value& item : items) {
      auto test_scope = std::make_shared<Scope>(scope);
      assign(*s.target, item, test_scope);
      if (truthy(eval(*s.cond, test_scope))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec(s.else_body, std::make_shared<Scope>(scope), out);
    return Flow::Normal;
  }
  const size_t n = items.size();
  auto changed_state = std::make_shared<std::optional<Value>>();
  for (size_t i = 0; i < n; ++i) {
    // Each iteration gets a fresh frame: a `set` inside the body never survives to the next
    // iteration nor leaks out of the loop (jinja2 re-enters the loop frame every iteration).
    auto iter = std::make_shared<Scope>(scope);
    assign(*s.target, items[i], iter);
    auto loop = std::make_shared<Dict>();
    loop->set(Value("index"), Value(static_cast<int64_t>(i + 1)));
    loop->set(Value("index0"), Value(static_cast<int64_t>(i)));
    loop->set(Value("revindex"), Value(static_cast<int64_t>(n - i)));
    loop->set(Value("revindex0"), Value(static_cast<int64_t>(n - i - 1)));
    loop->set(Value("first"), Value(i == 0));
    loop->set(Value("last"), Value(i + 1 == n));
    loop->set(Value("length"), Value(static_cast<int64_t>(n)));
    loop->set(Value("depth"), Value(1));
    loop->set(Value("depth0"), Value(0));
    loop->set(Value("previtem"), i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
    loop->set(Value("nextitem"), i + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
    auto cycle = std::make_shared<Function>();
    cycle->name = "cycle";
    cycle->call = [i](Interpreter&, CallArgs& a) -> Value {
      if (a.positional.empty()) raise("no items for cycling given");
      return a.positional[i % a.positional.size()];
    };
    loop->set(Value("cycle"), Value::function(cycle));
    auto changed = std::make_shared<Function>();
    changed->name = "changed";
    changed->call = [changed_state](Interpreter&, CallArgs& a) -> Value {
      Value cur = Value::tuple(a.positional);
      if (*changed_state && py_equal(**changed_state, cur)) return Value(false);
      *changed_state = cur;
      return Value(true);
    };
    loop->set(Value("changed"), Value::function(changed));
    iter->vars["loop"] = Value::namespace_(loop);
    const Flow f = exec(s.body, iter, out);
    if (f == Flow::Break) break;
  }
  return Flow::Normal;
}

void Interpreter::assign(const Expr& target, Value v, const std::shared_ptr<Scope>& scope) {
  switch (target.kind) {
    case Expr::K::Name: scope->vars[target.name] = std::move(v); return;
    case Expr::K::Tuple: {
      if (v.is_undefined()) raise_undefined(v);
      const List items = iterate(v);
      if (items.size() != target.args.size())
        raise(items.size() > target.args.size() ? "too many values to unpack (expected " + std::to_string(target.args.size()) + ")"
                                                : "not enough values to unpack (expected " + std::to_string(target.args.size()) +
                                                      ", got " + std::to_string(items.size()) + ")");
      for (size_t i = 0; i < items.size(); ++i) assign(*target.args[i], items[i], scope);
      return;
    }
    case Expr::K::GetAttr: {
      const Value* ns = scope->lookup(target.a->name);
      if (!ns || ns->kind() != Kind::Namespace)
        raise("cannot assign attribute on non-namespace object '" + target.a->name + "'");
      ns->map_mut().set(Value(target.name), std::move(v));
      return;
    }
    default: raise("cannot assign to this expression");
  }
}

Value Interpreter::make_macro(const Stmt& s, const std::shared_ptr<Scope>& closure) {
  auto fn = std::make_shared<Function>();
  fn->name = s.text;
  fn->is_macro = true;
  const Stmt* def = &s;
  // The closure is the defining frame, so a macro sees template-level variables at call time
  // but never the caller's locals (jinja2 macros are lexically scoped). It is held weakly: the
  // frame stores the macro, and a strong reference would make a cycle that outlives the render.
  std::weak_ptr<Scope> weak = closure;
  fn->call = [this, def, weak](Interpreter&, CallArgs& args) -> Value {
    std::shared_ptr<Scope> strong = weak.lock();
    if (!strong) raise("macro '" + def->text + "' called after its defining scope ended");
    if (++depth_ > 200) {
      --depth_;
      raise("maximum macro recursion depth exceeded in '" + def->text + "'");
    }
    auto local = std::make_shared<Scope>(strong);
    const auto& params = def->params;
    for (size_t i = 0; i < params.size(); ++i) {
      const MacroParam& p = params[i];
      auto v = args.get(i, p.name);
      if (v)
        local->vars[p.name] = *v;
      else if (p.default_value)
        local->vars[p.name] = eval(*p.default_value, local);
      else
        local->vars[p.name] = Value::undefined("parameter '" + p.name + "' was not provided");
    }
    List varargs;
    for (size_t i = params.size(); i < args.positional.size(); ++i) varargs.push_back(args.positional[i]);
    auto kwargs = std::make_shared<Dict>();
    for (const auto& [k, v] : args.keyword) {
      if (k == "caller") {
        local->vars["caller"] = v;
        continue;
      }
      bool is_param = false;
      for (const auto& p : params) is_param |= p.name == k;
      if (!is_param) kwargs->set(Value(k), v);
    }
    local->vars["varargs"] = Value::tuple(std::move(varargs));
    local->vars["kwargs"] = Value::dict(kwargs);
    std::string out;
    const int saved = line_;
    try {
      exec(def->body, local, out);
    } catch (...) {
      --depth_;
      throw;
    }
    line_ = saved;
    --depth_;
    return Value(std::move(out));
  };
  return Value::function(fn);
}

void Interpreter::eval_args(const Expr& e, const std::shared_ptr<Scope>& scope, CallArgs& args) {
  for (const ExprPtr& a : e.args) args.positional.push_back(eval(*a, scope));
  for (const auto& [k, a] : e.kwargs) args.keyword.emplace_back(k, eval(*a, scope));
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) raise_undefined(callee);
  if (callee.kind() != Kind::Function) raise("'" + type_name(callee) + "' object is not callable");
  return callee.func().call(*this, args);
}

Value Interpreter::apply_filter(const std::string& name, const Value& subject, CallArgs& args) {
  FilterFn f = find_filter(name);
  if (!f) raise("no filter named '" + name + "'");
  return f(*this, subject, args);
}

bool Interpreter::apply_test(const std::string& name, const Value& subject, CallArgs& args) {
  TestFn t = find_test(name);
  if (!t) raise("no test named '" + name + "'");
  return t(*this, subject, args);
}

Value Interpreter::getattr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::Undefined: raise_undefined(obj);
    case Kind::Namespace: {
      const Value* v = obj.map().find(std::string_view(name));
      return v ? *v : Value::undefined("'Namespace object' has no attribute '" + name + "'");
    }
    case Kind::Dict: {
      // Attribute lookup prefers methods (so `d.items` is the method even with an "items" key).
      if (auto m = get_method(obj, name)) return *m;
      const Value* v = obj.map().find(std::string_view(name));
      return v ? *v : Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    default:
      if (auto m = get_method(obj, name)) return *m;
      return Value::undefined(obj_desc(obj) + " has no attribute '" + name + "'");
  }
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Kind::Undefined: raise_undefined(obj);
    case Kind::Dict:
    case Kind::Namespace: {
      if (const Value* v = obj.map().find(key)) return *v;
      break;
    }
    case Kind::List:
    case Kind::Tuple: {
      if (key.kind() == Kind::Int || key.kind() == Kind::Bool) {
        const int64_t n = static_cast<int64_t>(obj.items().size());
        int64_t i = key.as_int();
        if (i < 0) i += n;
        if (i >= 0 && i < n) return obj.items()[i];
        return Value::undefined(obj_desc(obj) + " has no element " + std::to_string(key.as_int()));
      }
      break;
    }
    case Kind::String: {
      if (key.kind() == Kind::Int || key.kind() == Kind::Bool) {
        const std::u32string u = text::utf8_to_u32(obj.str());
        const int64_t n = static_cast<int64_t>(u.size());
        int64_t i = key.as_int();
        if (i < 0) i += n;
        if (i >= 0 && i < n) return Value(text::u32_to_utf8(std::u32string_view(&u[i], 1)));
        return Value::undefined("'str object' has no element " + std::to_string(key.as_int()));
      }
      break;
    }
    default: break;
  }
  if (key.is_string()) {
    if (obj.kind() != Kind::Dict && obj.kind() != Kind::Namespace) {
      if (auto m = get_method(obj, key.str())) return *m;
    } else if (auto m = get_method(obj, key.str())) {
      return *m;
    }
    return Value::undefined(obj_desc(obj) + " has no attribute '" + key.str() + "'");
  }
  return Value::undefined(obj_desc(obj) + " has no element " + repr(key));
}

Value Interpreter::slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  auto as_opt = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (v.kind() != Kind::Int && v.kind() != Kind::Bool) raise("slice indices must be integers or None");
    return v.as_int();
  };
  const int64_t step = as_opt(step_v).value_or(1);
  if (step == 0) raise("slice step cannot be zero");
  auto indices = [&](int64_t n) {
    std::vector<int64_t> idx;
    auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
      if (!v) return dflt;
      int64_t x = *v;
      if (x < 0) x += n;
      if (step > 0) return std::clamp<int64_t>(x, 0, n);
      return std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t start = clamp(as_opt(start_v), step > 0 ? 0 : n - 1);
    const int64_t stop = clamp(as_opt(stop_v), step > 0 ? n : -1);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) idx.push_back(i);
    return idx;
  };
  if (obj.is_undefined()) raise_undefined(obj);
  if (obj.is_string()) {
    const std::u32string u = text::utf8_to_u32(obj.str());
    std::u32string r;
    for (int64_t i : indices(static_cast<int64_t>(u.size()))) r.push_back(u[i]);
    return Value(text::u32_to_utf8(r));
  }
  if (obj.is_sequence()) {
    List r;
    for (int64_t i : indices(static_cast<int64_t>(obj.items().size()))) r.push_back(obj.items()[i]);
    return obj.kind() == Kind::Tuple ? Value::tuple(std::move(r)) : Value::list(std::move(r));
  }
  return Value::undefined(obj_desc(obj) + " is not subscriptable");
}

Value Interpreter::binary(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) raise_undefined(a);
  if (b.is_undefined()) raise_undefined(b);
  const bool nums = a.is_number() && b.is_number();
  const bool flt = nums && (a.kind() == Kind::Float || b.kind() == Kind::Float);
  auto bad = [&]() -> Value {
    raise("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
  };
  if (op == "+") {
    if (nums) return flt ? Value(a.as_float() + b.as_float()) : Value(a.as_int() + b.as_int());
    if (a.is_string() && b.is_string()) return Value(a.str() + b.str());
    if (a.is_sequence() && a.kind() == b.kind()) {
      List r = a.items();
      r.insert(r.end(), b.items().begin(), b.items().end());
      return a.kind() == Kind::Tuple ? Value::tuple(std::move(r)) : Value::list(std::move(r));
    }
    if (a.is_string()) raise("can only concatenate str (not \"" + type_name(b) + "\") to str");
    return bad();
  }
  if (op == "-") {
    if (nums) return flt ? Value(a.as_float() - b.as_float()) : Value(a.as_int() - b.as_int());
    return bad();
  }
  if (op == "*") {
    if (nums) return flt ? Value(a.as_float() * b.as_float()) : Value(a.as_int() * b.as_int());
    const Value* seq = (a.is_string() || a.is_sequence()) ? &a : (b.is_string() || b.is_sequence()) ? &b : nullptr;
    const Value* cnt = seq == &a ? &b : &a;
    if (seq && (cnt->kind() == Kind::Int || cnt->kind() == Kind::Bool)) {
      const int64_t n = std::max<int64_t>(0, cnt->as_int());
      if (seq->is_string()) {
        std::string r;
        for (int64_t i = 0; i < n; ++i) r += seq->str();
        return Value(std::move(r));
      }
      List r;
      for (int64_t i = 0; i < n; ++i) r.insert(r.end(), seq->items().begin(), seq->items().end());
      return seq->kind() == Kind::Tuple ? Value::tuple(std::move(r)) : Value::list(std::move(r));
    }
    return bad();
  }
  if (op == "/") {
    if (!nums) return bad();
    if (b.as_float() == 0.0) raise("division by zero");
    return Value(a.as_float() / b.as_float());
  }
  if (op == "//") {
    if (!nums) return bad();
    if (b.as_float() == 0.0) raise("integer division or modulo by zero");
    if (flt) return Value(std::floor(a.as_float() / b.as_float()));
    return Value(floordiv(a.as_int(), b.as_int()));
  }
  if (op == "%") {
    if (a.is_string()) return Value(printf_format(a.str(), b));
    if (!nums) return bad();
    if (b.as_float() == 0.0) raise("integer division or modulo by zero");
    if (flt) {
      double r = std::fmod(a.as_float(), b.as_float());
      if (r != 0 && ((r < 0) != (b.as_float() < 0))) r += b.as_float();
      return Value(r);
    }
    return Value(a.as_int() - floordiv(a.as_int(), b.as_int()) * b.as_int());
  }
  if (op == "**") {
    if (!nums) return bad();
    if (!flt && b.as_int() >= 0) {
      int64_t r = 1, base = a.as_int();
      for (int64_t e = b.as_int(); e > 0; --e) r *= base;
      return Value(r);
    }
    return Value(std::pow(a.as_float(), b.as_float()));
  }
  raise("unknown operator " + op);
}

bool Interpreter::compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return py_equal(a, b);
  if (op == "!=") return !py_equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  if (a.is_undefined()) raise_undefined(a);
  if (b.is_undefined()) raise_undefined(b);
  if (op == "<") return py_less(a, b);
  if (op == ">") return py_less(b, a);
  if (op == "<=") return py_less(a, b) || py_equal(a, b);
  if (op == ">=") return py_less(b, a) || py_equal(a, b);
  raise("unknown comparison " + op);
}

Value Interpreter::eval_filter_chain(const Expr& e, const std::shared_ptr<Scope>& scope, const Value& subject) {
  const Value in = e.a ? eval_filter_chain(*e.a, scope, subject) : subject;
  CallArgs args;
  eval_args(e, scope, args);
  line_ = e.line;
  return apply_filter(e.name, in, args);
}

Value Interpreter::eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
  switch (e.kind) {
    case Expr::K::Const: return e.literal;
    case Expr::K::Name: {
      const Value* v = scope->lookup(e.name);
      return v ? *v : Value::undefined("'" + e.name + "' is undefined");
    }
    case Expr::K::List:
    case Expr::K::Tuple: {
      List items;
      items.reserve(e.args.size());
      for (const ExprPtr& a : e.args) items.push_back(eval(*a, scope));
      return e.kind == Expr::K::List ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case Expr::K::Dict: {
      auto d = std::make_shared<Dict>();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = eval(*e.args[i], scope);
        d->set(k, eval(*e.args[i + 1], scope));
      }
      return Value::dict(std::move(d));
    }
    case Expr::K::GetAttr: {
      const Value obj = eval(*e.a, scope);
      line_ = e.line;
      return getattr(obj, e.name);
    }
    case Expr::K::GetItem: {
      const Value obj = eval(*e.a, scope);
      if (e.b->kind == Expr::K::Slice) {
        const Expr& s = *e.b;
        const Value start = s.args[0] ? eval(*s.args[0], scope) : Value::none();
        const Value stop = s.args[1] ? eval(*s.args[1], scope) : Value::none();
        const Value step = s.args[2] ? eval(*s.args[2], scope) : Value::none();
        line_ = e.line;
        return slice(obj, start, stop, step);
      }
      const Value key = eval(*e.b, scope);
      line_ = e.line;
      return getitem(obj, key);
    }
    case Expr::K::Slice: raise("slice outside of a subscript");
    case Expr::K::Call: {
      const Value callee = eval(*e.a, scope);
      CallArgs args;
      eval_args(e, scope, args);
      line_ = e.line;
      return call(callee, args);
    }
    case Expr::K::Filter: {
      const Value subject = e.a ? eval(*e.a, scope) : Value();
      CallArgs args;
      eval_args(e, scope, args);
      line_ = e.line;
      return apply_filter(e.name, subject, args);
    }
    case Expr::K::Test: {
      const Value subject = eval(*e.a, scope);
      CallArgs args;
      eval_args(e, scope, args);
      line_ = e.line;
      return Value(apply_test(e.name, subject, args));
    }
    case Expr::K::Neg:
    case Expr::K::Pos: {
      const Value v = eval(*e.a, scope);
      if (v.is_undefined()) raise_undefined(v);
      if (!v.is_number()) raise("bad operand type for unary " + std::string(e.kind == Expr::K::Neg ? "-" : "+") + ": '" + type_name(v) + "'");
      if (e.kind == Expr::K::Pos) return v.kind() == Kind::Bool ? Value(v.as_int()) : v;
      return v.kind() == Kind::Float ? Value(-v.as_float()) : Value(-v.as_int());
    }
    case Expr::K::Not: return Value(!truthy(eval(*e.a, scope)));
    case Expr::K::Binary: {
      if (e.name == "and") {
        Value l = eval(*e.a, scope);
        return truthy(l) ? eval(*e.b, scope) : l;
      }
      if (e.name == "or") {
        Value l = eval(*e.a, scope);
        return truthy(l) ? l : eval(*e.b, scope);
      }
      const Value l = eval(*e.a, scope);
      const Value r = eval(*e.b, scope);
      line_ = e.line;
      return binary(e.name, l, r);
    }
    case Expr::K::Concat: {
      std::string s;
      for (const ExprPtr& a : e.args) {
        const Value v = eval(*a, scope);
        s += v.is_string() ? v.str() : to_str(v);
      }
      return Value(std::move(s));
    }
    case Expr::K::Compare: {
      Value left = eval(*e.a, scope);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.args[i], scope);
        line_ = e.line;
        if (!compare(e.ops[i], left, right)) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case Expr::K::CondExpr: {
      if (truthy(eval(*e.a, scope))) return eval(*e.b, scope);
      if (e.c) return eval(*e.c, scope);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
  }
  raise("unknown expression");
}

}  // namespace ft::jinja
