#include "shared/text/jinja_builtins.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <unordered_map>

#include "shared/text/utf8.h"

namespace ft::jinja {

namespace {

using text::py_isspace;

std::u32string u32(const std::string& s) { return text::utf8_to_u32(s); }
std::string u8(const std::u32string& s) { return text::u32_to_utf8(s); }

const std::string& need_str(const Value& v, const char* what) {
  if (!v.is_string()) raise(std::string(what) + " expects a string, got " + type_name(v));
  return v.str();
}

int64_t need_int(const Value& v, const char* what) {
  if (v.kind() != Kind::Int && v.kind() != Kind::Bool) raise(std::string(what) + " expects an integer, got " + type_name(v));
  return v.as_int();
}

Value arg_or(const CallArgs& a, size_t i, std::string_view name, Value dflt) {
  auto v = a.get(i, name);
  return v ? *v : dflt;
}

// Python's str(x) as the `string` filter and string methods see it.
std::string soft_str(const Value& v) { return to_str(v); }

// ---- str helpers

std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (!sep) {
    const std::u32string u = u32(s);
    size_t i = 0;
    const size_t n = u.size();
    while (true) {
      while (i < n && py_isspace(u[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        size_t e = n;
        while (e > i && py_isspace(u[e - 1])) --e;
        out.push_back(u8(u.substr(i, e - i)));
        break;
      }
      size_t j = i;
      while (j < n && !py_isspace(u[j])) ++j;
      out.push_back(u8(u.substr(i, j - i)));
      i = j;
    }
    return out;
  }
  if (sep->empty()) raise("empty separator");
  size_t start = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) break;
    const size_t p = s.find(*sep, start);
    if (p == std::string::npos) break;
    out.push_back(s.substr(start, p - start));
    start = p + sep->size();
  }
  out.push_back(s.substr(start));
  return out;
}

std::vector<std::string> py_rsplit(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (maxsplit < 0) return py_split(s, sep, -1);
  std::vector<std::string> out;
  if (!sep) {
    const std::u32string u = u32(s);
    size_t e = u.size();
    while (true) {
      while (e > 0 && py_isspace(u[e - 1])) --e;
      if (e == 0) break;
      if (static_cast<int64_t>(out.size()) >= maxsplit) {
        size_t b = 0;
        while (b < e && py_isspace(u[b])) ++b;
        out.push_back(u8(u.substr(b, e - b)));
        break;
      }
      size_t b = e;
      while (b > 0 && !py_isspace(u[b - 1])) --b;
      out.push_back(u8(u.substr(b, e - b)));
      e = b;
    }
    std::reverse(out.begin(), out.end());
    return out;
  }
  if (sep->empty()) raise("empty separator");
  size_t end = s.size();
  while (static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < sep->size()) break;
    const size_t p = s.rfind(*sep, end - sep->size());
    if (p == std::string::npos) break;
    out.push_back(s.substr(p + sep->size(), end - p - sep->size()));
    end = p;
  }
  out.push_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

Value str_list(const std::vector<std::string>& v) {
  List l;
  l.reserve(v.size());
  for (const auto& s : v) l.emplace_back(s);
  return Value::list(std::move(l));
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& rep, int64_t count) {
  std::string out;
  if (old.empty()) {
    const std::u32string u = u32(s);
    int64_t done = 0;
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || done < count) {
        out += rep;
        ++done;
      }
      if (i < u.size()) out += u8(u.substr(i, 1));
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t p = s.find(old, start);
    if (p == std::string::npos) break;
    out.append(s, start, p - start);
    out += rep;
    start = p + old.size();
    ++done;
  }
  out.append(s, start, std::string::npos);
  return out;
}

std::string map_chars(const std::string& s, char32_t (*f)(char32_t)) {
  std::u32string u = u32(s);
  for (char32_t& c : u) c = f(c);
  return u8(u);
}

std::string py_capitalize(const std::string& s) {
  std::u32string u = u32(s);
  for (size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? text::py_toupper(u[i]) : text::py_tolower(u[i]);
  return u8(u);
}

std::string py_title(const std::string& s) {
  std::u32string u = u32(s);
  bool prev_cased = false;
  for (char32_t& c : u) {
    const bool cased = text::py_isupper(c) || text::py_islower(c);
    c = prev_cased ? text::py_tolower(c) : text::py_toupper(c);
    prev_cased = cased;
  }
  return u8(u);
}

bool starts_or_ends(const std::string& s, const Value& what, bool start) {
  auto one = [&](const std::string& p) {
    if (p.size() > s.size()) return false;
    return start ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (what.kind() == Kind::Tuple) {
    for (const Value& v : what.items())
      if (one(need_str(v, start ? "startswith" : "endswith"))) return true;
    return false;
  }
  return one(need_str(what, start ? "startswith" : "endswith"));
}

// Resolves "a.b.0" the way jinja2's make_attrgetter does (attribute, then item).
Value get_attribute_path(Interpreter& in, const Value& v, const Value& attribute) {
  if (attribute.kind() == Kind::Int) return in.getitem(v, attribute);
  Value cur = v;
  for (const std::string& part : py_split(need_str(attribute, "attribute"), std::string("."), -1)) {
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = digits ? in.getitem(cur, Value(static_cast<int64_t>(std::stoll(part)))) : in.getitem(cur, Value(part));
    if (cur.is_undefined()) break;
  }
  return cur;
}

Value make_fn(std::string name, std::function<Value(Interpreter&, CallArgs&)> f) {
  auto fn = std::make_shared<Function>();
  fn->name = std::move(name);
  fn->call = std::move(f);
  return Value::function(fn);
}

std::string escape_html(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

// ---- filters

Value f_tojson(Interpreter&, const Value& v, CallArgs& a) {
  JsonOptions o;
  o.ensure_ascii = truthy(arg_or(a, 0, "ensure_ascii", Value(false)));
  const Value indent = arg_or(a, 1, "indent", Value::none());
  if (indent.kind() == Kind::Int) {
    o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent.as_int())), ' ');
  } else if (indent.is_string()) {
    o.indent = indent.str();
  }
  if (o.indent) o.item_sep = ",";
  const Value seps = arg_or(a, 2, "separators", Value::none());
  if (seps.is_sequence() && seps.items().size() == 2) {
    o.item_sep = need_str(seps.items()[0], "separators");
    o.key_sep = need_str(seps.items()[1], "separators");
  }
  o.sort_keys = truthy(arg_or(a, 3, "sort_keys", Value(false)));
  return Value(to_json(v, o));
}

