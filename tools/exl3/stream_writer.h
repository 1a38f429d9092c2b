#pragma once
// Safetensors writer for checkpoints too large to hold in memory: tensors are declared first
// (name, dtype, shape, and a function that fills any byte range of the data), then streamed to
// one file or to shards with an index, as Hugging Face lays them out.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shared/model/safetensors.h"

namespace ft::exl3 {

class StreamWriter {
 public:
  // fill(dst, offset, n): the tensor's bytes [offset, offset + n).
  using Fill = std::function<void(uint8_t* dst, uint64_t offset, uint64_t n)>;

  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, Fill fill);
  void add_bytes(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);

  // Writes `dir`/model.safetensors, or model-0000i-of-0000N.safetensors plus
  // model.safetensors.index.json when the data exceed shard_bytes. Returns the bytes written.
  uint64_t write(const std::string& dir, uint64_t shard_bytes) const;

  uint64_t total_bytes() const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t bytes;
    Fill fill;
  };
  std::vector<Entry> entries_;
};

}  // namespace ft::exl3
