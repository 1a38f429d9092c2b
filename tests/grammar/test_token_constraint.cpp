// TokenConstraint: min_tokens, logit_bias and the grammar's EOS gating on plain logits, and the
// GLM tool-call grammar on a token sequence written by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "shared/sampling/sampler.h"
#include "tests/grammar/grammar_test_util.h"

using namespace ft;
using namespace ft::grammar;
using namespace ft::grammar::testing;

namespace {

ConstraintOptions opts(size_t vocab, uint32_t min_tokens = 0) {
  ConstraintOptions o;
  o.vocab_size = vocab;
  o.end_ids = {2, 5};
  o.min_tokens = min_tokens;
  return o;
}

int32_t tag(const std::string& t) { return shared_vocab()->added_ids(t)[0]; }

}  // namespace

TEST(TokenConstraint, MinTokensMasksEndIdsUntilReached) {
  TokenConstraint c(opts(40, 2), nullptr);
  std::vector<uint32_t> words;
  std::vector<float> logits(40, 0.0f);
  logits[2] = 10.0f;  // EOS is the favourite
  for (int i = 0; i < 2; ++i) {
    auto l = logits;
    apply_constraint(l, c, words);
    EXPECT_TRUE(std::isinf(l[2]) && l[2] < 0);
    EXPECT_TRUE(std::isinf(l[5]));
    EXPECT_EQ(l[0], 0.0f);
    EXPECT_NE(argmax(l), 2);
    c.accept(7);
  }
  auto l = logits;
  apply_constraint(l, c, words);
  EXPECT_EQ(argmax(l), 2) << "after min_tokens the end ids are back";
}

TEST(TokenConstraint, LogitBiasBansAndForces) {
  ConstraintOptions o = opts(10);
  o.logit_bias = {{3, -100.0f}, {4, 100.0f}, {6, 0.5f}};
  TokenConstraint c(o, nullptr);
  std::vector<float> l(10, 1.0f);
  l[3] = 50.0f;
  std::vector<uint32_t> words;
  apply_constraint(l, c, words);
  EXPECT_TRUE(std::isinf(l[3]));
  EXPECT_EQ(l[4], 101.0f);
  EXPECT_EQ(l[6], 1.5f);
  EXPECT_EQ(l[0], 1.0f);
}

TEST(TokenConstraint, EndIdsOnlyWhereTheGrammarAccepts) {
  const auto vocab = shared_vocab();
  ConstraintSource src;
  src.kind = ConstraintSource::Kind::Regex;
  src.text = "ab?";
  TokenConstraint c(opts(vocab->size()), make_matcher(compile_constraint(src), vocab));
  std::vector<uint32_t> w(c.words());
  ASSERT_TRUE(c.mask(w));
  EXPECT_TRUE((w[0] >> 2 & 1) == 0);  // id 2 (an end id): not yet
  EXPECT_TRUE(w['a' >> 5] >> ('a' & 31) & 1);
  c.accept('a');
  ASSERT_TRUE(c.mask(w));
  EXPECT_TRUE(w[0] >> 2 & 1) << "'a' is complete: EOS allowed";
  EXPECT_TRUE(w['b' >> 5] >> ('b' & 31) & 1);
  c.accept('b');
  ASSERT_TRUE(c.mask(w));
  size_t on = 0;
  for (uint32_t x : w) on += size_t(__builtin_popcount(x));
  EXPECT_EQ(on, 2u) << "only the two end ids remain";
}

TEST(TokenConstraint, MinTokensYieldsToAFinishedGrammar) {
  const auto vocab = shared_vocab();
  ConstraintSource src;
  src.kind = ConstraintSource::Kind::Regex;
  src.text = "a";
  TokenConstraint c(opts(vocab->size(), 5), make_matcher(compile_constraint(src), vocab));
  c.accept('a');
  std::vector<uint32_t> w(c.words());
  ASSERT_TRUE(c.mask(w));
  EXPECT_TRUE(w[0] >> 2 & 1) << "nothing else can follow, so the end is allowed before min_tokens";
}

TEST(ToolCallGrammar, NamedFunctionWithTypedArguments) {
  ConstraintSource c;
  c.kind = ConstraintSource::Kind::ToolCalls;
  c.tools.tools_json = R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
      "properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city"]}}},
      {"type":"function","function":{"name":"other","parameters":{"type":"object","properties":{}}}}])";
  c.tools.function = "get_weather";
  const auto pda = Pda::compile(compile_constraint(c));
  auto call = [&](Matcher& m, const std::string& name, const std::string& city, const std::string& days) {
    if (!m.accept(tag("<tool_call>")) || !m.accept_bytes(name + "\n")) return false;
    if (!m.accept(tag("<arg_key>")) || !m.accept_bytes("city") || !m.accept(tag("</arg_key>")) || !m.accept('\n') ||
        !m.accept(tag("<arg_value>")) || !m.accept_bytes(city) || !m.accept(tag("</arg_value>")) || !m.accept('\n'))
      return false;
    if (!days.empty() && (!m.accept(tag("<arg_key>")) || !m.accept_bytes("days") || !m.accept(tag("</arg_key>")) ||
                          !m.accept('\n') || !m.accept(tag("<arg_value>")) || !m.accept_bytes(days) ||
                          !m.accept(tag("</arg_value>")) || !m.accept('\n')))
      return false;
    return m.accept(tag("</tool_call>"));
  };
  {
    Matcher m(pda, shared_vocab());
    ASSERT_TRUE(call(m, "get_weather", "Paris", "3"));
    EXPECT_TRUE(m.accepting());
    ASSERT_TRUE(call(m, "get_weather", "New York", "")) << "parallel calls allowed by default";
  }
  {
    Matcher m(pda, shared_vocab());
    EXPECT_FALSE(call(m, "other", "Paris", ""));
  }
  {
    Matcher m(pda, shared_vocab());
    EXPECT_FALSE(call(m, "get_weather", "Paris", "9")) << "days is at most 7";
  }
  {
    Matcher m(pda, shared_vocab());
    EXPECT_FALSE(call(m, "get_weather", " Paris", "")) << "raw strings cannot start with whitespace (the parser trims it)";
  }
  {
    Matcher m(pda, shared_vocab());
    EXPECT_FALSE(call(m, "get_weather", "a<b", "")) << "raw strings never hold '<'";
  }
  c.tools.single_call = true;
  Matcher one(Pda::compile(compile_constraint(c)), shared_vocab());
  ASSERT_TRUE(call(one, "get_weather", "Oslo", ""));
  EXPECT_FALSE(one.can_continue()) << "parallel_tool_calls false: exactly one call";
}
