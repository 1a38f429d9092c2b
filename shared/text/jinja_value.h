#pragma once
// Values of the Jinja interpreter, with Python semantics where templates can observe them
// (truthiness, ==, ordering, str(), repr(), json.dumps). Containers are shared, as Python objects
// are; the sandbox never mutates them except namespace attributes.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ft::jinja {

class Value;
class Interpreter;
using List = std::vector<Value>;
struct Dict;
struct Function;

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Namespace, Function };

class Value {
 public:
  Value() = default;  // undefined
  Value(bool b) : kind_(Kind::Bool), b_(b) {}
  Value(int v) : kind_(Kind::Int), i_(v) {}
  Value(int64_t v) : kind_(Kind::Int), i_(v) {}
  Value(size_t v) : kind_(Kind::Int), i_(static_cast<int64_t>(v)) {}
  Value(double v) : kind_(Kind::Float), f_(v) {}
  Value(std::string s) : kind_(Kind::String), s_(std::make_shared<const std::string>(std::move(s))) {}
  Value(const char* s) : Value(std::string(s)) {}
  Value(std::string_view s) : Value(std::string(s)) {}

  static Value none();
  // An undefined value; `why` is the message raised when the template uses it in a way that
  // needs a value ("'x' is undefined"). `unsafe` marks a sandbox-refused attribute.
  static Value undefined(std::string why);
  static Value list(List items);
  static Value tuple(List items);
  static Value dict(std::shared_ptr<Dict> d);
  static Value dict();  // empty
  static Value namespace_(std::shared_ptr<Dict> d);
  static Value function(std::shared_ptr<Function> f);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_sequence() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
  bool is_mapping() const { return kind_ == Kind::Dict; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::Bool ? (b_ ? 1 : 0) : i_; }
  double as_float() const { return kind_ == Kind::Float ? f_ : static_cast<double>(as_int()); }
  const std::string& str() const { return *s_; }
  const List& items() const { return *l_; }
  const Dict& map() const { return *d_; }
  Dict& map_mut() const { return *d_; }
  const Function& func() const { return *fn_; }
  const std::string& undefined_reason() const;

  // Identity of shared containers (for `is sameas`).
  const void* identity() const;

 private:
  Kind kind_ = Kind::Undefined;
  union {
    bool b_;
    int64_t i_ = 0;
    double f_;
  };
  std::shared_ptr<const std::string> s_;  // String; Undefined's reason
  std::shared_ptr<List> l_;
  std::shared_ptr<Dict> d_;
  std::shared_ptr<Function> fn_;
};

// Insertion-ordered mapping; keys compare like Python dict keys (1 == 1.0 == True).
struct Dict {
  std::vector<std::pair<Value, Value>> entries;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(const Value& key, Value v);
  size_t size() const { return entries.size(); }

 private:
  std::unordered_map<std::string, size_t> str_index_;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // Python-style binding: the i-th positional or the keyword `name`, else nullopt.
  std::optional<Value> get(size_t i, std::string_view name) const;
};

struct Function {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> call;
  bool is_macro = false;
};

// Errors a template can cause at render time (TypeError, UndefinedError, SecurityError...).
struct TemplateRuntimeError {
  std::string message;
};
[[noreturn]] void raise(std::string message);

bool truthy(const Value& v);
bool py_equal(const Value& a, const Value& b);
// Python `<`; raises for unorderable operands.
bool py_less(const Value& a, const Value& b);

// str() as Jinja prints it ({{ x }}, `~`, `string`): undefined prints as "".
std::string to_str(const Value& v);
std::string repr(const Value& v);
std::string py_float_repr(double d);
std::string type_name(const Value& v);

struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // json.dumps(indent=...) as a string of spaces or given text
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
// Python json.dumps; raises for values JSON cannot hold (undefined, functions).
std::string to_json(const Value& v, const JsonOptions& opts = {});
// Appends `s` as a JSON string literal (Python json.dumps escaping).
void append_json_string(std::string& out, std::string_view s, bool ensure_ascii);

// Parses JSON text (key order kept; integers stay integers, 3.0 stays a float).
Value from_json_text(std::string_view text);

// Iterates v as Python's iter() would for a template `for`: lists, tuples, dict keys, string
// characters; undefined is empty. Raises for non-iterables.
List iterate(const Value& v);

}  // namespace ft::jinja
