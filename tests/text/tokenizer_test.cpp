#include "shared/text/tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>

#include <nlohmann/json.hpp>

#include "shared/core/error.h"
#include "shared/text/byte_level.h"
#include "tests/text/test_util.h"

namespace ft::text {
namespace {

using testing::fixture;
using testing::read_file;

const Tokenizer& glm() {
  static const Tokenizer t = Tokenizer::from_file(fixture("glm-text/tokenizer.json"));
  return t;
}

TEST(TextTokenizer, GoldenEncodeDecode) {
  const auto golden = nlohmann::json::parse(read_file(fixture("glm-text/tokenizer-golden.json")));
  ASSERT_GE(golden["cases"].size(), 70u);
  for (const auto& c : golden["cases"]) {
    const std::string text = c["text"];
    const auto want = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(glm().encode(text), want) << "text: " << c["text"].dump();
    EXPECT_EQ(glm().decode(want, false), c["decoded"].get<std::string>()) << c["text"].dump();
    EXPECT_EQ(glm().decode(want, true), c["decoded_skip_special"].get<std::string>()) << c["text"].dump();
  }
}

TEST(TextTokenizer, AddedTokensAreMatchedWholeAndLookedUpByName) {
  // Ids read from the fixture's tokenizer.json: [gMASK] 3002, <sop> 3004, <think> 3018.
  EXPECT_EQ(glm().token_to_id("[gMASK]"), 3002);
  EXPECT_EQ(glm().token_to_id("<think>"), 3018);
  EXPECT_TRUE(glm().is_special(3002));
  EXPECT_FALSE(glm().is_special(3018));  // <think> is a non-special added token
  const auto ids = glm().encode("[gMASK]<sop><think>");
  EXPECT_EQ(ids, (std::vector<int32_t>{3002, 3004, 3018}));
  EXPECT_EQ(glm().decode(ids, true), "<think>");
}

TEST(TextTokenizer, ByteTokensRoundTripEveryByte) {
  std::string all;
  for (int b = 1; b < 128; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(glm().decode(glm().encode(all)), all);
}

TEST(TextTokenizer, InvalidUtf8DecodesToReplacementCharacter) {
  // The byte-level token of 0xE4 alone is the first byte of a 3-byte character: decode must
  // replace it, like Rust's from_utf8_lossy, and not emit a broken sequence.
  const auto id = glm().token_to_id(byte_to_vocab_char(0xE4));
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(glm().token_bytes(*id), "\xE4");
  EXPECT_EQ(glm().decode(std::vector<int32_t>{*id}), "\xEF\xBF\xBD");
  EXPECT_EQ(glm().decode(std::vector<int32_t>{*id, *id}), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(glm().decode(glm().encode("中")), "中");
}

TEST(TextTokenizer, HundredThousandTokenPromptEncodesWellUnderASecond) {
  // Fresh tokenizer, so the per-word cache starts empty; the text mixes prose, code, CJK, emoji
  // and whitespace runs. (flashtier-text-bench reports the actual numbers: ~12 ms here.)
  const Tokenizer tok = Tokenizer::from_file(fixture("glm-text/tokenizer.json"));
  const char* parts[] = {"The quick brown fox jumps over the lazy dog; DON'T STOP. ",
                         "def f(a, b):\n    return a ** b  # power\n\n", "我们今天去公园散步。東京は日本の首都です。",
                         "x=1234567890; y = 3.14159e-10\t\t  \n", "🙂🚀👍🏽 naïve café résumé "};
  std::string text;
  for (size_t i = 0; text.size() < 400000; ++i) text += parts[(i * 7) % 5];
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = tok.encode(text);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(ids.size(), 100000u);
  EXPECT_LT(ms, 500.0) << ids.size() << " tokens took " << ms << " ms";
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(TextTokenizer, UnsupportedPartsAreRefusedWithAClearMessage) {
  try {
    Tokenizer::from_json_text(R"({"model":{"type":"Unigram","vocab":[]}})", "x/tokenizer.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("x/tokenizer.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("Unigram"), std::string::npos);
  }
  EXPECT_THROW(Tokenizer::from_file("/nonexistent/tokenizer.json"), Error);
}

}  // namespace
}  // namespace ft::text
