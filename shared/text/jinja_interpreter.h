#pragma once
// Tree-walking evaluator with jinja2's runtime rules as transformers configures them
// (ImmutableSandboxedEnvironment, default Undefined, loopcontrols).
#include <memory>
#include <string>
#include <unordered_map>

#include "shared/text/jinja_ast.h"
#include "shared/text/jinja_value.h"

namespace ft::jinja {

// Variables of one frame: the globals, the render context, a for-loop iteration, a macro call.
struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;

  explicit Scope(std::shared_ptr<Scope> p = nullptr) : parent(std::move(p)) {}
  const Value* lookup(const std::string& name) const;
};

class Interpreter {
 public:
  // Renders `body` with `context` (whose parent chain holds the globals) into `out`. Throws
  // TemplateRuntimeError with the line of the failing node in `error_line()`.
  void render(const Body& body, const std::shared_ptr<Scope>& context, std::string& out);
  int error_line() const { return line_; }

  // Used by builtins (filters that call back into tests, map by filter name...).
  Value call(const Value& callee, CallArgs& args);
  Value apply_filter(const std::string& name, const Value& subject, CallArgs& args);
  bool apply_test(const std::string& name, const Value& subject, CallArgs& args);
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);

 private:
  enum class Flow { Normal, Break, Continue };
  Flow exec(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out);
  Flow exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out);
  Value eval(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value eval_filter_chain(const Expr& e, const std::shared_ptr<Scope>& scope, const Value& subject);
  void eval_args(const Expr& e, const std::shared_ptr<Scope>& scope, CallArgs& args);
  void assign(const Expr& target, Value v, const std::shared_ptr<Scope>& scope);
  Value make_macro(const Stmt& s, const std::shared_ptr<Scope>& closure);
  Value binary(const std::string& op, const Value& a, const Value& b);
  bool compare(const std::string& op, const Value& a, const Value& b);
  Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

  int line_ = 0;
  int depth_ = 0;
};

bool contains(const Value& container, const Value& item);

}  // namespace ft::jinja