Value f_length(Interpreter&, const Value& v, CallArgs&) {
  switch (v.kind()) {
    case Kind::Undefined: return Value(0);
    case Kind::String: return Value(static_cast<int64_t>(text::utf8_length(v.str())));
    case Kind::List:
    case Kind::Tuple: return Value(v.items().size());
    case Kind::Dict:
    case Kind::Namespace: return Value(v.map().size());
    default: raise("object of type '" + type_name(v) + "' has no len()");
  }
}

Value f_default(Interpreter&, const Value& v, CallArgs& a) {
  const Value dflt = arg_or(a, 0, "default_value", Value(""));
  const bool boolean = truthy(arg_or(a, 1, "boolean", Value(false)));
  if (v.is_undefined() || (boolean && !truthy(v))) return dflt;
  return v;
}

Value f_first(Interpreter&, const Value& v, CallArgs&) {
  List items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(Interpreter&, const Value& v, CallArgs&) {
  List items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_join(Interpreter& in, const Value& v, CallArgs& a) {
  const std::string sep = soft_str(arg_or(a, 0, "d", Value("")));
  const auto attr = a.get(1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += soft_str(attr ? get_attribute_path(in, item, *attr) : item);
  }
  return Value(std::move(out));
}

Value f_upper(Interpreter&, const Value& v, CallArgs&) { return Value(map_chars(soft_str(v), text::py_toupper)); }
Value f_lower(Interpreter&, const Value& v, CallArgs&) { return Value(map_chars(soft_str(v), text::py_tolower)); }
Value f_capitalize(Interpreter&, const Value& v, CallArgs&) { return Value(py_capitalize(soft_str(v))); }
Value f_title(Interpreter&, const Value& v, CallArgs&) { return Value(py_title(soft_str(v))); }

Value f_trim(Interpreter&, const Value& v, CallArgs& a) {
  const Value chars = arg_or(a, 0, "chars", Value::none());
  return Value(py_strip(soft_str(v), chars.is_string() ? std::optional<std::string>(chars.str()) : std::nullopt, true, true));
}

Value f_replace(Interpreter&, const Value& v, CallArgs& a) {
  const std::string old = soft_str(arg_or(a, 0, "old", Value("")));
  const std::string rep = soft_str(arg_or(a, 1, "new", Value("")));
  const Value count = arg_or(a, 2, "count", Value::none());
  return Value(py_replace(soft_str(v), old, rep, count.is_none() ? -1 : need_int(count, "replace")));
}

Value f_list(Interpreter&, const Value& v, CallArgs&) { return Value::list(iterate(v)); }
Value f_string(Interpreter&, const Value& v, CallArgs&) { return v.is_string() ? v : Value(soft_str(v)); }
Value f_safe(Interpreter&, const Value& v, CallArgs&) { return v; }
Value f_escape(Interpreter&, const Value& v, CallArgs&) { return Value(escape_html(soft_str(v))); }

Value f_int(Interpreter&, const Value& v, CallArgs& a) {
  const Value dflt = arg_or(a, 0, "default", Value(0));
  switch (v.kind()) {
    case Kind::Int: return v;
    case Kind::Bool: return Value(v.as_int());
    case Kind::Float: return Value(static_cast<int64_t>(v.as_float()));
    case Kind::String: {
      const std::string s = py_strip(v.str(), std::nullopt, true, true);
      try {
        size_t pos = 0;
        const int64_t base = need_int(arg_or(a, 1, "base", Value(10)), "int");
        const long long r = std::stoll(s, &pos, static_cast<int>(base));
        if (pos == s.size()) return Value(static_cast<int64_t>(r));
        size_t fpos = 0;
        const double d = std::stod(s, &fpos);
        if (fpos == s.size()) return Value(static_cast<int64_t>(d));
      } catch (...) {
      }
      return dflt;
    }
    default: return dflt;
  }
}

Value f_float(Interpreter&, const Value& v, CallArgs& a) {
  const Value dflt = arg_or(a, 0, "default", Value(0.0));
  if (v.is_number()) return Value(v.as_float());
  if (v.is_string()) {
    try {
      size_t pos = 0;
      const std::string s = py_strip(v.str(), std::nullopt, true, true);
      const double d = std::stod(s, &pos);
      if (pos == s.size()) return Value(d);
    } catch (...) {
    }
  }
  return dflt;
}

Value f_abs(Interpreter&, const Value& v, CallArgs&) {
  if (v.kind() == Kind::Float) return Value(std::fabs(v.as_float()));
  if (v.is_number()) return Value(static_cast<int64_t>(std::llabs(v.as_int())));
  raise("bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_round(Interpreter&, const Value& v, CallArgs& a) {
  if (!v.is_number()) raise("round expects a number");
  const int64_t prec = need_int(arg_or(a, 0, "precision", Value(0)), "round");
  const std::string method = soft_str(arg_or(a, 1, "method", Value("common")));
  const double m = std::pow(10.0, static_cast<double>(prec));
  double x = v.as_float() * m;
  if (method == "ceil") x = std::ceil(x);
  else if (method == "floor") x = std::floor(x);
  else x = std::round(x);
  return Value(x / m);
}

Value f_items(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::list({});
  if (v.kind() != Kind::Dict) raise("Can only get item pairs from a mapping.");
  List out;
  for (const auto& [k, val] : v.map().entries) out.push_back(Value::tuple({k, val}));
  return Value::list(std::move(out));
}

Value f_dictsort(Interpreter&, const Value& v, CallArgs& a) {
  if (v.kind() != Kind::Dict) raise("You can only sort by either \"key\" or \"value\"");
  const bool case_sensitive = truthy(arg_or(a, 0, "case_sensitive", Value(false)));
  const std::string by = soft_str(arg_or(a, 1, "by", Value("key")));
  const bool reverse = truthy(arg_or(a, 2, "reverse", Value(false)));
  List out;
  for (const auto& [k, val] : v.map().entries) out.push_back(Value::tuple({k, val}));
  const size_t idx = by == "value" ? 1 : 0;
  auto key = [&](const Value& t) {
    const Value& x = t.items()[idx];
    return (!case_sensitive && x.is_string()) ? Value(map_chars(x.str(), text::py_tolower)) : x;
  };
  std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
    return reverse ? py_less(key(y), key(x)) : py_less(key(x), key(y));
  });
  return Value::list(std::move(out));
}

Value f_reverse(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_string()) {
    std::u32string u = u32(v.str());
    std::reverse(u.begin(), u.end());
    return Value(u8(u));
  }
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_sort(Interpreter& in, const Value& v, CallArgs& a) {
  const bool reverse = truthy(arg_or(a, 0, "reverse", Value(false)));
  const bool case_sensitive = truthy(arg_or(a, 1, "case_sensitive", Value(false)));
  const auto attr = a.get(2, "attribute");
  List items = iterate(v);
  auto key = [&](const Value& x) {
    Value k = attr ? get_attribute_path(in, x, *attr) : x;
    return (!case_sensitive && k.is_string()) ? Value(map_chars(k.str(), text::py_tolower)) : k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? py_less(key(y), key(x)) : py_less(key(x), key(y));
  });
  return Value::list(std::move(items));
}

