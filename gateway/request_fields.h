#pragma once
// Typed reads of request-body JSON fields for every endpoint's schema code (OpenAI, SGLang,
// Anthropic): each failure is an ApiError (400) whose message and param name the field.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "gateway/api_error.h"
#include "gateway/openai_schema.h"

namespace ft::gateway::request_fields {

using json = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& param, const std::string& msg);
// 400 with code unsupported_parameter: a valid field this server does not implement.
[[noreturn]] void unsupported(const std::string& param, const std::string& msg);

std::string type_name(const json& v);  // "a string", "an array", ...
std::string show(const json& v);       // the value as JSON, cut at 60 characters

// The body as a JSON object (400 invalid_json otherwise).
json parse_object(std::string_view body);
// A present, non-null field; nullptr otherwise.
const json* field(const json& j, const char* key);

double number(const json& v, const std::string& p, double lo, double hi, bool lo_open = false);
int64_t integer(const json& v, const std::string& p, int64_t lo, int64_t hi);
bool boolean(const json& v, const std::string& p);
std::string string(const json& v, const std::string& p);
// An array of ids in [0, vocab) (vocab 0: any non-negative int32).
std::vector<int32_t> token_ids(const json& v, const std::string& p, size_t vocab, bool allow_empty);

// "model", when given and non-empty, must be the served name (404 model_not_found otherwise).
void check_model(const json& j, const SchemaLimits& lim);

}  // namespace ft::gateway::request_fields
