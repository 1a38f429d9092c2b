#pragma once
// One exception type for every user-facing failure (bad model file, bad config, bad request).
// The message must say what was wrong and where (file, tensor, field); callers print it as is.
#include <stdexcept>
#include <string>

namespace ft {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace ft
