#pragma once
// The request fields that constrain generation (response_format, tool_choice required/named,
// logit_bias, min_tokens, SGLang's json_schema/regex/ebnf), validated into one ConstraintFields
// that the Generate request carries to the worker. The constraint is compiled here once (no
// tokenizer needed) so a bad schema, grammar or regex is a 400 naming the field, not a worker error.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "shared/grammar/constraint.h"

namespace flashtier::v1 {
class GenerateRequest;
}

namespace ft::gateway {

struct ConstraintFields {
  grammar::ConstraintSource source;  // kind None: no grammar
  std::string param;                 // the request field the grammar came from
  std::vector<std::pair<int32_t, float>> logit_bias;
  uint32_t min_tokens = 0;
};

using ojson = nlohmann::ordered_json;

// `logit_bias`: {"token id": bias in [-100, 100]}; ids checked against the vocabulary.
void read_logit_bias(const ojson& v, const std::string& param, size_t vocab, ConstraintFields& c);
// OpenAI `response_format`: text | json_object | json_schema {name, schema, strict}.
void read_response_format(const ojson& v, ConstraintFields& c);
// SGLang sampling_params json_schema (a string or an object), regex, ebnf: at most one.
void read_sglang_constraint(const ojson& sp, const std::string& prefix, ConstraintFields& c);
// tool_choice "required" / named, over the request's tools; refuses a response_format next to it.
void set_tool_choice(ConstraintFields& c, const std::string& tools_json, const std::string& function, bool single_call);
// Compiles the grammar (400 naming c.param on failure) and checks min_tokens against max_tokens.
void check_constraint(const ConstraintFields& c, uint32_t max_tokens, const std::string& max_tokens_param);

void to_proto(const ConstraintFields& c, flashtier::v1::GenerateRequest& r);

}  // namespace ft::gateway
