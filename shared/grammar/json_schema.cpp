#include "shared/grammar/json_schema.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "shared/grammar/codepoints.h"
#include "shared/grammar/regex.h"

namespace ft::grammar {

namespace {

// ordered: properties are written in the order the schema lists them.
using json = nlohmann::ordered_json;

// Integers are written with at most this many digits (doubles carry no more).
constexpr int kMaxIntDigits = 16;
constexpr int64_t kIntLimit = 9999999999999999;  // 16 digits

[[noreturn]] void fail(const std::string& path, const std::string& what) { throw GrammarError(what + " at " + path); }

// ---- integer ranges as digit patterns

std::string repeat_char(char c, size_t n) { return std::string(n, c); }

// Decimal strings of equal length n, lo ≤ x ≤ hi digit-wise.
int32_t same_length_range(Grammar& g, const std::string& lo, const std::string& hi) {
  if (lo.empty()) return g.empty();
  if (lo == hi) return g.literal(lo);
  const char a = lo[0], b = hi[0];
  const std::string lr = lo.substr(1), hr = hi.substr(1);
  if (a == b) return g.seq({g.byte(uint8_t(a)), same_length_range(g, lr, hr)});
  std::vector<int32_t> alts;
  alts.push_back(g.seq({g.byte(uint8_t(a)), same_length_range(g, lr, repeat_char('9', lr.size()))}));
  if (b - a >= 2)
    alts.push_back(g.seq({g.bytes(ByteSet::range(uint8_t(a + 1), uint8_t(b - 1))),
                          g.repeat(g.bytes(ByteSet::range('0', '9')), int32_t(lr.size()), int32_t(lr.size()))}));
  alts.push_back(g.seq({g.byte(uint8_t(b)), same_length_range(g, repeat_char('0', hr.size()), hr)}));
  return g.alt(std::move(alts));
}

// 0 ≤ lo ≤ hi, written without leading zeros.
int32_t nonneg_range(Grammar& g, int64_t lo, int64_t hi) {
  const std::string ls = std::to_string(lo), hs = std::to_string(hi);
  std::vector<int32_t> alts;
  for (size_t d = ls.size(); d <= hs.size(); ++d) {
    const std::string a = d == ls.size() ? ls : "1" + repeat_char('0', d - 1);
    const std::string b = d == hs.size() ? hs : repeat_char('9', d);
    alts.push_back(same_length_range(g, a, b));
  }
  return g.alt(std::move(alts));
}

int32_t int_range(Grammar& g, int64_t lo, int64_t hi) {
  lo = std::max(lo, -kIntLimit);
  hi = std::min(hi, kIntLimit);
  if (lo > hi) return g.nothing();
  std::vector<int32_t> alts;
  if (lo < 0) alts.push_back(g.seq({g.byte('-'), nonneg_range(g, std::max<int64_t>(1, -hi), -lo)}));
  if (hi >= 0) alts.push_back(nonneg_range(g, std::max<int64_t>(0, lo), hi));
  return g.alt(std::move(alts));
}

// A JSON schema number keyword as an int64 bound (clamped to the digits we write).
double bound_value(const json& v, const std::string& path, const char* kw) {
  if (!v.is_number()) fail(path, std::string("'") + kw + "' must be a number");
  return v.get<double>();
}

class SchemaCompiler {
 public:
  SchemaCompiler(Grammar& g, const json& root) : g_(g), root_(root) {}

