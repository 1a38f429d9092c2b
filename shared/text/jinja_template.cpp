#include "shared/text/jinja_template.h"

#include "shared/text/jinja_builtins.h"
#include "shared/text/jinja_interpreter.h"
#include "shared/text/jinja_lexer.h"
#include "shared/text/jinja_parser.h"

namespace ft::jinja {

namespace {
std::shared_ptr<Scope> globals() {
  // Built once; its functions are stateless, so renders on several threads can share it.
  static const std::shared_ptr<Scope> g = [] {
    auto s = std::make_shared<Scope>();
    install_globals(*s);
    return s;
  }();
  return g;
}
}  // namespace

Template::Template(std::string_view source, std::string name) : name_(std::move(name)) {
  try {
    body_ = std::make_shared<Body>(parse(lex(source)));
  } catch (const SyntaxError& e) {
    throw TemplateError(name_ + " line " + std::to_string(e.line) + ": syntax error: " + e.message);
  }
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const Value& vars) const {
  auto context = std::make_shared<Scope>(globals());
  if (vars.kind() == Kind::Dict)
    for (const auto& [k, v] : vars.map().entries)
      if (k.is_string()) context->vars[k.str()] = v;
  Interpreter interp;
  std::string out;
  try {
    interp.render(*body_, context, out);
  } catch (const TemplateRuntimeError& e) {
    throw TemplateError(name_ + " line " + std::to_string(interp.error_line()) + ": " + e.message);
  } catch (const std::exception& e) {
    throw TemplateError(name_ + " line " + std::to_string(interp.error_line()) + ": " + e.what());
  }
  return out;
}

}  // namespace ft::jinja
