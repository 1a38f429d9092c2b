#include "gateway/stop_matcher.h"

#include <algorithm>

namespace ft::gateway {

StopMatcher::StopMatcher(std::vector<std::string> stops, bool include_stop_in_output) : include_(include_stop_in_output) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
  for (const auto& s : stops_) max_len_ = std::max(max_len_, s.size());
}

StopMatcher::Result StopMatcher::push(std::string_view text) {
  Result r;
  if (stopped_) return r;
  if (stops_.empty()) {
    r.text.assign(text);
    return r;
  }
  held_.append(text);
  // Earliest match wins; at equal positions the longest stop string.
  size_t best = std::string::npos;
  const std::string* which = nullptr;
  for (const auto& s : stops_) {
    size_t p = held_.find(s);
    if (p != std::string::npos && (p < best || (p == best && s.size() > which->size()))) {
      best = p;
      which = &s;
    }
  }
  if (which) {
    stopped_ = true;
    r.stopped = true;
    r.matched = *which;
    r.text = held_.substr(0, include_ ? best + which->size() : best);
    held_.clear();
    return r;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  for (size_t k = std::min(held_.size(), max_len_ - 1); k > 0; --k) {
    std::string_view tail(held_.data() + held_.size() - k, k);
    bool prefix = std::any_of(stops_.begin(), stops_.end(),
                              [&](const std::string& s) { return s.size() > k && std::string_view(s).substr(0, k) == tail; });
    if (prefix) {
      keep = k;
      break;
    }
  }
  r.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return r;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace ft::gateway
