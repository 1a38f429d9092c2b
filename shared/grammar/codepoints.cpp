#include "shared/grammar/codepoints.h"

#include <algorithm>

namespace ft::grammar {

CodepointSet CodepointSet::range(char32_t lo, char32_t hi) {
  CodepointSet s;
  s.add(lo, hi);
  return s;
}

void CodepointSet::add(char32_t lo, char32_t hi) {
  if (lo > hi) return;
  if (hi > kMaxCodepoint) hi = kMaxCodepoint;
  ranges_.emplace_back(lo, hi);
  normalize();
}

void CodepointSet::add(const CodepointSet& o) {
  ranges_.insert(ranges_.end(), o.ranges_.begin(), o.ranges_.end());
  normalize();
}

void CodepointSet::remove(char32_t lo, char32_t hi) {
  std::vector<std::pair<char32_t, char32_t>> out;
  for (auto [a, b] : ranges_) {
    if (b < lo || a > hi) {
      out.emplace_back(a, b);
      continue;
    }
    if (a < lo) out.emplace_back(a, lo - 1);
    if (b > hi) out.emplace_back(hi + 1, b);
  }
  ranges_ = std::move(out);
}

void CodepointSet::remove(const CodepointSet& o) {
  for (auto [a, b] : o.ranges_) remove(a, b);
}

CodepointSet CodepointSet::complement() const {
  CodepointSet c = all();
  c.remove(*this);
  return c;
}

bool CodepointSet::contains(char32_t c) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), c,
                             [](char32_t x, const std::pair<char32_t, char32_t>& r) { return x < r.first; });
  return it != ranges_.begin() && std::prev(it)->second >= c;
}

void CodepointSet::normalize() {
  // Surrogates are not characters: UTF-8 cannot carry them.
  std::vector<std::pair<char32_t, char32_t>> in;
  for (auto [a, b] : ranges_) {
    if (b < 0xD800 || a > 0xDFFF) {
      in.emplace_back(a, b);
      continue;
    }
    if (a < 0xD800) in.emplace_back(a, 0xD7FF);
    if (b > 0xDFFF) in.emplace_back(0xE000, b);
  }
  std::sort(in.begin(), in.end());
  ranges_.clear();
  for (auto r : in) {
    if (!ranges_.empty() && r.first <= ranges_.back().second + 1) ranges_.back().second = std::max(ranges_.back().second, r.second);
    else ranges_.push_back(r);
  }
}

