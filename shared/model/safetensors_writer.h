#pragma once
// Writes safetensors files (used by our model generators and by loader tests that need
// malformed inputs). Tensors are stored in insertion order with no padding.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shared/model/safetensors.h"

namespace ft {

class SafetensorsWriter {
 public:
  void add_raw(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  // fp32 values stored as `dtype` (BF16, F16 or F32; BF16/F16 round to nearest even).
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, const std::vector<float>& values);
  void add_i64(const std::string& name, std::vector<int64_t> shape, const std::vector<int64_t>& values);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

  // Serialised file: 8-byte header length, JSON header, data.
  std::vector<uint8_t> bytes() const;
  void write(const std::string& path) const;  // throws ft::Error on I/O failure

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace ft
