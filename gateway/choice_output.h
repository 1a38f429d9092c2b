#pragma once
// One generated sequence as the gateway sees it: token messages from the worker in, final text
// out. Filters special tokens, detokenizes incrementally, applies stop strings (holding back a
// possible partial match), and holds back a possible stop token until the stream says whether it
// ended the generation (stop tokens never appear in text, ids or logprobs).
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gateway/stop_matcher.h"
#include "proto/flashtier/generate.pb.h"
#include "shared/text/detokenizer.h"
#include "shared/text/tokenizer.h"

namespace ft::gateway {

struct OutToken {
  int32_t id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // best first
};

struct ChoiceStep {
  std::string text;              // new final text
  std::vector<OutToken> tokens;  // tokens consumed for it
};

class ChoiceOutput {
 public:
  struct Options {
    bool skip_special_tokens = true;
    std::set<int32_t> keep_special;   // special ids kept even when skipping (parser tags)
    std::vector<std::string> stop;    // stop strings
    bool include_stop_str = false;
    std::set<int32_t> stop_ids;       // EOS ids (unless ignore_eos) and request stop_token_ids
  };
  ChoiceOutput(const text::Tokenizer& tok, Options opts);

  // One worker message. After a stop string matched, further tokens are ignored.
  ChoiceStep push(const flashtier::v1::GenerateResponse& msg);
  // The stream ended without a `finished` message (error or cancellation): releases held text.
  ChoiceStep flush();

  bool stopped_by_string() const { return stop_.stopped(); }
  const std::string& matched_stop() const { return matched_; }
  std::optional<int32_t> matched_stop_token() const { return stop_token_; }
  bool finished() const { return finished_; }
  uint32_t consumed_tokens() const { return consumed_; }
  const std::vector<int32_t>& output_ids() const { return ids_; }

 private:
  void consume(const OutToken& t, ChoiceStep& step);
  void finish_text(ChoiceStep& step);

  const text::Tokenizer* tok_;
  Options opts_;
  text::IncrementalDetokenizer detok_;
  StopMatcher stop_;
  std::optional<OutToken> held_;
  std::string matched_;
  std::optional<int32_t> stop_token_;
  std::vector<int32_t> ids_;
  uint32_t consumed_ = 0;
  bool finished_ = false;
};

}  // namespace ft::gateway
