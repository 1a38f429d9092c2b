// JSON Schema compilation: texts written by hand that a schema must accept or refuse in the fixed
// output form (no whitespace but one optional space after ':' and ','), and the errors for
// keywords that are not supported.
#include <gtest/gtest.h>

#include "tests/grammar/grammar_test_util.h"

using namespace ft::grammar;
using namespace ft::grammar::testing;

namespace {

std::string error_of(const std::string& s) {
  try {
    compile_constraint(schema(s));
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(JsonSchema, ObjectsRequiredOptionalAndOrder) {
  const auto s = schema(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},
                            "required":["a","c"],"additionalProperties":false})");
  EXPECT_TRUE(matches(s, R"({"a":1,"c":true})"));
  EXPECT_TRUE(matches(s, R"({"a": -7, "b": "x y", "c": false})"));
  EXPECT_FALSE(matches(s, R"({"a":1})")) << "c is required";
  EXPECT_FALSE(matches(s, R"({"c":true,"a":1})")) << "properties come in schema order";
  EXPECT_FALSE(matches(s, R"({"a":1,"c":true,"d":1})"));
  EXPECT_FALSE(matches(s, R"({ "a":1,"c":true})"));
  EXPECT_FALSE(matches(s, R"({"a":1.5,"c":true})"));
  const auto open = schema(R"({"type":"object","properties":{"a":{"type":"null"}},"additionalProperties":{"type":"integer"}})");
  EXPECT_TRUE(matches(open, R"({"a":null,"x":1,"y":2})"));
  EXPECT_TRUE(matches(open, R"({"x":1})"));
  EXPECT_FALSE(matches(open, R"({"x":"s"})"));
  EXPECT_TRUE(matches(schema(R"({"type":"object"})"), R"({"any":[1,{"b":null}]})"));
}

TEST(JsonSchema, EnumsConstAnyOfArrays) {
  EXPECT_TRUE(matches(schema(R"({"enum":["red","green",3,null]})"), R"("green")"));
  EXPECT_TRUE(matches(schema(R"({"enum":["red","green",3,null]})"), "null"));
  EXPECT_FALSE(matches(schema(R"({"enum":["red","green",3,null]})"), R"("gre")"));
  EXPECT_TRUE(matches(schema(R"({"const":{"k":[1,2]}})"), R"({"k":[1,2]})"));
  const auto any = schema(R"({"anyOf":[{"type":"integer","minimum":0,"maximum":9},{"type":"string","maxLength":1}]})");
  EXPECT_TRUE(matches(any, "7"));
  EXPECT_TRUE(matches(any, R"("q")"));
  EXPECT_FALSE(matches(any, "10"));
  const auto arr = schema(R"({"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":3})");
  EXPECT_TRUE(matches(arr, "[true]"));
  EXPECT_TRUE(matches(arr, "[true, false,true]"));
  EXPECT_FALSE(matches(arr, "[]"));
  EXPECT_FALSE(matches(arr, "[true,true,true,true]"));
  const auto tuple = schema(R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"minItems":1})");
  EXPECT_TRUE(matches(tuple, "[1]"));
  EXPECT_TRUE(matches(tuple, R"([1,"a"])"));
  EXPECT_FALSE(matches(tuple, R"([1,"a",2])"));
  EXPECT_FALSE(matches(tuple, "[]"));
}

TEST(JsonSchema, NumbersWithBounds) {
  const auto i = schema(R"({"type":"integer","minimum":-5,"maximum":12})");
  for (const char* ok : {"-5", "-1", "0", "7", "10", "12"}) EXPECT_TRUE(matches(i, ok)) << ok;
  for (const char* bad : {"-6", "13", "012", "-0", "1.0", "100"}) EXPECT_FALSE(matches(i, bad)) << bad;
  const auto ex = schema(R"({"type":"integer","exclusiveMinimum":100,"exclusiveMaximum":1000})");
  EXPECT_TRUE(matches(ex, "101"));
  EXPECT_TRUE(matches(ex, "999"));
  EXPECT_FALSE(matches(ex, "100"));
  EXPECT_FALSE(matches(ex, "1000"));
  const auto n = schema(R"({"type":"number","minimum":0.5,"maximum":2.5})");
  for (const char* ok : {"1", "2", "1.25"}) EXPECT_TRUE(matches(n, ok)) << ok;
  for (const char* bad : {"2.6", "3", "-1", "0", "1e2"}) EXPECT_FALSE(matches(n, bad)) << bad;
  const auto any = schema(R"({"type":"number"})");
  for (const char* ok : {"0", "-0.5", "12e-3", "3.25e10"}) EXPECT_TRUE(matches(any, ok)) << ok;
  for (const char* bad : {"01", ".5", "1.", "1e999", "+1"}) EXPECT_FALSE(matches(any, bad)) << bad;
  EXPECT_NE(error_of(R"({"type":"integer","minimum":3,"maximum":2})").find("within the bounds"), std::string::npos);
}