Value f_unique(Interpreter& in, const Value& v, CallArgs& a) {
  const bool case_sensitive = truthy(arg_or(a, 0, "case_sensitive", Value(false)));
  const auto attr = a.get(1, "attribute");
  List out, seen;
  for (const Value& x : iterate(v)) {
    Value k = attr ? get_attribute_path(in, x, *attr) : x;
    if (!case_sensitive && k.is_string()) k = Value(map_chars(k.str(), text::py_tolower));
    bool dup = false;
    for (const Value& s : seen) dup |= py_equal(s, k);
    if (!dup) {
      seen.push_back(k);
      out.push_back(x);
    }
  }
  return Value::list(std::move(out));
}

Value min_max(Interpreter& in, const Value& v, CallArgs& a, bool want_max) {
  const bool case_sensitive = truthy(arg_or(a, 0, "case_sensitive", Value(false)));
  const auto attr = a.get(1, "attribute");
  List items = iterate(v);
  if (items.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
  auto key = [&](const Value& x) {
    Value k = attr ? get_attribute_path(in, x, *attr) : x;
    return (!case_sensitive && k.is_string()) ? Value(map_chars(k.str(), text::py_tolower)) : k;
  };
  Value best = items[0];
  for (size_t i = 1; i < items.size(); ++i) {
    const bool better = want_max ? py_less(key(best), key(items[i])) : py_less(key(items[i]), key(best));
    if (better) best = items[i];
  }
  return best;
}
Value f_min(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, false); }
Value f_max(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, true); }

Value f_sum(Interpreter& in, const Value& v, CallArgs& a) {
  const auto attr = a.get(0, "attribute");
  Value total = arg_or(a, 1, "start", Value(0));
  for (const Value& x : iterate(v)) {
    const Value y = attr ? get_attribute_path(in, x, *attr) : x;
    if (!total.is_number() || !y.is_number()) raise("unsupported operand type(s) for +: '" + type_name(total) + "' and '" + type_name(y) + "'");
    total = (total.kind() == Kind::Float || y.kind() == Kind::Float) ? Value(total.as_float() + y.as_float())
                                                                    : Value(total.as_int() + y.as_int());
  }
  return total;
}

Value f_map(Interpreter& in, const Value& v, CallArgs& a) {
  List out;
  const auto attr = [&]() -> std::optional<Value> {
    for (const auto& [k, val] : a.keyword)
      if (k == "attribute") return val;
    return std::nullopt;
  }();
  if (attr) {
    std::optional<Value> dflt;
    for (const auto& [k, val] : a.keyword)
      if (k == "default") dflt = val;
    for (const Value& x : iterate(v)) {
      Value y = get_attribute_path(in, x, *attr);
      out.push_back((y.is_undefined() && dflt) ? *dflt : y);
    }
    return Value::list(std::move(out));
  }
  if (a.positional.empty()) raise("map requires a filter argument");
  const std::string name = need_str(a.positional[0], "map");
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& x : iterate(v)) {
    CallArgs copy = rest;
    out.push_back(in.apply_filter(name, x, copy));
  }
  return Value::list(std::move(out));
}

