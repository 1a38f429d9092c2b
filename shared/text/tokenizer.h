#pragma once
// A Hugging Face `tokenizer.json` byte-level BPE tokenizer: added tokens matched whole first, then
// the pre-tokenizer chain, then BPE merges by rank. Encoding never adds BOS/EOS (chat templates
// write them). Thread-safe after construction.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ft::text {

class Tokenizer {
 public:
  // Throws ft::Error naming the file and the unsupported or malformed part.
  static Tokenizer from_file(const std::filesystem::path& tokenizer_json);
  static Tokenizer from_json_text(std::string_view json_text, const std::string& origin);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int32_t> encode(std::string_view text) const;

  // Ids outside the vocabulary are dropped, as `tokenizers` does.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // Raw bytes a token stands for (may be a partial UTF-8 sequence); empty for unknown ids.
  const std::string& token_bytes(int32_t id) const;
  // The token's vocabulary spelling (byte-level characters), or the added token's content.
  std::optional<std::string> id_to_token(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  bool is_special(int32_t id) const;
  // An added token (special or not): matched whole by content, never produced by BPE merges.
  bool is_added(int32_t id) const;
  // One past the largest id.
  size_t vocab_size() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ft::text
