#include "gateway/request_fields.h"

#include <cmath>

namespace ft::gateway::request_fields {

[[noreturn]] void bad(const std::string& param, const std::string& msg) { throw ApiError::bad_field(param, msg); }

[[noreturn]] void unsupported(const std::string& param, const std::string& msg) {
  throw ApiError{400, msg, param, "invalid_request_error", "unsupported_parameter"};
}

std::string type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    default: return "an integer";
  }
}

std::string show(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

json parse_object(std::string_view body) {
  if (body.empty()) throw ApiError{400, "the request body is empty; expected a JSON object", "", "invalid_request_error", "invalid_json"};
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    throw ApiError{400, std::string("the request body is not valid JSON: ") + e.what(), "", "invalid_request_error",
                   "invalid_json"};
  }
  if (!j.is_object())
    throw ApiError{400, "the request body must be a JSON object, got " + type_name(j), "", "invalid_request_error",
                   "invalid_json"};
  return j;
}

// A present, non-null field.
const json* field(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

double number(const json& v, const std::string& p, double lo, double hi, bool lo_open) {
  if (!v.is_number()) bad(p, "'" + p + "' must be a number, got " + type_name(v));
  double x = v.get<double>();
  if (!std::isfinite(x) || x > hi || (lo_open ? x <= lo : x < lo)) {
    std::string range = (lo_open ? "(" : "[") + show(json(lo)) + ", " + show(json(hi)) + "]";
    bad(p, "'" + p + "' must be in " + range + ", got " + show(v));
  }
  return x;
}

int64_t integer(const json& v, const std::string& p, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) bad(p, "'" + p + "' must be an integer, got " + type_name(v) + " " + show(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    bad(p, "'" + p + "' is out of range: " + show(v));
  int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    bad(p, "'" + p + "' must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + show(v));
  return x;
}

bool boolean(const json& v, const std::string& p) {
  if (!v.is_boolean()) bad(p, "'" + p + "' must be a boolean, got " + type_name(v));
  return v.get<bool>();
}

std::string string(const json& v, const std::string& p) {
  if (!v.is_string()) bad(p, "'" + p + "' must be a string, got " + type_name(v));
  return v.get<std::string>();
}

std::vector<int32_t> token_ids(const json& v, const std::string& p, size_t vocab, bool allow_empty) {
  if (!v.is_array()) bad(p, "'" + p + "' must be an array of token ids, got " + type_name(v));
  if (v.empty() && !allow_empty) bad(p, "'" + p + "' must not be empty");
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string pi = p + "[" + std::to_string(i) + "]";
    ids.push_back(static_cast<int32_t>(integer(v[i], pi, 0, vocab ? static_cast<int64_t>(vocab) - 1 : INT32_MAX)));
  }
  return ids;
}

void check_model(const json& j, const SchemaLimits& lim) {
  if (const json* m = field(j, "model")) {
    std::string name = string(*m, "model");
    if (!name.empty() && name != lim.served_name)
      throw ApiError{404, "The model '" + name + "' does not exist; this server serves '" + lim.served_name + "'", "model",
                     "invalid_request_error", "model_not_found"};
  }
}

}  // namespace ft::gateway::request_fields
