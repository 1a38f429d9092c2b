// Byte-level BPE trained on a small built-in corpus. The result is an ordinary Hugging Face
// tokenizer.json (GLM-4.x/5 split regex, ByteLevel pre-tokenizer and decoder) so every tokenizer
// that reads real GLM checkpoints reads this one too.
#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "shared/core/error.h"
#include "tools/demo-model/demo_model.h"

namespace ft::demo {

namespace {

const char* kCorpus = R"CORPUS(The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step.
Hello! How can I help you today? I am a helpful assistant. Let me think about this step by step.
The weather today is sunny with a high of 25 degrees. Tomorrow there will be rain in the afternoon.
def add(a, b):
    return a + b

for (int i = 0; i < n; ++i) { sum += values[i]; }
{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}
Mixture-of-experts models route every token to a few experts; the rest of the network is shared.
Attention lets each token look at the tokens before it. Linear attention keeps a fixed-size state.
Numbers: 1 2 3 10 42 100 2024 3.14159 1e-5 0x1f. Dates: 2026-12-01, 12:30.
Questions and answers: What is the capital of France? The capital of France is Paris.
Why is the sky blue? Because air scatters short wavelengths of sunlight more than long ones.
Thank you very much! You're welcome. Goodbye, and have a nice day.
)CORPUS";

// GPT-2's reversible byte → printable code point table used by ByteLevel.
std::vector<std::string> byte_symbols() {
  std::vector<int> cp(256, -1);
  for (int b = 33; b <= 126; ++b) cp[b] = b;
  for (int b = 161; b <= 172; ++b) cp[b] = b;
  for (int b = 174; b <= 255; ++b) cp[b] = b;
  int n = 0;
  for (int b = 0; b < 256; ++b)
    if (cp[b] < 0) cp[b] = 256 + n++;
  std::vector<std::string> out(256);
  for (int b = 0; b < 256; ++b) {
    const int c = cp[b];
    if (c < 0x80) {
      out[b] = std::string(1, static_cast<char>(c));
    } else {
      out[b] = std::string{static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    }
  }
  return out;
}

// Coarse word split for training only (a space sticks to the following word).
std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> w;
  std::string cur;
  auto kind = [](unsigned char c) { return std::isalpha(c) ? 0 : std::isdigit(c) ? 1 : std::isspace(c) ? 2 : 3; };
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const bool start = cur.empty() ? false
                                   : (kind(c) == 2 && c != ' ') || (c == ' ') ||
                                         (kind(c) != kind(static_cast<unsigned char>(cur.back())) && cur != " ");
    if (start) {
      w.push_back(cur);
      cur.clear();
    }
    cur += static_cast<char>(c);
  }
  if (!cur.empty()) w.push_back(cur);
  return w;
}

}  // namespace

const std::vector<std::string>& glm_special_tokens() {
  // GLM's added-token block in its real order (glm-chat-format.md §1): with the GLM layout the
  // i-th token has id kGlmFirstSpecialId + i, e.g. [gMASK] 154822, <sop> 154824, <think> 154841.
  static const std::vector<std::string> t = {
      "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
      "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>",
      "<|end_of_video|>", "<|begin_of_audio|>", "<|end_of_audio|>", "<|begin_of_transcription|>",
      "<|end_of_transcription|>", "<|code_prefix|>", "<|code_middle|>", "<|code_suffix|>", "<think>", "</think>",
      "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<arg_key>", "</arg_key>", "<arg_value>",
      "</arg_value>", "/nothink", "<|begin_of_box|>", "<|end_of_box|>", "<|image|>", "<|video|>"};
  return t;
}

static bool glm_layout(const DemoOptions& o) {
  return o.vocab >= kGlmFirstSpecialId + static_cast<int64_t>(glm_special_tokens().size());
}