Value select_impl(Interpreter& in, const Value& v, CallArgs& a, bool by_attr, bool keep) {
  List out;
  size_t first = 0;
  std::optional<Value> attr;
  if (by_attr) {
    if (a.positional.empty()) raise("missing attribute for selectattr/rejectattr");
    attr = a.positional[0];
    first = 1;
  }
  std::optional<std::string> test;
  if (a.positional.size() > first) test = need_str(a.positional[first], "select");
  CallArgs targs;
  if (a.positional.size() > first + 1) targs.positional.assign(a.positional.begin() + static_cast<long>(first) + 1, a.positional.end());
  targs.keyword = a.keyword;
  for (const Value& x : iterate(v)) {
    const Value subject = attr ? get_attribute_path(in, x, *attr) : x;
    bool ok;
    if (test) {
      CallArgs copy = targs;
      ok = in.apply_test(*test, subject, copy);
    } else {
      ok = truthy(subject);
    }
    if (ok == keep) out.push_back(x);
  }
  return Value::list(std::move(out));
}
Value f_select(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, false, true); }
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, true, false); }

Value f_attr(Interpreter& in, const Value& v, CallArgs& a) {
  return in.getattr(v, need_str(arg_or(a, 0, "name", Value("")), "attr"));
}

Value f_indent(Interpreter&, const Value& v, CallArgs& a) {
  const Value w = arg_or(a, 0, "width", Value(4));
  const std::string pad = w.is_string() ? w.str() : std::string(static_cast<size_t>(std::max<int64_t>(0, need_int(w, "indent"))), ' ');
  const bool first = truthy(arg_or(a, 1, "first", Value(false)));
  const bool blank = truthy(arg_or(a, 2, "blank", Value(false)));
  std::string s = soft_str(v);
  std::string out;
  std::vector<std::string> lines = py_split(s, std::string("\n"), -1);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "\n";
    const bool is_blank = py_strip(lines[i], std::nullopt, true, true).empty();
    if ((i > 0 || first) && (blank || !is_blank)) out += pad;
    out += lines[i];
  }
  return Value(std::move(out));
}

Value f_center(Interpreter&, const Value& v, CallArgs& a) {
  const std::string s = soft_str(v);
  const int64_t width = need_int(arg_or(a, 0, "width", Value(80)), "center");
  const int64_t n = static_cast<int64_t>(text::utf8_length(s));
  if (width <= n) return Value(s);
  const int64_t total = width - n;
  const int64_t left = total / 2 + (total & width & 1);
  return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(total - left), ' '));
}

Value f_wordcount(Interpreter&, const Value& v, CallArgs&) {
  return Value(py_split(soft_str(v), std::nullopt, -1).size());
}

Value f_format(Interpreter& in, const Value& v, CallArgs& a) {
  CallArgs none;
  Value args = Value::tuple(a.positional);
  (void)in;
  (void)none;
  // Same as Python's "fmt % args".
  std::string fmt = need_str(v, "format");
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%' || i + 1 >= fmt.size()) {
      out.push_back(fmt[i]);
      continue;
    }
    const char c = fmt[++i];
    if (c == '%') {
      out.push_back('%');
      continue;
    }
    if (next >= a.positional.size()) raise("not enough arguments for format string");
    const Value& x = a.positional[next++];
    if (c == 's') out += soft_str(x);
    else if (c == 'r') out += repr(x);
    else if (c == 'd' || c == 'i') out += std::to_string(x.kind() == Kind::Float ? static_cast<int64_t>(x.as_float()) : x.as_int());
    else raise(std::string("unsupported format character '") + c + "'");
  }
  return Value(std::move(out));
}

Value f_truncate(Interpreter&, const Value& v, CallArgs& a) {
  const std::string s = soft_str(v);
  const int64_t length = need_int(arg_or(a, 0, "length", Value(255)), "truncate");
  const bool killwords = truthy(arg_or(a, 1, "killwords", Value(false)));
  const std::string end = soft_str(arg_or(a, 2, "end", Value("...")));
  const int64_t leeway = need_int(arg_or(a, 3, "leeway", Value(5)), "truncate");
  const std::u32string u = u32(s);
  const int64_t n = static_cast<int64_t>(u.size());
  if (n <= length + leeway) return Value(s);
  const int64_t keep = std::max<int64_t>(0, length - static_cast<int64_t>(text::utf8_length(end)));
  std::string head = u8(u.substr(0, static_cast<size_t>(keep)));
  if (killwords) return Value(head + end);
  const size_t sp = head.rfind(' ');
  if (sp != std::string::npos) head = head.substr(0, sp);
  return Value(head + end);
}

