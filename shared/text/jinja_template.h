#pragma once
// A parsed Jinja template, rendered the way transformers renders chat templates.
#include <memory>
#include <string>

#include "shared/text/jinja_error.h"
#include "shared/text/jinja_value.h"

namespace ft::jinja {

struct Stmt;

class Template {
 public:
  // Throws TemplateError "NAME line N: message" on a syntax error.
  Template(std::string_view source, std::string name);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // `vars` must be a dict: its entries become template variables. Throws TemplateError with the
  // template name and line on a render error (undefined use, type error, raise_exception...).
  std::string render(const Value& vars) const;

  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<std::vector<std::unique_ptr<Stmt>>> body_;
};

}  // namespace ft::jinja
