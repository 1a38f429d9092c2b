#include "shared/text/tokenizer.h"

#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "shared/core/error.h"
#include "shared/text/added_tokens.h"
#include "shared/text/bpe.h"
#include "shared/text/byte_level.h"
#include "shared/text/pretokenizer.h"
#include "shared/text/utf8.h"

namespace ft::text {

using json = nlohmann::json;

struct Tokenizer::Impl {
  std::string origin;
  PreTokenizer pre;
  std::unique_ptr<BytePairEncoder> bpe;
  AddedTokenMatcher added;
  std::vector<std::string> spelling;  // id -> vocabulary spelling or added content
  std::vector<std::string> bytes;     // id -> decoded bytes
  std::vector<uint8_t> special;       // id -> special added token
  std::vector<uint8_t> added_flag;    // id -> added token (special or not)
  std::vector<uint8_t> present;       // id -> id is defined
  std::unordered_map<std::string, int32_t> by_spelling;
  std::unordered_map<std::string, int32_t> added_by_content;
};

namespace {

[[noreturn]] void fail(const std::string& origin, const std::string& what) { throw Error(origin + ": " + what); }

SplitBehavior parse_behavior(const std::string& origin, const std::string& b) {
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  fail(origin, "pre_tokenizer Split: unknown behavior '" + b + "'");
}

// Adds one pre-tokenizer (recursing into Sequence); returns whether a ByteLevel step was seen.
bool add_pretokenizer(const std::string& origin, const json& p, PreTokenizer& pre, bool byte_level_seen) {
  const std::string type = p.value("type", "");
  if (type == "Sequence") {
    for (const json& q : p.at("pretokenizers")) byte_level_seen = add_pretokenizer(origin, q, pre, byte_level_seen);
    return byte_level_seen;
  }
  if (byte_level_seen)
    fail(origin, "pre_tokenizer step '" + type + "' after ByteLevel is not supported");
  if (type == "Split") {
    const json& pat = p.at("pattern");
    const bool literal = pat.contains("String");
    const std::string pattern = literal ? pat.at("String").get<std::string>() : pat.at("Regex").get<std::string>();
    pre.add_split(pattern, literal, parse_behavior(origin, p.value("behavior", "Isolated")), p.value("invert", false));
    return false;
  }
  if (type == "Digits") {
    pre.add_digits(p.value("individual_digits", false));
    return false;
  }
  if (type == "ByteLevel") {
    pre.add_byte_level(p.value("add_prefix_space", false), p.value("use_regex", true));
    return true;
  }
  fail(origin, "pre_tokenizer type '" + type + "' is not supported (supported: Sequence, Split, Digits, ByteLevel)");
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path.string() + ": cannot open tokenizer file");
  std::stringstream ss;
  ss << f.rdbuf();
  return from_json_text(ss.str(), path.string());
}

Tokenizer Tokenizer::from_json_text(std::string_view text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(origin, std::string("invalid JSON: ") + e.what());
  }
  auto impl = std::make_unique<Impl>();
  impl->origin = origin;
  try {
    const json& model = j.at("model");
    if (model.value("type", "BPE") != "BPE")
      fail(origin, "model type '" + model.value("type", "") + "' is not supported (only BPE)");
    if (model.contains("continuing_subword_prefix") && !model["continuing_subword_prefix"].is_null())
      fail(origin, "BPE continuing_subword_prefix is not supported");
    if (model.contains("end_of_word_suffix") && !model["end_of_word_suffix"].is_null())
      fail(origin, "BPE end_of_word_suffix is not supported");
    if (j.contains("normalizer") && !j["normalizer"].is_null()) {
      const json& n = j["normalizer"];
      const bool empty_sequence = n.value("type", "") == "Sequence" && n.value("normalizers", json::array()).empty();
      if (!empty_sequence) fail(origin, "normalizer '" + n.value("type", "?") + "' is not supported");
    }

    bool byte_level = false;
    if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null())
      byte_level = add_pretokenizer(origin, j["pre_tokenizer"], impl->pre, false);
    if (!byte_level) fail(origin, "only byte-level BPE is supported (the pre_tokenizer has no ByteLevel step)");
    if (j.contains("decoder") && !j["decoder"].is_null() && j["decoder"].value("type", "") != "ByteLevel")
      fail(origin, "decoder '" + j["decoder"].value("type", "") + "' is not supported (only ByteLevel)");

