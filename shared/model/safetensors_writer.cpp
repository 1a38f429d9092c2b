#include "shared/model/safetensors_writer.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "shared/core/error.h"
#include "shared/core/half.h"

namespace ft {

void SafetensorsWriter::add_raw(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                std::vector<uint8_t> bytes) {
  entries_.push_back({name, dtype, std::move(shape), std::move(bytes)});
}

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            const std::vector<float>& v) {
  std::vector<uint8_t> b;
  if (dtype == DType::F32) {
    b.resize(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
  } else if (dtype == DType::BF16 || dtype == DType::F16) {
    b.resize(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = dtype == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
  } else {
    throw Error(std::string("SafetensorsWriter::add: float values cannot be stored as ") + dtype_name(dtype));
  }
  add_raw(name, dtype, std::move(shape), std::move(b));
}

void SafetensorsWriter::add_i64(const std::string& name, std::vector<int64_t> shape, const std::vector<int64_t>& v) {
  std::vector<uint8_t> b(v.size() * 8);
  std::memcpy(b.data(), v.data(), b.size());
  add_raw(name, DType::I64, std::move(shape), std::move(b));
}

std::vector<uint8_t> SafetensorsWriter::bytes() const {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata_.empty()) h["__metadata__"] = metadata_;
  uint64_t off = 0;
  for (const auto& e : entries_) {
    h[e.name] = {{"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {off, off + e.data.size()}}};
    off += e.data.size();
  }
  const std::string js = h.dump();
  const uint64_t n = js.size();
  std::vector<uint8_t> out(8 + n);
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, js.data(), n);
  for (const auto& e : entries_) out.insert(out.end(), e.data.begin(), e.data.end());
  return out;
}

void SafetensorsWriter::write(const std::string& path) const {
  const auto b = bytes();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw Error(path + ": cannot create");
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!f) throw Error(path + ": write failed");
}

}  // namespace ft
