#pragma once
// Scratch of one layer of one step: a bump allocator over one device buffer, reset before each
// layer. Sized at start-up for the largest step; a request past its end is a bug, reported as
// an ft::Error naming the buffer instead of a stray write.
#include <cstddef>
#include <cstdint>
#include <string>

#include "shared/core/error.h"

namespace ft::cuda {

class Arena {
 public:
  void init(void* base, size_t bytes) {
    base_ = static_cast<uint8_t*>(base);
    size_ = bytes;
    used_ = 0;
  }
  void reset() { used_ = 0; }
  template <class T>
  T* take(size_t n, const char* what) {
    const size_t at = (used_ + 255) & ~size_t{255};
    const size_t bytes = n * sizeof(T);
    if (at + bytes > size_)
      throw Error(std::string("step scratch exhausted by ") + what + ": " + std::to_string(at + bytes) + " of " +
                  std::to_string(size_) + " bytes");
    used_ = at + bytes;
    peak_ = used_ > peak_ ? used_ : peak_;
    return reinterpret_cast<T*>(base_ + at);
  }
  size_t used() const { return used_; }
  size_t peak() const { return peak_; }
  size_t size() const { return size_; }

 private:
  uint8_t* base_ = nullptr;
  size_t size_ = 0, used_ = 0, peak_ = 0;
};

}  // namespace ft::cuda
