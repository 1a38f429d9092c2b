#include "shared/text/added_tokens.h"

#include "shared/text/utf8.h"

namespace ft::text {

void AddedTokenMatcher::Trie::insert(std::string_view s, int32_t token) {
  if (s.empty()) return;
  if (nodes.empty()) nodes.emplace_back();
  first_byte[static_cast<unsigned char>(s[0])] = true;
  int32_t cur = 0;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    int32_t next = -1;
    for (auto& [b, idx] : nodes[cur].children)
      if (b == c) next = idx;
    if (next < 0) {
      next = static_cast<int32_t>(nodes.size());
      nodes[cur].children.emplace_back(c, next);
      nodes.emplace_back();
    }
    cur = next;
  }
  if (nodes[cur].token < 0) nodes[cur].token = token;
}

int32_t AddedTokenMatcher::Trie::longest_at(std::string_view text, size_t i, size_t& len) const {
  int32_t best = -1;
  int32_t cur = 0;
  for (size_t k = i; k < text.size(); ++k) {
    const auto c = static_cast<unsigned char>(text[k]);
    int32_t next = -1;
    for (auto& [b, idx] : nodes[cur].children)
      if (b == c) next = idx;
    if (next < 0) break;
    cur = next;
    if (nodes[cur].token >= 0) {
      best = nodes[cur].token;
      len = k + 1 - i;
    }
  }
  return best;
}

void AddedTokenMatcher::build(const std::vector<AddedToken>& tokens) {
  tokens_ = tokens;
  for (size_t i = 0; i < tokens_.size(); ++i)
    (tokens_[i].normalized ? normalized_ : plain_).insert(tokens_[i].content, static_cast<int32_t>(i));
}

namespace {

bool is_word_char(char32_t c) { return c == '_' || py_isalnum(c); }

char32_t last_code_point(std::string_view s) {
  size_t i = s.size();
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i > 0) --i;
  return next_code_point(s, i);
}

}  // namespace

void AddedTokenMatcher::split_with(const Trie& trie, std::string_view text, size_t base,
                                   std::vector<Segment>& out) const {
  if (trie.nodes.empty()) {
    out.push_back({base, base + text.size(), -1});
    return;
  }
  size_t start_offset = 0;  // end of the previous accepted match
  size_t i = 0;
  while (i < text.size()) {
    if (!trie.first_byte[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    size_t len = 0;
    const int32_t t = trie.longest_at(text, i, len);
    if (t < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = tokens_[t];
    size_t start = i, stop = i + len;
    i = stop;  // matches never overlap, even a discarded one (leftmost_find_iter semantics)
    if (tok.single_word) {
      const bool start_ok = start == 0 || !is_word_char(last_code_point(text.substr(0, start)));
      size_t k = stop;
      const bool stop_ok = stop == text.size() || !is_word_char(next_code_point(text, k));
      if (!start_ok || !stop_ok) continue;
    }
    if (tok.lstrip) {
      size_t s = start;
      while (s > start_offset) {
        size_t p = s - 1;
        while (p > 0 && (static_cast<unsigned char>(text[p]) & 0xC0) == 0x80) --p;
        size_t q = p;
        if (!py_isspace(next_code_point(text, q))) break;
        s = p;
      }
      start = s;
    }
    if (tok.rstrip) {
      while (stop < text.size()) {
        size_t q = stop;
        if (!py_isspace(next_code_point(text, q))) break;
        stop = q;
      }
    }
    if (start_offset < start) out.push_back({base + start_offset, base + start, -1});
    out.push_back({base + start, base + stop, tok.id});
    start_offset = stop;
    i = stop;
  }
  if (start_offset < text.size()) out.push_back({base + start_offset, base + text.size(), -1});
}

std::vector<Segment> AddedTokenMatcher::split(std::string_view text) const {
  std::vector<Segment> first, out;
  split_with(plain_, text, 0, first);
  // Tokens flagged `normalized` are looked for only in what the others left as plain text.
  for (const Segment& s : first) {
    if (s.id >= 0 || normalized_.nodes.empty())
      out.push_back(s);
    else
      split_with(normalized_, text.substr(s.start, s.end - s.start), s.start, out);
  }
  return out;
}

}  // namespace ft::text
