#include "shared/text/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "shared/text/utf8.h"

namespace ft::jinja {

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value Value::undefined(std::string why) {
  Value v;
  v.s_ = std::make_shared<const std::string>(std::move(why));
  return v;
}
Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::List;
  v.l_ = std::make_shared<List>(std::move(items));
  return v;
}
Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::Tuple;
  return v;
}
Value Value::dict(std::shared_ptr<Dict> d) {
  Value v;
  v.kind_ = Kind::Dict;
  v.d_ = std::move(d);
  return v;
}
Value Value::dict() { return dict(std::make_shared<Dict>()); }
Value Value::namespace_(std::shared_ptr<Dict> d) {
  Value v = dict(std::move(d));
  v.kind_ = Kind::Namespace;
  return v;
}
Value Value::function(std::shared_ptr<Function> f) {
  Value v;
  v.kind_ = Kind::Function;
  v.fn_ = std::move(f);
  return v;
}

const std::string& Value::undefined_reason() const {
  static const std::string generic = "value is undefined";
  return s_ ? *s_ : generic;
}

const void* Value::identity() const {
  switch (kind_) {
    case Kind::String: return s_.get();
    case Kind::List:
    case Kind::Tuple: return l_.get();
    case Kind::Dict:
    case Kind::Namespace: return d_.get();
    case Kind::Function: return fn_.get();
    default: return nullptr;
  }
}

void raise(std::string message) { throw TemplateRuntimeError{std::move(message)}; }

// ---- Dict

const Value* Dict::find(std::string_view key) const {
  auto it = str_index_.find(std::string(key));
  return it == str_index_.end() ? nullptr : &entries[it->second].second;
}

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.str()));
  for (const auto& [k, v] : entries)
    if (!k.is_string() && py_equal(k, key)) return &v;
  return nullptr;
}

void Dict::set(const Value& key, Value v) {
  if (key.is_string()) {
    auto it = str_index_.find(key.str());
    if (it != str_index_.end()) {
      entries[it->second].second = std::move(v);
      return;
    }
    str_index_.emplace(key.str(), entries.size());
    entries.emplace_back(key, std::move(v));
    return;
  }
  for (auto& [k, old] : entries)
    if (!k.is_string() && py_equal(k, key)) {
      old = std::move(v);
      return;
    }
  entries.emplace_back(key, std::move(v));
}

std::optional<Value> CallArgs::get(size_t i, std::string_view name) const {
  if (i < positional.size()) return positional[i];
  for (const auto& [k, v] : keyword)
    if (k == name) return v;
  return std::nullopt;
}

// ---- comparisons

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return v.as_bool();
    case Kind::Int: return v.as_int() != 0;
    case Kind::Float: return v.as_float() != 0.0;
    case Kind::String: return !v.str().empty();
    case Kind::List:
    case Kind::Tuple: return !v.items().empty();
    case Kind::Dict: return v.map().size() != 0;
    default: return true;
  }
}

bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::Float || b.kind() == Kind::Float) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::String: return a.str() == b.str();
    case Kind::List:
    case Kind::Tuple: {
      const List &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!py_equal(x[i], y[i])) return false;
      return true;
    }
    case Kind::Dict: {
      if (a.map().size() != b.map().size()) return false;
      for (const auto& [k, v] : a.map().entries) {
        const Value* o = b.map().find(k);
        if (!o || !py_equal(v, *o)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

bool py_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::Float || b.kind() == Kind::Float) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 byte order == code point order
  if (a.kind() == b.kind() && a.is_sequence()) {
    const List &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!py_equal(x[i], y[i])) return py_less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  raise("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return "list";
    case Kind::Tuple: return "tuple";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Function: return v.func().is_macro ? "Macro" : "function";
  }
  return "object";
}

// ---- printing

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  // Shortest round-trip digits, as Python's repr uses.
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  const int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char c : mant)
    if (c != '.') digits.push_back(c);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exp >= -5 + 1 && exp < 16) {
    if (exp >= 0) {
      std::string ip = digits.substr(0, std::min<size_t>(digits.size(), exp + 1));
      while (ip.size() < static_cast<size_t>(exp + 1)) ip.push_back('0');
      std::string fp = digits.size() > static_cast<size_t>(exp + 1) ? digits.substr(exp + 1) : "0";
      out = ip + "." + fp;
    } else {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  return sign + out;
}

namespace {

void append_str_repr(std::string& out, const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char q = (has_single && !has_double) ? '"' : '\'';
  out.push_back(q);
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    const char32_t c = text::next_code_point(s, i);
    if (c == static_cast<char32_t>(q) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!text::py_isprintable(c)) {
      char b[16];
      if (c < 0x100)
        std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned>(c));
      else if (c < 0x10000)
        std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(c));
      else
        std::snprintf(b, sizeof b, "\\U%08x", static_cast<unsigned>(c));
      out += b;
    } else {
      out.append(s, start, i - start);
    }
  }
  out.push_back(q);
}

void append_repr(std::string& out, const Value& v);

void append_items(std::string& out, const List& items) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    append_repr(out, items[i]);
  }
}

void append_dict_repr(std::string& out, const Dict& d) {
  out.push_back('{');
  bool first = true;
  for (const auto& [k, v] : d.entries) {
    if (!first) out += ", ";
    first = false;
    append_repr(out, k);
    out += ": ";
    append_repr(out, v);
  }
  out.push_back('}');
}

