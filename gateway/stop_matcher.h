#pragma once
// Stop strings over streamed text: output is cut before the first occurrence of any stop string
// (or after it, when the stop string is kept), and while streaming, a suffix that could be the
// start of a stop string is held back until the next piece decides it.
#include <string>
#include <string_view>
#include <vector>

namespace ft::gateway {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops, bool include_stop_in_output = false);

  struct Result {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop string matched; feed nothing more
    std::string matched;
  };
  Result push(std::string_view text);
  // End of the stream: whatever was held back is final text.
  std::string flush();

  bool stopped() const { return stopped_; }
  bool active() const { return !stops_.empty(); }
  size_t held_bytes() const { return held_.size(); }

 private:
  std::vector<std::string> stops_;
  bool include_;
  size_t max_len_ = 0;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace ft::gateway