  int32_t value(const json& s, const std::string& path) {
    if (s.is_boolean()) return s.get<bool>() ? any_value() : g_.nothing();
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    if (auto it = s.find("$ref"); it != s.end()) return ref(s, *it, path);
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!known(it.key())) fail(path, "unsupported keyword '" + it.key() + "'");
    if (auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->size() != 1) fail(path + "/allOf", "'allOf' is supported only with one schema");
      if (s.size() > 1 + annotations(s)) fail(path, "'allOf' next to other keywords is not supported");
      return value((*it)[0], path + "/allOf/0");
    }
    for (const char* kw : {"anyOf", "oneOf"})
      if (auto it = s.find(kw); it != s.end()) {
        if (!it->is_array() || it->empty()) fail(path + "/" + kw, std::string("'") + kw + "' must be a non-empty array");
        // Sibling keywords apply to every branch: merge them in.
        json base = s;
        base.erase(kw);
        std::vector<int32_t> alts;
        for (size_t i = 0; i < it->size(); ++i) {
          json branch = (*it)[i];
          if (branch.is_object() && base.size() > annotations(base)) {
            for (auto b = base.begin(); b != base.end(); ++b)
              if (!branch.contains(b.key())) branch[b.key()] = b.value();
          }
          alts.push_back(value(branch, path + "/" + kw + "/" + std::to_string(i)));
        }
        return g_.alt(std::move(alts));
      }
    if (auto it = s.find("const"); it != s.end()) return literal_value(*it);
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) fail(path + "/enum", "'enum' must be a non-empty array");
      std::vector<std::string> words;
      for (const json& v : *it) words.push_back(v.dump(-1, ' ', false, json::error_handler_t::replace));
      return g_.literals(words);
    }
    std::vector<std::string> types;
    if (auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) types.push_back(it->get<std::string>());
      else if (it->is_array())
        for (const json& t : *it) {
          if (!t.is_string()) fail(path + "/type", "'type' must be a string or an array of strings");
          types.push_back(t.get<std::string>());
        }
      else fail(path + "/type", "'type' must be a string or an array of strings");
    } else {
      // No type: infer from the keywords, or any value.
      if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) types.push_back("object");
      else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems")) types.push_back("array");
      else if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern") || s.contains("format")) types.push_back("string");
      else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum")) types.push_back("number");
      else return any_value();
    }
    std::vector<int32_t> alts;
    for (const std::string& t : types) {
      if (t == "object") alts.push_back(object(s, path));
      else if (t == "array") alts.push_back(array(s, path));
      else if (t == "string") alts.push_back(string(s, path, false));
      else if (t == "integer") alts.push_back(number(s, path, true));
      else if (t == "number") alts.push_back(number(s, path, false));
      else if (t == "boolean") alts.push_back(g_.alt({g_.literal("true"), g_.literal("false")}));
      else if (t == "null") alts.push_back(g_.literal("null"));
      else fail(path + "/type", "unknown type '" + t + "'");
    }
    return g_.alt(std::move(alts));
  }

  // A string schema written raw (tool-call values) or as a JSON string.
  int32_t string(const json& s, const std::string& path, bool raw) {
    const CharContext ctx = raw ? CharContext::TagText : CharContext::JsonString;
    if (raw) {
      for (auto it = s.begin(); it != s.end(); ++it)
        if (!known(it.key())) fail(path, "unsupported keyword '" + it.key() + "'");
      std::vector<std::string> words;
      if (auto c = s.find("const"); c != s.end()) words.push_back(raw_word(*c, path + "/const"));
      if (auto e = s.find("enum"); e != s.end()) {
        if (!e->is_array() || e->empty()) fail(path + "/enum", "'enum' must be a non-empty array");
        for (const json& v : *e) words.push_back(raw_word(v, path + "/enum"));
      }
      if (!words.empty()) return g_.literals(words);
    }
    int32_t body = -1;
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    if (auto it = s.find("pattern"); it != s.end()) {
      if (!it->is_string()) fail(path + "/pattern", "'pattern' must be a string");
      if (has_len) fail(path, "'pattern' together with 'minLength'/'maxLength' is not supported");
      try {
        body = regex_expr(g_, it->get<std::string>(), ctx);
      } catch (const GrammarError& e) {
        fail(path + "/pattern", std::string("bad 'pattern': ") + e.what());
      }
    } else if (auto f = s.find("format"); f != s.end()) {
      if (!f->is_string()) fail(path + "/format", "'format' must be a string");
      if (has_len) fail(path, "'format' together with 'minLength'/'maxLength' is not supported");
      body = format(f->get<std::string>(), path + "/format", ctx);
    } else {
      const int64_t lo = length(s, "minLength", path, 0);
      const int64_t hi = length(s, "maxLength", path, kUnbounded);
      if (hi != kUnbounded && hi < lo) fail(path, "'maxLength' is below 'minLength'");
      // A length bound counts characters; JavaScript validators (zod, the openai client's parse
      // helpers) count UTF-16 code units, in which a character beyond U+FFFF is two. Bounded
      // strings leave those characters out, so every validator sees the same length.
      CodepointSet chars = CodepointSet::all();
      const bool bounded = lo > 0 || hi != kUnbounded;
      if (bounded) chars.remove(0x10000, kMaxCodepoint);
      const int32_t ch = char_set_expr(g_, chars, ctx);
      if (!raw) {
        body = g_.repeat(ch, int32_t(lo), int32_t(hi));
      } else {
        // The parser strips surrounding whitespace: raw values neither start nor end with it.
        CodepointSet edge_set = chars;
        edge_set.remove(space_class());
        const int32_t edge = char_set_expr(g_, edge_set, ctx);
        std::vector<int32_t> alts;
        if (lo == 0) alts.push_back(g_.empty());
        if (hi == kUnbounded || hi >= 1) {
          if (lo <= 1) alts.push_back(edge);
          if (hi == kUnbounded || hi >= 2)
            alts.push_back(g_.seq({edge, g_.repeat(ch, int32_t(std::max<int64_t>(0, lo - 2)), hi == kUnbounded ? kUnbounded : int32_t(hi - 2)), edge}));
        }
        body = g_.alt(std::move(alts));
      }
    }
    return raw ? body : g_.seq({g_.byte('"'), body, g_.byte('"')});
  }

  static std::string raw_word(const json& v, const std::string& path) {
    if (!v.is_string()) fail(path, "a string parameter's values must be strings");
    const std::string w = v.get<std::string>();
    if (w.find('<') != std::string::npos) fail(path, "raw string values cannot contain '<'");
    return w;
  }

  int32_t any_value() {
    if (int32_t r = g_.shared_rule("json-value"); r >= 0) return g_.ref(r);
    const int32_t value = g_.add_rule("json-value");
    g_.set_shared_rule("json-value", value);
    const int32_t obj = g_.add_rule("json-object"), arr = g_.add_rule("json-array");
    const int32_t v = g_.ref(value);
    const int32_t key = any_string();
    const int32_t member = g_.seq({key, g_.byte(':'), sp(), v});
    g_.define(obj, g_.seq({g_.byte('{'), g_.opt(g_.seq({member, g_.star(g_.seq({g_.byte(','), sp(), member}))})), g_.byte('}')}));
    g_.define(arr, g_.seq({g_.byte('['), g_.opt(g_.seq({v, g_.star(g_.seq({g_.byte(','), sp(), v}))})), g_.byte(']')}));
    g_.define(value, g_.alt({g_.ref(obj), g_.ref(arr), any_string(), plain_number(false), g_.literal("true"),
                             g_.literal("false"), g_.literal("null")}));
    return g_.ref(value);
  }

  int32_t any_object() {
    any_value();
    return g_.ref(g_.find_rule("json-object"));
  }

  int32_t tag_arguments(const json& s, const TagPair& pair, const std::string& path) {
    if (!s.is_object()) fail(path, "'parameters' must be an object schema");
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!known(it.key())) fail(path, "unsupported keyword '" + it.key() + "'");
    if (auto t = s.find("type"); t != s.end() && *t != json("object")) fail(path + "/type", "tool parameters must be of type 'object'");
    return members(s, path, [&](const std::string& key, const json& ps, const std::string& ppath) {
      const bool raw = ps.is_object() && ps.value("type", json()) == json("string");
      return pair(key, raw ? string(ps, ppath, true) : value(ps, ppath));
    }, g_.empty(), -1);
  }

 private:
  static bool known(const std::string& k) {
    static const std::set<std::string> ok = {
        "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
        "enum", "const", "anyOf", "oneOf", "allOf", "minLength", "maxLength", "pattern", "format", "minimum",
        "maximum", "exclusiveMinimum", "exclusiveMaximum", "$ref", "$defs", "definitions", "title", "description",
        "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly", "writeOnly", "strict"};
    return ok.count(k) != 0;
  }
  static size_t annotations(const json& s) {
    size_t n = 0;
    for (const char* k : {"title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
                          "readOnly", "writeOnly", "$defs", "definitions", "strict"})
      n += s.contains(k) ? 1 : 0;
    return n;
  }

  int32_t sp() { return g_.opt(g_.byte(' ')); }

  int32_t any_string() {
    if (int32_t r = g_.shared_rule("json-string"); r >= 0) return g_.ref(r);
    const int32_t r = g_.add_rule("json-string");
    g_.set_shared_rule("json-string", r);
    g_.define(r, g_.seq({g_.byte('"'), g_.star(char_set_expr(g_, CodepointSet::all(), CharContext::JsonString)), g_.byte('"')}));
    return g_.ref(r);
  }

  int32_t digits(int32_t lo, int32_t hi) { return g_.repeat(g_.bytes(ByteSet::range('0', '9')), lo, hi); }

  int32_t plain_int() {
    return g_.seq({g_.opt(g_.byte('-')),
                   g_.alt({g_.byte('0'), g_.seq({g_.bytes(ByteSet::range('1', '9')), digits(0, kMaxIntDigits - 1)})})});
  }
  int32_t fraction() { return g_.seq({g_.byte('.'), digits(1, kMaxIntDigits)}); }

  int32_t plain_number(bool integer) {
    const char* key = integer ? "json-integer" : "json-number";
    if (int32_t r = g_.shared_rule(key); r >= 0) return g_.ref(r);
    const int32_t r = g_.add_rule(key);
    g_.set_shared_rule(key, r);
    if (integer) {
      g_.define(r, plain_int());
    } else {
      const int32_t exp = g_.seq({g_.bytes(ByteSet::of('e')), g_.opt(g_.bytes(ByteSet::of('-'))), digits(1, 2)});
      g_.define(r, g_.seq({plain_int(), g_.opt(fraction()), g_.opt(exp)}));
    }
    return g_.ref(r);
  }

  int32_t number(const json& s, const std::string& path, bool integer) {
    const bool has_lo = s.contains("minimum") || s.contains("exclusiveMinimum");
    const bool has_hi = s.contains("maximum") || s.contains("exclusiveMaximum");
    if (!has_lo && !has_hi) return plain_number(integer);
    // Bounds: integer parts by digit ranges; a fraction only where it cannot cross a bound.
    double lo = -double(kIntLimit), hi = double(kIntLimit);
    bool lo_ex = false, hi_ex = false;
    if (auto it = s.find("minimum"); it != s.end()) lo = bound_value(*it, path + "/minimum", "minimum");
    if (auto it = s.find("exclusiveMinimum"); it != s.end()) {
      const double v = bound_value(*it, path + "/exclusiveMinimum", "exclusiveMinimum");
      if (v >= lo) lo = v, lo_ex = true;
    }
    if (auto it = s.find("maximum"); it != s.end()) hi = bound_value(*it, path + "/maximum", "maximum");
    if (auto it = s.find("exclusiveMaximum"); it != s.end()) {
      const double v = bound_value(*it, path + "/exclusiveMaximum", "exclusiveMaximum");
      if (v <= hi) hi = v, hi_ex = true;
    }
    lo = std::max(lo, -double(kIntLimit));
    hi = std::min(hi, double(kIntLimit));
    // Smallest and largest integers inside the bounds.
    const int64_t ilo = int64_t(lo_ex && std::floor(lo) == lo ? lo + 1 : std::ceil(lo));
    const int64_t ihi = int64_t(hi_ex && std::floor(hi) == hi ? hi - 1 : std::floor(hi));
    if (ilo > ihi) fail(path, "no " + std::string(integer ? "integer" : "number") + " we can write lies within the bounds");
    if (integer) return int_range(g_, ilo, ihi);
    // Non-negative integer parts below ihi may take a fraction (i.f < i + 1 ≤ ihi ≤ hi).
    std::vector<int32_t> alts;
    alts.push_back(int_range(g_, ilo, ihi));
    if (std::max<int64_t>(ilo, 0) <= ihi - 1) alts.push_back(g_.seq({int_range(g_, std::max<int64_t>(ilo, 0), ihi - 1), fraction()}));
    return g_.alt(std::move(alts));
  }

  int64_t length(const json& s, const char* kw, const std::string& path, int64_t dflt) {
    auto it = s.find(kw);
    if (it == s.end()) return dflt;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) fail(path + "/" + kw, std::string("'") + kw + "' must be a non-negative integer");
    if (it->get<int64_t>() > kMaxRepeat) fail(path + "/" + kw, std::string("'") + kw + "' above " + std::to_string(kMaxRepeat) + " is not supported");
    return it->get<int64_t>();
  }

  int32_t format(const std::string& f, const std::string& path, CharContext ctx) {
    auto re = [&](const char* p) { return regex_expr(g_, p, ctx); };
    if (f == "date") return re(date_re);
    if (f == "time") return re(time_re);
    if (f == "date-time") return g_.seq({re(date_re), g_.byte('T'), re(time_re)});
    if (f == "uuid") return re("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}");
    if (f == "email") return re("[a-z0-9]{1,20}@[a-z0-9]{1,20}\\.[a-z]{2,6}");
    if (f == "ipv4") return re("((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])");
    fail(path, "unsupported string format '" + f + "' (supported: date, time, date-time, uuid, email, ipv4)");
  }
  // Days that exist in every year (no 29 February).
  static constexpr const char* date_re =
      "[0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))";
  static constexpr const char* time_re = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]Z";

  int32_t literal_value(const json& v) { return g_.literal(v.dump(-1, ' ', false, json::error_handler_t::replace)); }

  int32_t ref(const json& s, const json& r, const std::string& path) {
    if (!r.is_string()) fail(path + "/$ref", "'$ref' must be a string");
    const std::string target = r.get<std::string>();
    if (auto it = ref_rules_.find(target); it != ref_rules_.end()) return g_.ref(it->second);
    const json* t = nullptr;
    if (target == "#") {
      t = &root_;
    } else if (target.rfind("#/", 0) == 0) {
      // JSON pointer into the root document.
      try {
        t = &root_.at(json::json_pointer(target.substr(1)));
      } catch (const json::exception&) {
        fail(path + "/$ref", "'$ref' target '" + target + "' does not exist");
      }
    } else {
      fail(path + "/$ref", "only local '$ref's (\"#/...\") are supported, got '" + target + "'");
    }
    const int32_t rule = g_.add_rule("ref" + target.substr(1));
    ref_rules_[target] = rule;
    g_.define(rule, value(*t, target));
    return g_.ref(rule);
  }

  using MemberFn = std::function<int32_t(const std::string&, const json&, const std::string&)>;

  // The declared properties in order, required ones always; then `extra` (more members, or
  // empty). open/sep: what precedes the first member and separates the others.
  int32_t members(const json& s, const std::string& path, const MemberFn& member, int32_t sep, int32_t extra_member) {
    std::vector<std::string> names;
    std::vector<int32_t> exprs;
    std::set<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) fail(path + "/required", "'required' must be an array of strings");
      for (const json& r : *it) {
        if (!r.is_string()) fail(path + "/required", "'required' must be an array of strings");
        required.insert(r.get<std::string>());
      }
    }
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) fail(path + "/properties", "'properties' must be an object");
      for (auto p = it->begin(); p != it->end(); ++p) {
        names.push_back(p.key());
        exprs.push_back(member(p.key(), p.value(), path + "/properties/" + p.key()));
      }
    }
    for (const std::string& r : required)
      if (std::find(names.begin(), names.end(), r) == names.end())
        fail(path + "/required", "required property '" + r + "' is not in 'properties'");
    // rest[k][after]: members k.. given whether one was written already (then a separator comes
    // first). Built back to front as rules so the size stays linear in the property count.
    const size_t n = names.size();
    int32_t next_first = g_.empty(), next_after = g_.empty();
    if (extra_member >= 0) {
      next_first = g_.opt(g_.seq({extra_member, g_.star(g_.seq({sep, extra_member}))}));
      next_after = g_.star(g_.seq({sep, extra_member}));
    }
    for (size_t k = n; k-- > 0;) {
      const bool req = required.count(names[k]) != 0;
      const int32_t rf = g_.add_rule("members"), ra = g_.add_rule("members");
      const int32_t with_first = g_.seq({exprs[k], next_after});
      const int32_t with_after = g_.seq({sep, exprs[k], next_after});
      g_.define(rf, req ? with_first : g_.alt({with_first, next_first}));
      g_.define(ra, req ? with_after : g_.alt({with_after, next_after}));
      next_first = g_.ref(rf);
      next_after = g_.ref(ra);
    }
    return next_first;
  }

  int32_t object(const json& s, const std::string& path) {
    int32_t extra = -1;
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      if (it->is_boolean() ? it->get<bool>() : true) {
        const int32_t v = it->is_boolean() ? any_value() : value(*it, path + "/additionalProperties");
        extra = g_.seq({any_string(), g_.byte(':'), sp(), v});
      }
    } else if (!s.contains("properties")) {
      extra = g_.seq({any_string(), g_.byte(':'), sp(), any_value()});  // {"type": "object"} alone: any object
    }
    const int32_t sep = g_.seq({g_.byte(','), sp()});
    const int32_t body = members(s, path, [&](const std::string& key, const json& ps, const std::string& ppath) {
      return g_.seq({literal_value(json(key)), g_.byte(':'), sp(), value(ps, ppath)});
    }, sep, extra);
    return g_.seq({g_.byte('{'), body, g_.byte('}')});
  }

  int32_t array(const json& s, const std::string& path) {
    if (auto u = s.find("uniqueItems"); u != s.end() && *u == json(true)) fail(path, "unsupported keyword 'uniqueItems'");
    const int64_t lo = length(s, "minItems", path, 0);
    const int64_t hi = length(s, "maxItems", path, kUnbounded);
    if (hi != kUnbounded && hi < lo) fail(path, "'maxItems' is below 'minItems'");
    std::vector<int32_t> prefix;
    if (auto it = s.find("prefixItems"); it != s.end()) {
      if (!it->is_array()) fail(path + "/prefixItems", "'prefixItems' must be an array");
      for (size_t i = 0; i < it->size(); ++i) prefix.push_back(value((*it)[i], path + "/prefixItems/" + std::to_string(i)));
    }
    int32_t item = -1;
    if (auto it = s.find("items"); it != s.end()) {
      if (it->is_array()) fail(path + "/items", "array-form 'items' is not supported; use 'prefixItems'");
      item = value(*it, path + "/items");
    } else {
      item = prefix.empty() ? any_value() : g_.nothing();  // after prefixItems, none unless 'items'
    }
    const int32_t sep = g_.seq({g_.byte(','), sp()});
    // Prefix items in order (as many as the bounds allow), then items up to the bounds.
    std::vector<int32_t> alts;
    const int64_t np = int64_t(prefix.size());
    for (int64_t k = 0; k <= np; ++k) {
      // Exactly k prefix items, and more only when k == np.
      if (k < np && (k < lo || (hi != kUnbounded && k > hi))) continue;
      if (k > 0 && hi != kUnbounded && k > hi) break;
      std::vector<int32_t> parts;
      for (int64_t i = 0; i < k; ++i) {
        if (i) parts.push_back(sep);
        parts.push_back(prefix[size_t(i)]);
      }
      if (k == np) {
        const int64_t more_lo = std::max<int64_t>(0, lo - np);
        const int64_t more_hi = hi == kUnbounded ? kUnbounded : hi - np;
        if (more_hi != kUnbounded && more_hi < 0) continue;
        if (g_.expr(item).op == Op::Nothing) {
          if (more_lo > 0) continue;
        } else if (more_hi != 0) {
          int32_t rest;
          if (np == 0) {
            // item (sep item){lo-1, hi-1}, optional when lo == 0.
            const int32_t tail = g_.repeat(g_.seq({sep, item}), int32_t(std::max<int64_t>(0, more_lo - 1)),
                                           more_hi == kUnbounded ? kUnbounded : int32_t(more_hi - 1));
            rest = g_.seq({item, tail});
            if (more_lo == 0) rest = g_.opt(rest);
          } else {
            rest = g_.repeat(g_.seq({sep, item}), int32_t(more_lo), more_hi == kUnbounded ? kUnbounded : int32_t(more_hi));
          }
          parts.push_back(rest);
        } else if (more_lo > 0) {
          continue;
        }
      }
      alts.push_back(g_.seq(parts));
    }
    if (alts.empty()) fail(path, "no array satisfies 'minItems'/'maxItems' with these items");
    return g_.seq({g_.byte('['), g_.alt(std::move(alts)), g_.byte(']')});
  }

  Grammar& g_;
  const json& root_;
  std::map<std::string, int32_t> ref_rules_;
};

json parse_schema(std::string_view text) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw GrammarError(std::string("the schema is not valid JSON: ") + e.what());
  }
}

}  // namespace

int32_t json_schema_rule(Grammar& g, std::string_view schema_json) {
  const json root = parse_schema(schema_json);
  SchemaCompiler c(g, root);
  const int32_t r = g.add_rule("root-value");
  g.define(r, c.value(root, "#"));
  return r;
}

int32_t json_object_rule(Grammar& g) {
  const json root = json::object();
  SchemaCompiler c(g, root);
  const int32_t r = g.add_rule("root-object");
  g.define(r, c.any_object());
  return r;
}

int32_t tag_arguments_expr(Grammar& g, std::string_view params_schema_json, const TagPair& pair, const std::string& path) {
  const json root = parse_schema(params_schema_json);
  SchemaCompiler c(g, root);
  return c.tag_arguments(root, pair, path);
}

}  // namespace ft::grammar