Value f_batch(Interpreter&, const Value& v, CallArgs& a) {
  const int64_t n = need_int(arg_or(a, 0, "linecount", Value(1)), "batch");
  if (n <= 0) raise("batch size must be positive");
  const auto fill = a.get(1, "fill_with");
  List out, cur;
  for (const Value& x : iterate(v)) {
    cur.push_back(x);
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::list(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (fill && !fill->is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*fill);
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

Value f_pprint(Interpreter&, const Value& v, CallArgs&) { return Value(repr(v)); }

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> m = {
      {"tojson", f_tojson},       {"length", f_length},       {"count", f_length},      {"default", f_default},
      {"d", f_default},           {"first", f_first},         {"last", f_last},         {"join", f_join},
      {"upper", f_upper},         {"lower", f_lower},         {"capitalize", f_capitalize}, {"title", f_title},
      {"trim", f_trim},           {"replace", f_replace},     {"list", f_list},         {"string", f_string},
      {"safe", f_safe},           {"e", f_escape},            {"escape", f_escape},     {"forceescape", f_escape},
      {"int", f_int},             {"float", f_float},         {"abs", f_abs},           {"round", f_round},
      {"items", f_items},         {"dictsort", f_dictsort},   {"reverse", f_reverse},   {"sort", f_sort},
      {"unique", f_unique},       {"min", f_min},             {"max", f_max},           {"sum", f_sum},
      {"map", f_map},             {"select", f_select},       {"reject", f_reject},     {"selectattr", f_selectattr},
      {"rejectattr", f_rejectattr}, {"attr", f_attr},         {"indent", f_indent},     {"center", f_center},
      {"wordcount", f_wordcount}, {"format", f_format},       {"truncate", f_truncate}, {"batch", f_batch},
      {"pprint", f_pprint},
  };
  return m;
}

// ---- tests

bool t_defined(Interpreter&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(Interpreter&, const Value& v, CallArgs&) { return v.is_none(); }
bool t_boolean(Interpreter&, const Value& v, CallArgs&) { return v.kind() == Kind::Bool; }
bool t_true(Interpreter&, const Value& v, CallArgs&) { return v.kind() == Kind::Bool && v.as_bool(); }
bool t_false(Interpreter&, const Value& v, CallArgs&) { return v.kind() == Kind::Bool && !v.as_bool(); }
bool t_integer(Interpreter&, const Value& v, CallArgs&) { return v.kind() == Kind::Int; }
bool t_float(Interpreter&, const Value& v, CallArgs&) { return v.kind() == Kind::Float; }
bool t_number(Interpreter&, const Value& v, CallArgs&) { return v.is_number(); }
bool t_string(Interpreter&, const Value& v, CallArgs&) { return v.is_string(); }
bool t_mapping(Interpreter&, const Value& v, CallArgs&) { return v.kind() == Kind::Dict; }
bool t_iterable(Interpreter&, const Value& v, CallArgs&) {
  // jinja2's Undefined defines __iter__, so an undefined value counts as iterable.
  return v.is_undefined() || v.is_string() || v.is_sequence() || v.kind() == Kind::Dict;
}
bool t_sequence(Interpreter&, const Value& v, CallArgs&) { return v.is_string() || v.is_sequence() || v.kind() == Kind::Dict; }
bool t_callable(Interpreter&, const Value& v, CallArgs&) { return v.kind() == Kind::Function; }
bool t_odd(Interpreter&, const Value& v, CallArgs&) { return need_int(v, "odd") % 2 != 0; }
bool t_even(Interpreter&, const Value& v, CallArgs&) { return need_int(v, "even") % 2 == 0; }
bool t_divisibleby(Interpreter&, const Value& v, CallArgs& a) {
  const int64_t n = need_int(arg_or(a, 0, "num", Value(1)), "divisibleby");
  if (n == 0) raise("integer division or modulo by zero");
  return need_int(v, "divisibleby") % n == 0;
}
Value need_arg(CallArgs& a, const char* name) {
  auto v = a.get(0, name);
  if (!v) raise(std::string("test requires an argument '") + name + "'");
  return *v;
}
bool t_eq(Interpreter&, const Value& v, CallArgs& a) { return py_equal(v, need_arg(a, "other")); }
bool t_ne(Interpreter&, const Value& v, CallArgs& a) { return !py_equal(v, need_arg(a, "other")); }
bool t_lt(Interpreter&, const Value& v, CallArgs& a) { return py_less(v, need_arg(a, "other")); }
bool t_gt(Interpreter&, const Value& v, CallArgs& a) { return py_less(need_arg(a, "other"), v); }
bool t_le(Interpreter&, const Value& v, CallArgs& a) {
  const Value o = need_arg(a, "other");
  return py_less(v, o) || py_equal(v, o);
}
bool t_ge(Interpreter&, const Value& v, CallArgs& a) {
  const Value o = need_arg(a, "other");
  return py_less(o, v) || py_equal(v, o);
}
bool t_in(Interpreter&, const Value& v, CallArgs& a) { return contains(need_arg(a, "seq"), v); }
bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  const Value o = need_arg(a, "other");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Kind::None:
    case Kind::Undefined: return true;
    case Kind::Bool: return v.as_bool() == o.as_bool();
    case Kind::Int: return v.as_int() == o.as_int();  // small ints are interned in CPython
    default: return v.identity() == o.identity();
  }
}
bool t_lower(Interpreter&, const Value& v, CallArgs&) {
  const std::string s = soft_str(v);
  return s == map_chars(s, text::py_tolower) && s != map_chars(s, text::py_toupper);
}
bool t_upper(Interpreter&, const Value& v, CallArgs&) {
  const std::string s = soft_str(v);
  return s == map_chars(s, text::py_toupper) && s != map_chars(s, text::py_tolower);
}
bool t_escaped(Interpreter&, const Value&, CallArgs&) { return false; }
bool t_filter(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && find_filter(v.str()) != nullptr; }
bool t_test(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && find_test(v.str()) != nullptr; }

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> m = {
      {"defined", t_defined},   {"undefined", t_undefined}, {"none", t_none},       {"boolean", t_boolean},
      {"true", t_true},         {"false", t_false},         {"integer", t_integer}, {"float", t_float},
      {"number", t_number},     {"string", t_string},       {"mapping", t_mapping}, {"iterable", t_iterable},
      {"sequence", t_sequence}, {"callable", t_callable},   {"odd", t_odd},         {"even", t_even},
      {"divisibleby", t_divisibleby}, {"eq", t_eq},         {"equalto", t_eq},      {"==", t_eq},
      {"ne", t_ne},             {"!=", t_ne},               {"lt", t_lt},           {"lessthan", t_lt},
      {"<", t_lt},              {"gt", t_gt},               {"greaterthan", t_gt},  {">", t_gt},
      {"le", t_le},             {"<=", t_le},               {"ge", t_ge},           {">=", t_ge},
      {"in", t_in},             {"sameas", t_sameas},       {"lower", t_lower},     {"upper", t_upper},
      {"escaped", t_escaped},   {"filter", t_filter},       {"test", t_test},
  };
  return m;
}