    std::unordered_map<std::string, int32_t> vocab;
    int32_t max_id = -1;
    for (auto& [tok, id] : model.at("vocab").items()) {
      const int32_t v = id.get<int32_t>();
      vocab.emplace(tok, v);
      max_id = std::max(max_id, v);
    }
    std::vector<std::pair<std::string, std::string>> merges;
    for (const json& m : model.at("merges")) {
      if (m.is_array()) {
        merges.emplace_back(m.at(0).get<std::string>(), m.at(1).get<std::string>());
      } else {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) fail(origin, "malformed merge '" + s + "'");
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      }
    }
    impl->bpe = std::make_unique<BytePairEncoder>(vocab, merges, model.value("ignore_merges", false));

    std::vector<AddedToken> added;
    if (j.contains("added_tokens"))
      for (const json& a : j["added_tokens"]) {
        AddedToken t;
        t.id = a.at("id").get<int32_t>();
        t.content = a.at("content").get<std::string>();
        t.special = a.value("special", false);
        t.lstrip = a.value("lstrip", false);
        t.rstrip = a.value("rstrip", false);
        t.single_word = a.value("single_word", false);
        t.normalized = a.value("normalized", !t.special);
        max_id = std::max(max_id, t.id);
        added.push_back(std::move(t));
      }
    impl->added.build(added);

    const size_t n = static_cast<size_t>(max_id + 1);
    impl->spelling.resize(n);
    impl->bytes.resize(n);
    impl->special.assign(n, 0);
    impl->added_flag.assign(n, 0);
    impl->present.assign(n, 0);
    for (const auto& [tok, id] : vocab) {
      if (id < 0) fail(origin, "negative token id for '" + tok + "'");
      impl->spelling[id] = tok;
      impl->bytes[id] = byte_level_decode_token(tok);
      impl->present[id] = 1;
      impl->by_spelling.emplace(tok, id);
    }
    for (const AddedToken& t : added) {
      // An added token's text is decoded through the same ByteLevel decoder (all-ASCII contents
      // such as "<think>" map to themselves).
      impl->spelling[t.id] = t.content;
      impl->bytes[t.id] = byte_level_decode_token(t.content);
      impl->special[t.id] = t.special ? 1 : 0;
      impl->added_flag[t.id] = 1;
      impl->present[t.id] = 1;
      impl->added_by_content[t.content] = t.id;
    }
  } catch (const json::exception& e) {
    fail(origin, std::string("malformed tokenizer: ") + e.what());
  }
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view input) const {
  // `tokenizers` only ever sees valid UTF-8 (Rust &str); make ours the same.
  std::string repaired;
  std::string_view text = input;
  for (size_t i = 0; i < input.size();) {
    const size_t len = utf8_valid_seq_len(input, i);
    if (len == 0) {
      repaired = utf8_lossy(input);
      text = repaired;
      break;
    }
    i += len;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<std::string> pieces;
  for (const Segment& seg : impl_->added.split(text)) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    pieces.clear();
    impl_->pre.run(text.substr(seg.start, seg.end - seg.start), pieces);
    for (const std::string& p : pieces) impl_->bpe->encode_piece(p, ids);
  }
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string raw;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= impl_->present.size() || !impl_->present[id]) continue;
    if (skip_special_tokens && impl_->special[id]) continue;
    raw += impl_->bytes[id];
  }
  return utf8_lossy(raw);
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  static const std::string empty;
  if (id < 0 || static_cast<size_t>(id) >= impl_->bytes.size()) return empty;
  return impl_->bytes[id];
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->present.size() || !impl_->present[id]) return std::nullopt;
  return impl_->spelling[id];
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const std::string key(token);
  if (auto it = impl_->added_by_content.find(key); it != impl_->added_by_content.end()) return it->second;
  if (auto it = impl_->by_spelling.find(key); it != impl_->by_spelling.end()) return it->second;
  return std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->special.size() && impl_->special[id];
}

bool Tokenizer::is_added(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->added_flag.size() && impl_->added_flag[id];
}

size_t Tokenizer::vocab_size() const { return impl_->present.size(); }

}  // namespace ft::text