DemoVocab write_demo_tokenizer(const DemoOptions& o) {
  const bool glm = glm_layout(o);
  const auto sym = byte_symbols();
  std::map<std::vector<std::string>, int64_t> words;
  for (const auto& w : words_of(kCorpus)) {
    std::vector<std::string> s;
    for (unsigned char c : w) s.push_back(sym[c]);
    ++words[s];
  }
  // A std::map object: GLM's layout puts 154,820 entries here (ordered_json looks keys up linearly).
  nlohmann::json vocab = nlohmann::json::object();
  int64_t next = 0;
  for (int b = 0; b < 256; ++b) vocab[sym[b]] = next++;
  nlohmann::json merges = nlohmann::json::array();
  const int64_t n_special = static_cast<int64_t>(glm_special_tokens().size());
  if (o.vocab > 0 && o.vocab < 256 + n_special)
    throw Error("--vocab must be at least " + std::to_string(256 + n_special) + " (bytes + GLM special tokens)");
  const bool exact = o.vocab > 0 && !glm;          // packed: BPE fills the vocabulary up to the specials
  const int64_t min_count = exact ? 1 : 2;          // an exact size may need merges seen once
  for (int64_t m = 0; exact ? next < o.vocab - n_special : m < o.merges; ++m) {
    std::map<std::pair<std::string, std::string>, int64_t> pairs;
    for (const auto& [w, n] : words)
      for (size_t i = 0; i + 1 < w.size(); ++i) pairs[{w[i], w[i + 1]}] += n;
    auto best = pairs.end();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (best == pairs.end() || it->second > best->second) best = it;  // map order breaks ties
    if (best == pairs.end() || best->second < min_count) break;
    const auto [a, b] = best->first;
    merges.push_back({a, b});
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    std::map<std::vector<std::string>, int64_t> merged;
    for (const auto& [w, n] : words) {
      std::vector<std::string> r;
      for (size_t i = 0; i < w.size(); ++i) {
        if (i + 1 < w.size() && w[i] == a && w[i + 1] == b) {
          r.push_back(a + b);
          ++i;
        } else {
          r.push_back(w[i]);
        }
      }
      merged[r] += n;
    }
    words.swap(merged);
  }
  if (glm) {
    // The corpus yields a few hundred merges; the rest of the ids below the specials get filler
    // words (" ab", " ac", …, reachable by no merge, so encoding never makes them) so that random
    // weights, which pick ids uniformly, produce visible text as the real 154,820-token BPE
    // vocabulary would, not a stream of ids that decode to nothing.
    std::string word = "a";
    auto bump = [&word] {  // a, b, …, z, aa, ab, …
      for (size_t i = word.size(); i-- > 0;) {
        if (word[i] != 'z') {
          ++word[i];
          return;
        }
        word[i] = 'a';
      }
      word.insert(word.begin(), 'a');
    };
    while (next < kGlmFirstSpecialId) {
      const std::string t = sym[' '] + word;
      bump();
      if (!vocab.contains(t)) vocab[t] = next++;
    }
  }
  nlohmann::json added = nlohmann::json::array();
  const auto& specials = glm_special_tokens();
  // GLM layout: ids from the last BPE token up to the specials, and past them up to the model's
  // vocab_size, have no token (as in the real checkpoint's padded embedding).
  const int64_t first_special = glm ? kGlmFirstSpecialId : next;
  DemoVocab out;
  for (size_t i = 0; i < specials.size(); ++i) {
    const bool special = specials[i].front() == '<' ? specials[i].find('|') != std::string::npos || specials[i] == "<sop>" ||
                                                          specials[i] == "<eop>"
                                                    : specials[i].front() == '[';
    const int64_t id = first_special + static_cast<int64_t>(i);
    added.push_back({{"id", id}, {"content", specials[i]}, {"single_word", false},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", special}});
    // <|endoftext|>, <|user|>, <|observation|> end a turn, as in GLM's generation_config.json.
    if (specials[i] == "<|endoftext|>" || specials[i] == "<|user|>" || specials[i] == "<|observation|>")
      out.eos_ids.push_back(id);
  }
  const int64_t total = first_special + static_cast<int64_t>(specials.size());
  out.model_vocab = glm ? o.vocab : total;
  if (exact && total != o.vocab)
    throw Error("the built-in corpus yields at most " + std::to_string(total) + " tokens; --vocab " +
                std::to_string(o.vocab) + " is too large");
  nlohmann::json tok = {  // keys sorted; readers look them up by name
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern",
            {{"Regex",
              "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
              "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
        {"vocab", vocab}, {"merges", merges}}}};
  std::ofstream(o.out_dir + "/tokenizer.json") << tok.dump(1);
  nlohmann::ordered_json cfg = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                                {"eos_token", "<|endoftext|>"},
                                {"pad_token", "<|endoftext|>"},
                                {"model_max_length", 131072},
                                {"clean_up_tokenization_spaces", false},
                                {"do_lower_case", false},
                                {"chat_template", glm53_chat_template()}};
  std::ofstream f(o.out_dir + "/tokenizer_config.json");
  f << cfg.dump(1);
  if (!f) throw Error(o.out_dir + "/tokenizer_config.json: write failed");
  return out;
}

}  // namespace ft::demo