TEST(JsonSchema, StringsLengthsPatternsFormats) {
  const auto s = schema(R"({"type":"string","minLength":1,"maxLength":2})");
  EXPECT_TRUE(matches(s, "\"\xC3\xA9\xC3\xA9\"")) << "lengths count characters, not bytes";
  EXPECT_FALSE(matches(s, R"("abc")"));
  EXPECT_FALSE(matches(s, R"("")"));
  EXPECT_TRUE(matches(s, R"("\"")")) << "an escaped quote is one character";
  EXPECT_FALSE(matches(schema(R"({"type":"string"})"), "\"a\nb\"")) << "control characters must be escaped";
  EXPECT_TRUE(matches(schema(R"({"type":"string"})"), R"("a\nb")"));
  EXPECT_TRUE(matches(schema(R"({"type":"string","pattern":"^[A-Z]{2}-\\d+$"})"), R"("AB-12")"));
  EXPECT_FALSE(matches(schema(R"({"type":"string","pattern":"^[A-Z]{2}-\\d+$"})"), R"("AB-")"));
  const auto date = schema(R"({"type":"string","format":"date"})");
  EXPECT_TRUE(matches(date, R"("2024-02-28")"));
  EXPECT_FALSE(matches(date, R"("2024-02-30")"));
  EXPECT_FALSE(matches(date, R"("2024-13-01")"));
  EXPECT_TRUE(matches(schema(R"({"type":"string","format":"date-time"})"), R"("2024-06-30T23:59:01Z")"));
  EXPECT_TRUE(matches(schema(R"({"format":"uuid"})"), R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_TRUE(matches(schema(R"({"format":"ipv4"})"), R"("192.168.0.255")"));
  EXPECT_FALSE(matches(schema(R"({"format":"ipv4"})"), R"("192.168.0.256")"));
}

TEST(JsonSchema, RefsAndRecursion) {
  const auto tree = schema(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
      "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},"$ref":"#/$defs/node"})");
  EXPECT_TRUE(matches(tree, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"));
  EXPECT_FALSE(matches(tree, R"({"v":1,"kids":[{"w":2}]})"));
}

TEST(JsonSchema, JsonObject) {
  ConstraintSource c;
  c.kind = ConstraintSource::Kind::JsonObject;
  EXPECT_TRUE(matches(c, R"({"a": [1, {"b": null}], "c": "\u00e9"})"));
  EXPECT_TRUE(matches(c, "{}"));
  EXPECT_FALSE(matches(c, "[1]"));
  EXPECT_FALSE(matches(c, R"("s")"));
}

TEST(JsonSchema, UnsupportedKeywordsAreNamedWithTheirPlace) {
  EXPECT_EQ(error_of(R"({"type":"object","properties":{"n":{"type":"integer","multipleOf":3}}})"),
            "unsupported keyword 'multipleOf' at #/properties/n");
  EXPECT_EQ(error_of(R"({"type":"array","uniqueItems":true})"), "unsupported keyword 'uniqueItems' at #");
  EXPECT_EQ(error_of(R"({"type":"string","format":"hostname"})"),
            "unsupported string format 'hostname' (supported: date, time, date-time, uuid, email, ipv4) at #/format");
  EXPECT_EQ(error_of(R"({"$ref":"http://example.com/s.json"})"),
            "only local '$ref's (\"#/...\") are supported, got 'http://example.com/s.json' at #/$ref");
  EXPECT_EQ(error_of(R"({"type":"object","required":["x"],"properties":{}})"), "required property 'x' is not in 'properties' at #/required");
  EXPECT_EQ(error_of(R"({"type":"wat"})"), "unknown type 'wat' at #/type");
  EXPECT_NE(error_of("{not json").find("the schema is not valid JSON"), std::string::npos);
  EXPECT_EQ(error_of("false"), "the constraint matches no finite output, so generation could never end");
}
