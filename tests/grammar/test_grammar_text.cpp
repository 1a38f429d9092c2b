// The regex and EBNF front-ends: which texts a compiled grammar matches in full, and the errors
// that malformed or unsupported input gets (expected strings written by hand).
#include <gtest/gtest.h>

#include "tests/grammar/grammar_test_util.h"

using namespace ft::grammar;
using namespace ft::grammar::testing;

namespace {

ConstraintSource regex(const std::string& p) {
  ConstraintSource c;
  c.kind = ConstraintSource::Kind::Regex;
  c.text = p;
  return c;
}
ConstraintSource ebnf(const std::string& p) {
  ConstraintSource c;
  c.kind = ConstraintSource::Kind::Ebnf;
  c.text = p;
  return c;
}

std::string error_of(const ConstraintSource& c) {
  try {
    compile_constraint(c);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Regex, MatchesWholeText) {
  EXPECT_TRUE(matches(regex("[a-c]+x?"), "abc"));
  EXPECT_TRUE(matches(regex("[a-c]+x?"), "abx"));
  EXPECT_FALSE(matches(regex("[a-c]+x?"), ""));
  EXPECT_FALSE(matches(regex("[a-c]+x?"), "abd"));
  EXPECT_TRUE(matches(regex("^\\d{2,3}$"), "123"));
  EXPECT_FALSE(matches(regex("\\d{2,3}"), "1"));
  EXPECT_FALSE(matches(regex("\\d{2,3}"), "1234"));
  EXPECT_TRUE(matches(regex("(foo|bar)baz"), "barbaz"));
  EXPECT_FALSE(matches(regex("(foo|bar)baz"), "foobar"));
  EXPECT_TRUE(matches(regex("\xC3\xA9+"), "\xC3\xA9\xC3\xA9"));
  EXPECT_TRUE(matches(regex("[^a]"), "\xC3\xA9"));
  EXPECT_FALSE(matches(regex("[^a]"), "a"));
  EXPECT_TRUE(matches(regex("a.c"), "a\xE2\x82\xAC" "c"));  // '.' takes a whole 3-byte character
  EXPECT_FALSE(matches(regex("a.c"), "a\nc"));
  EXPECT_TRUE(matches(regex("(ab){2}"), "abab"));
  EXPECT_TRUE(matches(regex("x\\.y"), "x.y"));
  EXPECT_FALSE(matches(regex("x\\.y"), "xzy"));
}

TEST(Regex, RefusesWhatItCannotDo) {
  EXPECT_NE(error_of(regex("(ab")).find("unbalanced '('"), std::string::npos);
  EXPECT_NE(error_of(regex("(a)\\1")).find("backreferences"), std::string::npos);
  EXPECT_NE(error_of(regex("a(?=b)")).find("lookahead"), std::string::npos);
  EXPECT_NE(error_of(regex("a\\bc")).find("word boundaries"), std::string::npos);
  EXPECT_NE(error_of(regex("a{3,1}")).find("max < min"), std::string::npos);
  EXPECT_NE(error_of(regex("*a")).find("nothing to repeat"), std::string::npos);
  EXPECT_NE(error_of(regex("[z-a]")).find("out of order"), std::string::npos);
}

TEST(Ebnf, RulesLiteralsClassesAndRepeats) {
  const auto g = ebnf(
      "# a list of numbers\n"
      "root ::= \"[\" num (\",\" num)* \"]\"\n"
      "num  ::= \"-\"? [0-9]+\n"
      "       | \"null\"   # continues the rule\n");
  EXPECT_TRUE(matches(g, "[1,-22,null]"));
  EXPECT_FALSE(matches(g, "[1,]"));
  EXPECT_FALSE(matches(g, "[]"));
  EXPECT_TRUE(matches(ebnf("root ::= (\"ab\" | \"c\"){2,3}"), "abcab"));
  EXPECT_FALSE(matches(ebnf("root ::= (\"ab\" | \"c\"){2,3}"), "c"));
  EXPECT_TRUE(matches(ebnf("root ::= \"\\u00e9\\n\" ."), "\xC3\xA9\nz"));
}

TEST(Ebnf, ErrorsNameTheProblem) {
  EXPECT_EQ(error_of(ebnf("root ::= item\n")), "rule 'item' is used but never defined");
  EXPECT_NE(error_of(ebnf("root ::= root \"a\" | \"b\"")).find("left recursion is not supported: root -> root"), std::string::npos);
  EXPECT_NE(error_of(ebnf("root ::= a\na ::= b \"x\"\nb ::= \"\" | a")).find("left recursion"), std::string::npos);
  EXPECT_EQ(error_of(ebnf("item ::= \"a\"")), "the grammar has no 'root' rule");
  EXPECT_EQ(error_of(ebnf("root ::= \"a\" root")), "the constraint matches no finite output, so generation could never end");
  EXPECT_EQ(error_of(ebnf("root ::= \"a\"\nroot ::= \"b\"")), "line 2, column 1: rule 'root' is defined twice");
  EXPECT_EQ(error_of(ebnf("root ::= \"abc")), "line 1, column 10: unterminated string literal");
  EXPECT_EQ(error_of(ebnf("root ::= (\"a\"")), "line 1, column 10: unbalanced '('");
  EXPECT_EQ(error_of(ebnf("root ::= \"a\" }")), "line 1, column 14: unexpected '}'");
}

TEST(Ebnf, AddedTokensByContent) {
  Grammar g = compile_constraint(ebnf("root ::= <think> \"x\" </think>"));
  Matcher m(Pda::compile(g), shared_vocab());
  const auto v = shared_vocab();
  EXPECT_FALSE(m.accept_bytes("<think>")) << "the tag's text is not the tag";
  ASSERT_TRUE(m.accept(v->added_ids("<think>")[0]));
  ASSERT_TRUE(m.accept('x'));
  EXPECT_FALSE(m.accepting());
  ASSERT_TRUE(m.accept(v->added_ids("</think>")[0]));
  EXPECT_TRUE(m.accepting());
  // A tag the tokenizer lacks is an error when the matcher is bound to it.
  Grammar g2 = compile_constraint(ebnf("root ::= <nosuch>"));
  EXPECT_THROW(Matcher(Pda::compile(g2), shared_vocab()), GrammarError);
}

TEST(Reasoning, ConstraintAppliesAfterThinkEnds) {
  ConstraintSource c = regex("[0-9]+");
  c.after_reasoning = true;
  Grammar g = compile_constraint(c);
  Matcher m(Pda::compile(g), shared_vocab());
  ASSERT_TRUE(m.accept_bytes("let me think <b>!"));
  EXPECT_TRUE(m.accept_bytes("12"));
  EXPECT_FALSE(m.accepting()) << "digits inside the reasoning do not count";
  ASSERT_TRUE(m.accept(shared_vocab()->added_ids("</think>")[0]));
  EXPECT_FALSE(m.accept('a'));
  ASSERT_TRUE(m.accept('4'));
  EXPECT_TRUE(m.accepting());
}
