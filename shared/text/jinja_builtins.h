#pragma once
// Filters, tests, methods of str/list/dict, and global functions available to templates.
#include <optional>
#include <string>

#include "shared/text/jinja_interpreter.h"

namespace ft::jinja {

using FilterFn = Value (*)(Interpreter&, const Value&, CallArgs&);
using TestFn = bool (*)(Interpreter&, const Value&, CallArgs&);

FilterFn find_filter(const std::string& name);
TestFn find_test(const std::string& name);

// A bound method of `obj` (e.g. "abc".startswith), an unsafe-attribute undefined for methods the
// immutable sandbox refuses, or nullopt when `obj` has no such method.
std::optional<Value> get_method(const Value& obj, const std::string& name);

// range, namespace, dict, raise_exception, strftime_now, cycler, joiner.
void install_globals(Scope& globals);

// Python str methods that other code reuses.
std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right);

}  // namespace ft::jinja