void append_repr(std::string& out, const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: out += "Undefined"; return;
    case Kind::String: append_str_repr(out, v.str()); return;
    case Kind::List:
      out.push_back('[');
      append_items(out, v.items());
      out.push_back(']');
      return;
    case Kind::Tuple:
      out.push_back('(');
      append_items(out, v.items());
      if (v.items().size() == 1) out.push_back(',');
      out.push_back(')');
      return;
    case Kind::Dict: append_dict_repr(out, v.map()); return;
    case Kind::Namespace:
      out += "<Namespace ";
      append_dict_repr(out, v.map());
      out += ">";
      return;
    default: out += to_str(v);
  }
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return v.as_bool() ? "True" : "False";
    case Kind::Int: return std::to_string(v.as_int());
    case Kind::Float: return py_float_repr(v.as_float());
    case Kind::String: return v.str();
    case Kind::Function: return v.func().is_macro ? "<Macro '" + v.func().name + "'>" : "<function " + v.func().name + ">";
    default: {
      std::string out;
      append_repr(out, v);
      return out;
    }
  }
}

std::string repr(const Value& v) {
  std::string out;
  append_repr(out, v);
  return out;
}

// ---- JSON

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      switch (b) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (b < 0x20 || (ensure_ascii && b == 0x7F)) {
            char e[8];
            std::snprintf(e, sizeof e, "\\u%04x", b);
            out += e;
          } else {
            out.push_back(static_cast<char>(b));
          }
      }
      continue;
    }
    const size_t start = i;
    const char32_t c = text::next_code_point(s, i);
    if (!ensure_ascii) {
      out.append(s.substr(start, i - start));
      continue;
    }
    char e[16];
    if (c < 0x10000) {
      std::snprintf(e, sizeof e, "\\u%04x", static_cast<unsigned>(c));
    } else {
      const char32_t u = c - 0x10000;
      std::snprintf(e, sizeof e, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (u >> 10)),
                    static_cast<unsigned>(0xDC00 + (u & 0x3FF)));
    }
    out += e;
  }
  out.push_back('"');
}

namespace {

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return py_float_repr(d);
}

std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Kind::String: return k.str();
    case Kind::Bool: return k.as_bool() ? "true" : "false";
    case Kind::Int: return std::to_string(k.as_int());
    case Kind::Float: return json_float(k.as_float());
    case Kind::None: return "null";
    default: raise("keys must be str, int, float, bool or None, not " + type_name(k));
  }
}

void dump(std::string& out, const Value& v, const JsonOptions& o, int level) {
  switch (v.kind()) {
    case Kind::None: out += "null"; return;
    case Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(v.as_int()); return;
    case Kind::Float: out += json_float(v.as_float()); return;
    case Kind::String: append_json_string(out, v.str(), o.ensure_ascii); return;
    case Kind::List:
    case Kind::Tuple: {
      const List& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      std::string nl;
      if (o.indent) {
        nl = "\n";
        for (int i = 0; i <= level; ++i) nl += *o.indent;
        out += nl;
      }
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_sep + nl;
        dump(out, items[i], o, level + 1);
      }
      if (o.indent) {
        out.push_back('\n');
        for (int i = 0; i < level; ++i) out += *o.indent;
      }
      out.push_back(']');
      return;
    }
    case Kind::Dict: {
      const Dict& d = v.map();
      if (d.size() == 0) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, val] : d.entries) entries.emplace_back(json_key(k), &val);
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](auto& a, auto& b) { return a.first < b.first; });
      out.push_back('{');
      std::string nl;
      if (o.indent) {
        nl = "\n";
        for (int i = 0; i <= level; ++i) nl += *o.indent;
        out += nl;
      }
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += o.item_sep + nl;
        append_json_string(out, entries[i].first, o.ensure_ascii);
        out += o.key_sep;
        dump(out, *entries[i].second, o, level + 1);
      }
      if (o.indent) {
        out.push_back('\n');
        for (int i = 0; i < level; ++i) out += *o.indent;
      }
      out.push_back('}');
      return;
    }
    default: raise("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

Value from_ordered_json(const nlohmann::ordered_json& j) {
  using nlohmann::ordered_json;
  switch (j.type()) {
    case ordered_json::value_t::null: return Value::none();
    case ordered_json::value_t::boolean: return Value(j.get<bool>());
    case ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case ordered_json::value_t::number_float: return Value(j.get<double>());
    case ordered_json::value_t::string: return Value(j.get<std::string>());
    case ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_ordered_json(e));
      return Value::list(std::move(items));
    }
    case ordered_json::value_t::object: {
      auto d = std::make_shared<Dict>();
      for (auto it = j.begin(); it != j.end(); ++it) d->set(Value(it.key()), from_ordered_json(it.value()));
      return Value::dict(std::move(d));
    }
    default: return Value::none();
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& opts) {
  std::string out;
  dump(out, v, opts, 0);
  return out;
}

Value from_json_text(std::string_view text) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::ordered_json::exception& e) {
    raise(std::string("invalid JSON: ") + e.what());
  }
  return from_ordered_json(j);
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return {};
    case Kind::List:
    case Kind::Tuple: return v.items();
    case Kind::Dict: {
      List keys;
      keys.reserve(v.map().size());
      for (const auto& [k, val] : v.map().entries) keys.push_back(k);
      return keys;
    }
    case Kind::String: {
      List chars;
      const std::string& s = v.str();
      size_t i = 0;
      while (i < s.size()) {
        const size_t start = i;
        text::next_code_point(s, i);
        chars.emplace_back(s.substr(start, i - start));
      }
      return chars;
    }
    default: raise("'" + type_name(v) + "' object is not iterable");
  }
}

}  // namespace ft::jinja
