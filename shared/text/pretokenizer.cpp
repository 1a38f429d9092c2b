#include "shared/text/pretokenizer.h"

#include <algorithm>
#include <utility>

namespace ft::text {

namespace {

// GPT-2's split pattern, used by a ByteLevel step with use_regex = true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Span {
  size_t start, end;
  bool is_match;
};

// Applies one Split step to `piece`, with the span-merging rules of tokenizers' SplitDelimiterBehavior.
void split_piece(const std::string& piece, const Regex& re, SplitBehavior behavior, bool invert,
                 std::vector<std::string>& out) {
  std::vector<std::pair<size_t, size_t>> matches;
  re.find_all(piece, matches);
  std::vector<Span> spans;
  size_t prev = 0;
  for (auto [s, e] : matches) {
    if (prev != s) spans.push_back({prev, s, invert});
    spans.push_back({s, e, !invert});
    prev = e;
  }
  if (prev != piece.size()) spans.push_back({prev, piece.size(), invert});

  std::vector<Span> merged;
  switch (behavior) {
    case SplitBehavior::Isolated:
      merged = std::move(spans);
      break;
    case SplitBehavior::Removed:
      for (const Span& s : spans)
        if (!s.is_match) merged.push_back(s);
      break;
    case SplitBehavior::MergedWithPrevious: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !merged.empty())
          merged.back().end = s.end;
        else
          merged.push_back({s.start, s.end, false});
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool previous_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !merged.empty())
          merged.back().start = it->start;
        else
          merged.push_back({it->start, it->end, false});
        previous_match = it->is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    }
    case SplitBehavior::Contiguous: {
      bool previous_match = false;
      bool first = true;
      for (const Span& s : spans) {
        if (!first && s.is_match == previous_match)
          merged.back().end = s.end;
        else
          merged.push_back({s.start, s.end, false});
        previous_match = s.is_match;
        first = false;
      }
      break;
    }
  }
  for (const Span& s : merged)
    if (s.end > s.start) out.emplace_back(piece, s.start, s.end - s.start);
}

}  // namespace

void PreTokenizer::add_split(const std::string& pattern, bool literal, SplitBehavior behavior, bool invert) {
  steps_.push_back({std::make_shared<Regex>(pattern, literal), behavior, invert, false});
}

void PreTokenizer::add_digits(bool individual_digits) {
  steps_.push_back({std::make_shared<Regex>(R"(\p{N})"),
                    individual_digits ? SplitBehavior::Isolated : SplitBehavior::Contiguous, false, false});
}

void PreTokenizer::add_byte_level(bool add_prefix_space, bool use_regex) {
  Step s;
  if (use_regex) s.regex = std::make_shared<Regex>(kGpt2Pattern);
  s.add_prefix_space = add_prefix_space;
  if (s.regex || s.add_prefix_space) steps_.push_back(std::move(s));
}

void PreTokenizer::run(std::string_view text, std::vector<std::string>& out) const {
  if (text.empty()) return;
  std::vector<std::string> cur{std::string(text)}, next;
  for (const Step& step : steps_) {
    next.clear();
    for (std::string& piece : cur) {
      if (step.add_prefix_space && piece.front() != ' ') piece.insert(piece.begin(), ' ');
      if (step.regex)
        split_piece(piece, *step.regex, step.behavior, step.invert, next);
      else
        next.push_back(std::move(piece));
    }
    std::swap(cur, next);
  }
  for (std::string& p : cur)
    if (!p.empty()) out.push_back(std::move(p));
}

}  // namespace ft::text