// ---- methods

Value str_method(const std::string& self, const std::string& name, CallArgs& a) {
  auto opt_chars = [&](size_t i, const char* n) -> std::optional<std::string> {
    const Value c = arg_or(a, i, n, Value::none());
    if (c.is_none()) return std::nullopt;
    return need_str(c, "strip");
  };
  if (name == "strip") return Value(py_strip(self, opt_chars(0, "chars"), true, true));
  if (name == "lstrip") return Value(py_strip(self, opt_chars(0, "chars"), true, false));
  if (name == "rstrip") return Value(py_strip(self, opt_chars(0, "chars"), false, true));
  if (name == "split" || name == "rsplit") {
    const Value sep = arg_or(a, 0, "sep", Value::none());
    const int64_t maxsplit = need_int(arg_or(a, 1, "maxsplit", Value(-1)), "split");
    const std::optional<std::string> s = sep.is_none() ? std::nullopt : std::optional<std::string>(need_str(sep, "split"));
    return str_list(name == "split" ? py_split(self, s, maxsplit) : py_rsplit(self, s, maxsplit));
  }
  if (name == "splitlines") {
    const bool keep = truthy(arg_or(a, 0, "keepends", Value(false)));
    std::vector<std::string> lines;
    size_t start = 0;
    for (size_t i = 0; i < self.size(); ++i) {
      if (self[i] == '\n' || self[i] == '\r') {
        size_t e = i + 1;
        if (self[i] == '\r' && e < self.size() && self[e] == '\n') ++e;
        lines.push_back(self.substr(start, (keep ? e : i) - start));
        start = e;
        i = e - 1;
      }
    }
    if (start < self.size()) lines.push_back(self.substr(start));
    return str_list(lines);
  }
  if (name == "startswith") return Value(starts_or_ends(self, arg_or(a, 0, "prefix", Value("")), true));
  if (name == "endswith") return Value(starts_or_ends(self, arg_or(a, 0, "suffix", Value("")), false));
  if (name == "upper") return Value(map_chars(self, text::py_toupper));
  if (name == "lower") return Value(map_chars(self, text::py_tolower));
  if (name == "title") return Value(py_title(self));
  if (name == "capitalize") return Value(py_capitalize(self));
  if (name == "swapcase") {
    std::u32string u = u32(self);
    for (char32_t& c : u) c = text::py_isupper(c) ? text::py_tolower(c) : text::py_toupper(c);
    return Value(u8(u));
  }
  if (name == "replace") {
    const Value count = arg_or(a, 2, "count", Value(-1));
    return Value(py_replace(self, need_str(arg_or(a, 0, "old", Value("")), "replace"),
                            need_str(arg_or(a, 1, "new", Value("")), "replace"), need_int(count, "replace")));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    const std::string sub = need_str(arg_or(a, 0, "sub", Value("")), name.c_str());
    if (name == "count") {
      if (sub.empty()) return Value(static_cast<int64_t>(text::utf8_length(self) + 1));
      int64_t n = 0;
      for (size_t p = self.find(sub); p != std::string::npos; p = self.find(sub, p + sub.size())) ++n;
      return Value(n);
    }
    const bool rev = name[0] == 'r';
    const size_t p = rev ? self.rfind(sub) : self.find(sub);
    if (p == std::string::npos) {
      if (name == "index" || name == "rindex") raise("substring not found");
      return Value(-1);
    }
    return Value(static_cast<int64_t>(text::utf8_length(std::string_view(self).substr(0, p))));
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const Value& v : iterate(arg_or(a, 0, "iterable", Value::list({})))) {
      if (!first) out += self;
      first = false;
      out += need_str(v, "join");
    }
    return Value(std::move(out));
  }
  auto all_of = [&](bool (*pred)(char32_t)) {
    const std::u32string u = u32(self);
    return Value(!u.empty() && std::all_of(u.begin(), u.end(), pred));
  };
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal") return all_of(text::py_isdigit);
  if (name == "isalpha") return all_of(text::py_isalpha);
  if (name == "isalnum") return all_of(text::py_isalnum);
  if (name == "isspace") return all_of(text::py_isspace);
  if (name == "isupper") {
    const std::u32string u = u32(self);
    bool cased = false;
    for (char32_t c : u) {
      if (text::py_islower(c)) return Value(false);
      cased |= text::py_isupper(c);
    }
    return Value(cased);
  }
  if (name == "islower") {
    const std::u32string u = u32(self);
    bool cased = false;
    for (char32_t c : u) {
      if (text::py_isupper(c)) return Value(false);
      cased |= text::py_islower(c);
    }
    return Value(cased);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const std::string x = need_str(arg_or(a, 0, "x", Value("")), name.c_str());
    if (name == "removeprefix") return Value(self.compare(0, x.size(), x) == 0 ? self.substr(x.size()) : self);
    return Value(x.size() <= self.size() && self.compare(self.size() - x.size(), x.size(), x) == 0
                     ? self.substr(0, self.size() - x.size())
                     : self);
  }
  if (name == "partition" || name == "rpartition") {
    const std::string sep = need_str(arg_or(a, 0, "sep", Value("")), name.c_str());
    if (sep.empty()) raise("empty separator");
    const size_t p = name == "partition" ? self.find(sep) : self.rfind(sep);
    if (p == std::string::npos)
      return name == "partition" ? Value::tuple({Value(self), Value(""), Value("")}) : Value::tuple({Value(""), Value(""), Value(self)});
    return Value::tuple({Value(self.substr(0, p)), Value(sep), Value(self.substr(p + sep.size()))});
  }
  if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill") {
    const int64_t width = need_int(arg_or(a, 0, "width", Value(0)), name.c_str());
    const int64_t n = static_cast<int64_t>(text::utf8_length(self));
    if (width <= n) return Value(self);
    if (name == "zfill") {
      std::string s = self;
      const size_t at = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
      s.insert(at, std::string(static_cast<size_t>(width - n), '0'));
      return Value(s);
    }
    const std::string fill = need_str(arg_or(a, 1, "fillchar", Value(" ")), name.c_str());
    auto rep = [&](int64_t k) {
      std::string r;
      for (int64_t i = 0; i < k; ++i) r += fill;
      return r;
    };
    const int64_t total = width - n;
    if (name == "ljust") return Value(self + rep(total));
    if (name == "rjust") return Value(rep(total) + self);
    const int64_t left = total / 2 + (total & width & 1);
    return Value(rep(left) + self + rep(total - left));
  }
  if (name == "format") {
    // str.format with {} / {0} / {name} fields (no format specs).
    std::string out;
    size_t auto_idx = 0;
    for (size_t i = 0; i < self.size(); ++i) {
      const char c = self[i];
      if (c == '{' && i + 1 < self.size() && self[i + 1] == '{') {
        out.push_back('{');
        ++i;
      } else if (c == '}' && i + 1 < self.size() && self[i + 1] == '}') {
        out.push_back('}');
        ++i;
      } else if (c == '{') {
        const size_t e = self.find('}', i);
        if (e == std::string::npos) raise("Single '{' encountered in format string");
        const std::string field = self.substr(i + 1, e - i - 1);
        Value v;
        if (field.empty()) {
          if (auto_idx >= a.positional.size()) raise("Replacement index out of range for positional args tuple");
          v = a.positional[auto_idx++];
        } else if (std::all_of(field.begin(), field.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
          const size_t k = std::stoul(field);
          if (k >= a.positional.size()) raise("Replacement index out of range for positional args tuple");
          v = a.positional[k];
        } else {
          auto kv = a.get(SIZE_MAX, field);
          if (!kv) raise("KeyError: '" + field + "'");
          v = *kv;
        }
        out += soft_str(v);
        i = e;
      } else {
        out.push_back(c);
      }
    }
    return Value(std::move(out));
  }
  raise("'str' object has no attribute '" + name + "'");
}

