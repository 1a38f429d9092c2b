#include "tools/grammar-bench/synthetic_vocab.h"

#include <random>
#include <string>
#include <unordered_set>
#include <vector>

namespace ft::grammar {

std::shared_ptr<const Vocabulary> synthetic_vocab(size_t size, uint64_t seed) {
  static const std::vector<std::string> added_tags = {
      "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>", "<|assistant|>",
      "<|observation|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
      "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "/nothink"};
  std::mt19937_64 rng(seed);
  auto pick = [&](size_t n) { return size_t(rng() % n); };
  std::vector<std::string> bytes;
  std::unordered_set<std::string> seen;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, char(b))), seen.insert(bytes.back());
  const std::string punct = "\"{}[],:.;!?()'-_/\\*#@&%$+=<>|~`\n\t";
  const size_t target = size - added_tags.size();
  while (bytes.size() < target) {
    std::string t;
    const size_t kind = pick(100);
    if (kind < 62) {  // words: lowercase, some capitalised, most with a leading space
      if (pick(10) < 6) t += ' ';
      const size_t n = 2 + pick(9);
      for (size_t i = 0; i < n; ++i) t += char('a' + pick(26));
      if (pick(10) == 0) t[t[0] == ' ' ? 1 : 0] = char(std::toupper(t[t[0] == ' ' ? 1 : 0]));
    } else if (kind < 70) {  // numbers
      if (pick(4) == 0) t += ' ';
      const size_t n = 1 + pick(3);
      for (size_t i = 0; i < n; ++i) t += char('0' + pick(10));
    } else if (kind < 82) {  // punctuation and whitespace runs, JSON-ish pieces
      const size_t n = 1 + pick(4);
      for (size_t i = 0; i < n; ++i) t += pick(4) == 0 ? ' ' : punct[pick(punct.size())];
    } else {  // CJK: 1-3 characters (3 bytes each), sometimes cut inside the last one
      const size_t n = 1 + pick(3);
      for (size_t i = 0; i < n; ++i) {
        const char32_t c = 0x4E00 + char32_t(pick(0x5200));
        t += char(0xE0 | (c >> 12));
        t += char(0x80 | ((c >> 6) & 0x3F));
        t += char(0x80 | (c & 0x3F));
      }
      if (pick(8) == 0) t.pop_back();
    }
    if (seen.insert(t).second) bytes.push_back(std::move(t));
  }
  std::vector<std::pair<int32_t, std::string>> added;
  for (const auto& a : added_tags) {
    added.emplace_back(int32_t(bytes.size()), a);
    bytes.push_back(a);
  }
  return std::make_shared<Vocabulary>(bytes, added, size);
}

}  // namespace ft::grammar
