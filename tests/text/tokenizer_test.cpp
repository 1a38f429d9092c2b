#include "shared/text/tokenizer.h"

#include <gtest/gtest.h>

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

TEST(Tokenizer, GoldenEncodeDecode) {
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

TEST(Tokenizer, AddedTokensAreMatchedWholeAndLookedUpByName) {
  // Ids read from the fixture's tokenizer.json: [gMASK] 3002, <sop> 3004, <think> 3018.
  EXPECT_EQ(glm().token_to_id("[gMASK]"), 3002);
  EXPECT_EQ(glm().token_to_id("<think>"), 3018);
  EXPECT_TRUE(glm().is_special(3002));
  EXPECT_FALSE(glm().is_special(3018));  // <think> is a non-special added token
  const auto ids = glm().encode("[gMASK]<sop><think>");
  EXPECT_EQ(ids, (std::vector<int32_t>{3002, 3004, 3018}));
  EXPECT_EQ(glm().decode(ids, true), "<think>");
}

TEST(Tokenizer, ByteTokensRoundTripEveryByte) {
  std::string all;
  for (int b = 1; b < 128; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(glm().decode(glm().encode(all)), all);
}

TEST(Tokenizer, InvalidUtf8DecodesToReplacementCharacter) {
  // The byte-level token of 0xE4 alone is the first byte of a 3-byte character: decode must
  // replace it, like Rust's from_utf8_lossy, and not emit a broken sequence.
  const auto id = glm().token_to_id(byte_to_vocab_char(0xE4));
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(glm().token_bytes(*id), "\xE4");
  EXPECT_EQ(glm().decode(std::vector<int32_t>{*id}), "\xEF\xBF\xBD");
  EXPECT_EQ(glm().decode(std::vector<int32_t>{*id, *id}), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(glm().decode(glm().encode("中")), "中");
}

TEST(Tokenizer, UnsupportedPartsAreRefusedWithAClearMessage) {
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