const char* const kStrMethods[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith",
                                   "endswith", "upper", "lower", "title", "capitalize", "swapcase", "replace",
                                   "find", "rfind", "index", "rindex", "count", "join", "isdigit", "isnumeric",
                                   "isdecimal", "isalpha", "isalnum", "isspace", "isupper", "islower",
                                   "removeprefix", "removesuffix", "partition", "rpartition", "center", "ljust",
                                   "rjust", "zfill", "format"};
const char* const kDictMethods[] = {"items", "keys", "values", "get", "copy"};
const char* const kDictUnsafe[] = {"pop", "popitem", "setdefault", "update", "clear"};
const char* const kListMethods[] = {"index", "count", "copy"};
const char* const kListUnsafe[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};

template <size_t N>
bool in_set(const char* const (&set)[N], const std::string& name) {
  for (const char* s : set)
    if (name == s) return true;
  return false;
}

}  // namespace

std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string u = u32(s);
  const std::u32string set = chars ? u32(*chars) : std::u32string();
  auto strip_me = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : py_isspace(c); };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_me(u[b])) ++b;
  if (right)
    while (e > b && strip_me(u[e - 1])) --e;
  if (b == 0 && e == u.size()) return s;
  return u8(u.substr(b, e - b));
}

FilterFn find_filter(const std::string& name) {
  auto it = filters().find(name);
  return it == filters().end() ? nullptr : it->second;
}

TestFn find_test(const std::string& name) {
  auto it = tests().find(name);
  return it == tests().end() ? nullptr : it->second;
}

