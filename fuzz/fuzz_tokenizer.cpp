// Arbitrary bytes through the tiny-chat fixture's byte-level BPE tokenizer (GLM's special tokens):
// encode must take any bytes, and decoding what it made must give back valid UTF-8 input
// unchanged; arbitrary ids decode without a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "shared/core/error.h"
#include "shared/text/tokenizer.h"
#include "shared/text/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ft::text::Tokenizer tok =
      ft::text::Tokenizer::from_file(FLASHTIER_SOURCE_DIR "/tests/fixtures/glm5-tiny-chat/model/tokenizer.json");
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::vector<int32_t> ids = tok.encode(text);
  const std::string back = tok.decode(ids);
  if (ft::text::utf8_lossy(text) == text && back != text) std::abort();  // byte-level BPE is lossless
  std::vector<int32_t> raw(size / 4);
  if (!raw.empty()) std::memcpy(raw.data(), data, raw.size() * 4);  // (memcpy to null is UB even for 0 bytes)
  try {
    (void)tok.decode(raw);
  } catch (const ft::Error&) {  // an id outside the vocabulary is refused by name
  }
  return 0;
}
