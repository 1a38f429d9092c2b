#pragma once
// Memory-mapped safetensors reader: one file, or a sharded checkpoint described by
// model.safetensors.index.json. Tensor data is referenced in place (no copy, no alignment
// assumption: EXL3 writers do not align). Every malformed input throws ft::Error naming the file
// and, where there is one, the tensor.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shared/core/mapped_file.h"

namespace ft {

enum class DType { BF16, F16, F32, F64, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2 };

const char* dtype_name(DType t);
size_t dtype_size(DType t);

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // may be unaligned
  size_t nbytes = 0;
  const std::string* file = nullptr;  // the file it lives in, for error messages

  int64_t numel() const;
  std::string shape_str() const;  // "[24, 256]"
  std::string where() const;      // "<file>: tensor <name>"
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::string& path() const { return file_.path(); }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  MappedFile file_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a model directory (or of one .safetensors file given directly).
class TensorStore {
 public:
  // dir: a folder holding model.safetensors, or model.safetensors.index.json + shards, or any
  // set of *.safetensors files; or the path of a single .safetensors file.
  static TensorStore open(const std::string& path);

  const TensorInfo* find(const std::string& name) const;
  const TensorInfo& get(const std::string& name) const;  // throws naming the tensor and folder
  std::vector<std::string> names() const;
  const std::string& source() const { return source_; }
  size_t size() const { return index_.size(); }

 private:
  std::string source_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> index_;
};

}  // namespace ft