std::optional<Value> get_method(const Value& obj, const std::string& name) {
  auto unsafe = [&]() {
    return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.");
  };
  switch (obj.kind()) {
    case Kind::String: {
      if (!in_set(kStrMethods, name)) return std::nullopt;
      const Value self = obj;  // shares the string instead of copying it
      return make_fn(name, [self, name](Interpreter&, CallArgs& a) { return str_method(self.str(), name, a); });
    }
    case Kind::Dict: {
      if (in_set(kDictUnsafe, name)) return unsafe();
      if (!in_set(kDictMethods, name)) return std::nullopt;
      const Value self = obj;
      return make_fn(name, [self, name](Interpreter&, CallArgs& a) -> Value {
        const Dict& d = self.map();
        if (name == "items") {
          List out;
          for (const auto& [k, v] : d.entries) out.push_back(Value::tuple({k, v}));
          return Value::list(std::move(out));
        }
        if (name == "keys" || name == "values") {
          List out;
          for (const auto& [k, v] : d.entries) out.push_back(name == "keys" ? k : v);
          return Value::list(std::move(out));
        }
        if (name == "get") {
          auto key = a.get(0, "key");
          if (!key) raise("get expected at least 1 argument, got 0");
          const Value* v = d.find(*key);
          return v ? *v : arg_or(a, 1, "default", Value::none());
        }
        auto copy = std::make_shared<Dict>();
        for (const auto& [k, v] : d.entries) copy->set(k, v);
        return Value::dict(copy);
      });
    }
    case Kind::List:
    case Kind::Tuple: {
      if (obj.kind() == Kind::List && in_set(kListUnsafe, name)) return unsafe();
      if (!in_set(kListMethods, name) || (obj.kind() == Kind::Tuple && name == "copy")) return std::nullopt;
      const Value self = obj;
      return make_fn(name, [self, name](Interpreter&, CallArgs& a) -> Value {
        if (name == "copy") return Value::list(self.items());
        auto x = a.get(0, "value");
        if (!x) raise(name + " expected 1 argument");
        int64_t count = 0;
        for (size_t i = 0; i < self.items().size(); ++i) {
          if (py_equal(self.items()[i], *x)) {
            if (name == "index") return Value(static_cast<int64_t>(i));
            ++count;
          }
        }
        if (name == "index") raise(repr(*x) + " is not in list");
        return Value(count);
      });
    }
    default: return std::nullopt;
  }
}

void install_globals(Scope& g) {
  g.vars["range"] = make_fn("range", [](Interpreter&, CallArgs& a) -> Value {
    int64_t start = 0, stop, step = 1;
    if (a.positional.empty()) raise("range expected at least 1 argument, got 0");
    if (a.positional.size() == 1) {
      stop = need_int(a.positional[0], "range");
    } else {
      start = need_int(a.positional[0], "range");
      stop = need_int(a.positional[1], "range");
      if (a.positional.size() > 2) step = need_int(a.positional[2], "range");
    }
    if (step == 0) raise("range() arg 3 must not be zero");
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      // The sandbox caps ranges (jinja2 MAX_RANGE).
      if (out.size() >= 100000) raise("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      out.emplace_back(i);
    }
    return Value::list(std::move(out));
  });
  g.vars["namespace"] = make_fn("namespace", [](Interpreter&, CallArgs& a) -> Value {
    auto d = std::make_shared<Dict>();
    for (const Value& p : a.positional) {
      if (p.kind() != Kind::Dict) raise("namespace() positional argument must be a mapping");
      for (const auto& [k, v] : p.map().entries) d->set(k, v);
    }
    for (const auto& [k, v] : a.keyword) d->set(Value(k), v);
    return Value::namespace_(d);
  });
  g.vars["dict"] = make_fn("dict", [](Interpreter&, CallArgs& a) -> Value {
    auto d = std::make_shared<Dict>();
    for (const Value& p : a.positional) {
      if (p.kind() == Kind::Dict) {
        for (const auto& [k, v] : p.map().entries) d->set(k, v);
      } else {
        for (const Value& kv : iterate(p)) {
          const List pair = iterate(kv);
          if (pair.size() != 2) raise("dictionary update sequence element has wrong length");
          d->set(pair[0], pair[1]);
        }
      }
    }
    for (const auto& [k, v] : a.keyword) d->set(Value(k), v);
    return Value::dict(d);
  });
  g.vars["raise_exception"] = make_fn("raise_exception", [](Interpreter&, CallArgs& a) -> Value {
    raise("template raised an exception: " + (a.positional.empty() ? std::string() : soft_str(a.positional[0])));
  });
  g.vars["strftime_now"] = make_fn("strftime_now", [](Interpreter&, CallArgs& a) -> Value {
    const std::string fmt = a.positional.empty() ? std::string("%Y-%m-%d") : need_str(a.positional[0], "strftime_now");
    const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
    return Value(std::string(buf, n));
  });
  g.vars["cycler"] = make_fn("cycler", [](Interpreter&, CallArgs& a) -> Value {
    auto d = std::make_shared<Dict>();
    auto items = std::make_shared<List>(a.positional);
    auto pos = std::make_shared<size_t>(0);
    d->set(Value("next"), make_fn("next", [items, pos](Interpreter&, CallArgs&) -> Value {
             if (items->empty()) return Value::none();
             Value v = (*items)[*pos % items->size()];
             ++*pos;
             return v;
           }));
    d->set(Value("reset"), make_fn("reset", [pos](Interpreter&, CallArgs&) -> Value {
             *pos = 0;
             return Value::none();
           }));
    return Value::namespace_(d);
  });
  g.vars["joiner"] = make_fn("joiner", [](Interpreter&, CallArgs& a) -> Value {
    const std::string sep = a.positional.empty() ? std::string(", ") : soft_str(a.positional[0]);
    auto used = std::make_shared<bool>(false);
    return make_fn("joiner", [sep, used](Interpreter&, CallArgs&) -> Value {
      if (!*used) {
        *used = true;
        return Value("");
      }
      return Value(sep);
    });
  });
}

}  // namespace ft::jinja