namespace {

int utf8_len(char32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

void encode(char32_t c, uint8_t* out) {
  switch (utf8_len(c)) {
    case 1: out[0] = uint8_t(c); break;
    case 2:
      out[0] = uint8_t(0xC0 | (c >> 6));
      out[1] = uint8_t(0x80 | (c & 0x3F));
      break;
    case 3:
      out[0] = uint8_t(0xE0 | (c >> 12));
      out[1] = uint8_t(0x80 | ((c >> 6) & 0x3F));
      out[2] = uint8_t(0x80 | (c & 0x3F));
      break;
    default:
      out[0] = uint8_t(0xF0 | (c >> 18));
      out[1] = uint8_t(0x80 | ((c >> 12) & 0x3F));
      out[2] = uint8_t(0x80 | ((c >> 6) & 0x3F));
      out[3] = uint8_t(0x80 | (c & 0x3F));
  }
}

// Splits [lo, hi] into pieces whose UTF-8 forms are products of byte ranges (every byte
// position ranges independently), the classic construction of UTF-8 range automata.
void utf8_pieces(char32_t lo, char32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  if (lo > hi) return;
  for (char32_t edge : {char32_t(0x7F), char32_t(0x7FF), char32_t(0xFFFF)})
    if (lo <= edge && hi > edge) {
      utf8_pieces(lo, edge, out);
      utf8_pieces(edge + 1, hi, out);
      return;
    }
  const int n = utf8_len(lo);
  for (int i = 1; i < n; ++i) {
    const char32_t m = (char32_t(1) << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_pieces(lo, lo | m, out);
        utf8_pieces((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_pieces(lo, (hi & ~m) - 1, out);
        utf8_pieces(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  encode(lo, a);
  encode(hi, b);
  std::vector<std::pair<uint8_t, uint8_t>> piece;
  for (int i = 0; i < n; ++i) piece.emplace_back(a[i], b[i]);
  out.push_back(std::move(piece));
}

int32_t utf8_expr(Grammar& g, const CodepointSet& set) {
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> pieces;
  for (auto [a, b] : set.ranges()) utf8_pieces(a, b, pieces);
  // Pieces with the same tail share it: merge single-byte pieces into one byte set.
  ByteSet ascii;
  std::vector<int32_t> alts;
  for (const auto& p : pieces) {
    if (p.size() == 1) {
      ascii.set_range(p[0].first, p[0].second);
      continue;
    }
    std::vector<int32_t> s;
    for (auto [x, y] : p) s.push_back(g.bytes(ByteSet::range(x, y)));
    alts.push_back(g.seq(std::move(s)));
  }
  if (!ascii.empty()) alts.insert(alts.begin(), g.bytes(ascii));
  return g.alt(std::move(alts));
}

}  // namespace

int32_t char_set_expr(Grammar& g, const CodepointSet& set, CharContext ctx) {
  if (ctx == CharContext::Raw) return utf8_expr(g, set);
  if (ctx == CharContext::TagText) {
    CodepointSet s = set;
    s.remove('<', '<');
    return utf8_expr(g, s);
  }
  // JSON: characters that need an escape get their escape; the rest are written as is.
  CodepointSet plain = set;
  plain.remove(0, 0x1F);
  plain.remove('"', '"');
  plain.remove('\\', '\\');
  std::vector<int32_t> alts;
  if (!plain.empty()) alts.push_back(utf8_expr(g, plain));
  if (set.contains('"')) alts.push_back(g.literal("\\\""));
  if (set.contains('\\')) alts.push_back(g.literal("\\\\"));
  if (set.contains('/')) alts.push_back(g.literal("\\/"));
  // Any character may be written \uXXXX; offered for the full set only (free text), where it
  // costs nothing to allow. Surrogate halves are left out: alone they are not characters.
  if (set.ranges().size() == 2 && set.ranges()[0] == std::make_pair(char32_t(0), char32_t(0xD7FF)) &&
      set.ranges()[1] == std::make_pair(char32_t(0xE000), kMaxCodepoint)) {
    ByteSet hex = ByteSet::range('0', '9'), not_d = ByteSet::range('0', '9');
    hex.set_range('a', 'f');
    hex.set_range('A', 'F');
    not_d.set_range('a', 'c');
    not_d.set_range('A', 'C');
    not_d.set_range('e', 'f');
    not_d.set_range('E', 'F');
    const int32_t h = g.bytes(hex);
    alts.push_back(g.seq({g.literal("\\u"), g.alt({g.seq({g.bytes(not_d), h, h, h}),
                                                   g.seq({g.bytes(ByteSet::of('d') |= ByteSet::of('D')), g.bytes(ByteSet::range('0', '7')), h, h})})}));
  }
  static const char hex[] = "0123456789abcdef";
  for (char32_t c = 0; c < 0x20; ++c) {
    if (!set.contains(c)) continue;
    switch (c) {
      case '\n': alts.push_back(g.literal("\\n")); break;
      case '\t': alts.push_back(g.literal("\\t")); break;
      case '\r': alts.push_back(g.literal("\\r")); break;
      case '\b': alts.push_back(g.literal("\\b")); break;
      case '\f': alts.push_back(g.literal("\\f")); break;
      default: alts.push_back(g.literal(std::string("\\u00") + hex[c >> 4] + hex[c & 15]));
    }
  }
  return g.alt(std::move(alts));
}

CodepointSet digit_class() { return CodepointSet::range('0', '9'); }

CodepointSet word_class() {
  CodepointSet s = CodepointSet::range('a', 'z');
  s.add('A', 'Z');
  s.add('0', '9');
  s.add('_', '_');
  return s;
}

CodepointSet space_class() {
  // ECMA-262 WhiteSpace and LineTerminator.
  CodepointSet s = CodepointSet::range('\t', '\r');
  for (char32_t c : {char32_t(' '), char32_t(0xA0), char32_t(0x1680), char32_t(0x2028), char32_t(0x2029),
                     char32_t(0x202F), char32_t(0x205F), char32_t(0x3000), char32_t(0xFEFF)})
    s.add(c, c);
  s.add(0x2000, 0x200A);
  return s;
}

}  // namespace ft::grammar
