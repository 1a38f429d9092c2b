// The matcher over a vocabulary: the trie-walk mask equals token-by-token trial (a fresh matcher
// replaying the output, then the one token), tokens that cross grammar terminals or end inside a
// UTF-8 character, padding ids, and the mask cache.
#include <gtest/gtest.h>

#include <random>

#include "tests/grammar/grammar_test_util.h"

using namespace ft::grammar;
using namespace ft::grammar::testing;

namespace {

bool bit(const std::vector<uint32_t>& w, size_t i) { return (w[i >> 5] >> (i & 31)) & 1; }

// Walks a grammar with random allowed tokens, checking every step's mask against trial.
void check_walk(const ConstraintSource& c, uint64_t seed, int steps) {
  const auto vocab = shared_vocab();
  const auto pda = Pda::compile(compile_constraint(c));
  Matcher m(pda, vocab);
  std::vector<int32_t> out;
  std::mt19937_64 rng(seed);
  for (int step = 0; step < steps; ++step) {
    std::vector<uint32_t> words(vocab->words());
    m.allowed(words);
    std::vector<int32_t> allowed;
    for (size_t id = 0; id < vocab->size(); ++id) {
      Matcher trial(pda, vocab);
      for (int32_t t : out) ASSERT_TRUE(trial.accept(t));
      const bool ok = trial.accept(int32_t(id));
      ASSERT_EQ(bit(words, id), ok) << "token " << id << " after " << out.size() << " tokens";
      if (ok) allowed.push_back(int32_t(id));
    }
    if (allowed.empty()) {
      EXPECT_TRUE(m.accepting());
      return;
    }
    const int32_t t = allowed[rng() % allowed.size()];
    ASSERT_TRUE(m.accept(t));
    out.push_back(t);
  }
}

}  // namespace

TEST(Matcher, MaskEqualsTrialOnJsonSchemaWalks) {
  const auto s = schema(R"({"type":"object","properties":{"name":{"type":"string","maxLength":4},
      "n":{"type":"integer","minimum":-20,"maximum":300},"tags":{"type":"array","items":{"enum":["ab","abc",true]},"maxItems":2}},
      "required":["name","n"]})");
  for (uint64_t seed = 1; seed <= 3; ++seed) check_walk(s, seed, 30);
}

TEST(Matcher, MaskEqualsTrialOnToolCalls) {
  ConstraintSource c;
  c.kind = ConstraintSource::Kind::ToolCalls;
  c.tools.tools_json = R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",
      "properties":{"q":{"type":"string","maxLength":3},"k":{"type":"integer","minimum":0,"maximum":9}},"required":["q"]}}}])";
  c.tools.single_call = true;
  for (uint64_t seed = 1; seed <= 2; ++seed) check_walk(c, seed, 25);
}

TEST(Matcher, TokensCrossTerminalsAndEndInsideCharacters) {
  const auto vocab = shared_vocab();
  auto id_of = [&](const std::string& s) {
    for (size_t i = 0; i < vocab->size(); ++i)
      if (vocab->bytes(int32_t(i)) == s) return int32_t(i);
    return int32_t(-1);
  };
  Matcher m(Pda::compile(compile_constraint(schema(R"({"type":"object","properties":{"ab":{"type":"string"}},"required":["ab"]})"))), vocab);
  ASSERT_TRUE(m.accept(id_of("{\"")));   // '{' then the key's opening quote
  ASSERT_TRUE(m.accept(id_of("ab")));
  ASSERT_TRUE(m.accept(id_of("\": ")));  // quote, colon and the optional space in one token
  ASSERT_TRUE(m.accept(id_of(" \"")) == false);  // a second space is not allowed
  ASSERT_TRUE(m.accept('"'));
  ASSERT_TRUE(m.accept(id_of("\xC3")));  // first byte of 'é'
  std::vector<uint32_t> w(vocab->words());
  m.allowed(w);
  for (size_t i = 0; i < vocab->size(); ++i) {
    const std::string& b = vocab->bytes(int32_t(i));
    const bool continuation = !b.empty() && (uint8_t(b[0]) & 0xC0) == 0x80;
    EXPECT_EQ(bit(w, i), continuation) << "only a continuation byte may follow, token " << i;
  }
  ASSERT_TRUE(m.accept(0xA9));
  ASSERT_TRUE(m.accept(id_of("\"}")));
  EXPECT_TRUE(m.accepting());
  EXPECT_FALSE(m.can_continue());
}

TEST(Matcher, PaddingAndAddedTokensAreNeverTextButCanBeNamed) {
  const auto vocab = shared_vocab();
  Matcher m(Pda::compile(compile_constraint(schema(R"({"type":"string"})"))), vocab);
  ASSERT_TRUE(m.accept('"'));
  std::vector<uint32_t> w(vocab->words());
  m.allowed(w);
  for (size_t i = vocab->size() - 5; i < vocab->size(); ++i) EXPECT_FALSE(bit(w, i)) << "padding id " << i;
  for (const auto& tag : added_tags()) EXPECT_FALSE(bit(w, size_t(vocab->added_ids(tag)[0]))) << tag;
  EXPECT_TRUE(bit(w, 'x'));
  EXPECT_FALSE(bit(w, '\n')) << "raw newline inside a JSON string";
}

TEST(Matcher, RepeatedStatesHitTheMaskCache) {
  const auto vocab = shared_vocab();
  Matcher m(Pda::compile(compile_constraint(schema(R"({"type":"string"})"))), vocab);
  std::vector<uint32_t> w(vocab->words());
  ASSERT_TRUE(m.accept('"'));
  for (int i = 0; i < 10; ++i) {
    m.allowed(w);
    ASSERT_TRUE(m.accept('a'));
  }
  EXPECT_EQ(m.stats().masks, 10u);
  EXPECT_EQ(m.stats().mask_cache_hits, 9u);
}
