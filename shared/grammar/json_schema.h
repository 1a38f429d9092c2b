#pragma once
// JSON Schema (the subset docs/grammar.md lists) compiled to grammar rules whose strings are
// exactly JSON texts valid against the schema. The output form is fixed so that any model, even
// one with random weights, finishes in a bounded number of tokens: no whitespace except one
// optional space after ':' and ',', properties in the schema's order, numbers with at most 16
// integer and 16 fraction digits and a 2-digit exponent. Properties not listed are refused unless
// additionalProperties says otherwise (as strict structured outputs do). oneOf is compiled as
// anyOf (exclusivity is not enforced: write disjoint branches). A keyword that is not supported
// is a GrammarError naming it and where it is ("unsupported keyword 'multipleOf' at #/properties/n").
#include <functional>
#include <string>
#include <string_view>

#include "shared/grammar/grammar.h"

namespace ft::grammar {

// Adds the schema's rules to g and returns the rule for one value.
int32_t json_schema_rule(Grammar& g, std::string_view schema_json);
// Any JSON object (response_format json_object), with the same output form.
int32_t json_object_rule(Grammar& g);

// Tool-call arguments in a tag format (GLM: <arg_key>K</arg_key><arg_value>V</arg_value>): the
// properties of an object schema in order, required ones always, optional ones or not, each
// made by `pair(key, value)`. A parameter whose schema has "type": "string" is written raw (no
// quotes or escapes, never '<', no leading or trailing whitespace, which the parser trims); any
// other is its JSON text. `path` prefixes error messages.
using TagPair = std::function<int32_t(const std::string& key, int32_t value)>;
int32_t tag_arguments_expr(Grammar& g, std::string_view params_schema_json, const TagPair& pair, const std::string& path);

}  // namespace ft::grammar
