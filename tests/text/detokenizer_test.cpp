#include "shared/text/detokenizer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "shared/text/byte_level.h"
#include "shared/text/utf8.h"
#include "tests/text/test_util.h"

namespace ft::text {
namespace {

const Tokenizer& glm() {
  static const Tokenizer t = Tokenizer::from_file(testing::fixture("glm-text/tokenizer.json"));
  return t;
}

TEST(TextDetokenizer, StreamOfEveryGoldenCaseEqualsGoldenDecode) {
  const auto golden = nlohmann::json::parse(testing::read_file(testing::fixture("glm-text/tokenizer-golden.json")));
  for (const bool skip : {false, true}) {
    for (const auto& c : golden["cases"]) {
      IncrementalDetokenizer d(glm(), skip);
      std::string out;
      for (int32_t id : c["ids"].get<std::vector<int32_t>>()) {
        const std::string delta = d.push(id);
        // A delta is always whole characters.
        EXPECT_EQ(utf8_lossy(delta), delta);
        EXPECT_LE(d.pending_bytes(), 3u);
        out += delta;
      }
      out += d.finish();
      EXPECT_EQ(out, c[skip ? "decoded_skip_special" : "decoded"].get<std::string>()) << c["text"].dump();
    }
  }
}

TEST(TextDetokenizer, HoldsBackOnlyAnIncompleteCharacter) {
  // "🙂" is F0 9F 99 82: one byte-level token per byte gives nothing until the last byte.
  std::vector<int32_t> bytes;
  for (unsigned char b : std::string("\xF0\x9F\x99\x82!")) bytes.push_back(*glm().token_to_id(byte_to_vocab_char(b)));
  IncrementalDetokenizer d(glm());
  EXPECT_EQ(d.push(bytes[0]), "");
  EXPECT_EQ(d.push(bytes[1]), "");
  EXPECT_EQ(d.push(bytes[2]), "");
  EXPECT_EQ(d.pending_bytes(), 3u);
  EXPECT_EQ(d.push(bytes[3]), "\xF0\x9F\x99\x82");
  EXPECT_EQ(d.push(bytes[4]), "!");
  EXPECT_EQ(d.finish(), "");
}

TEST(TextDetokenizer, BrokenSequenceBecomesReplacementCharacterExactlyOnce) {
  // F0 9F then 'A': the two bytes can never complete; like from_utf8_lossy, one U+FFFD.
  std::vector<int32_t> ids;
  for (unsigned char b : std::string("\xF0\x9F" "A\xE4")) ids.push_back(*glm().token_to_id(byte_to_vocab_char(b)));
  IncrementalDetokenizer d(glm());
  std::string out;
  for (int32_t id : ids) out += d.push(id);
  EXPECT_EQ(out, "\xEF\xBF\xBD" "A");
  EXPECT_EQ(d.finish(), "\xEF\xBF\xBD");  // a dangling lead byte at the end
}

}  // namespace
}  // namespace ft::text
