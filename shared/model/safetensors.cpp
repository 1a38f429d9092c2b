#include "shared/model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "shared/core/error.h"

namespace ft {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct DTypeName {
  const char* name;
  DType type;
  size_t size;
};
constexpr DTypeName kDTypes[] = {
    {"BF16", DType::BF16, 2}, {"F16", DType::F16, 2},         {"F32", DType::F32, 4},
    {"F64", DType::F64, 8},   {"I64", DType::I64, 8},         {"I32", DType::I32, 4},
    {"I16", DType::I16, 2},   {"I8", DType::I8, 1},           {"U8", DType::U8, 1},
    {"BOOL", DType::BOOL, 1}, {"F8_E4M3", DType::F8_E4M3, 1}, {"F8_E5M2", DType::F8_E5M2, 1},
};

}  // namespace

const char* dtype_name(DType t) {
  for (const auto& d : kDTypes)
    if (d.type == t) return d.name;
  return "?";
}

size_t dtype_size(DType t) {
  for (const auto& d : kDTypes)
    if (d.type == t) return d.size;
  return 0;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string TensorInfo::where() const { return (file ? *file : std::string("?")) + ": tensor " + name; }

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  const std::string& p = file_.path();
  if (file_.size() < 8) throw Error(p + ": not a safetensors file (shorter than the 8-byte header length)");
  uint64_t hlen = 0;
  std::memcpy(&hlen, file_.data(), 8);  // little-endian on every platform we build for
  if (hlen > file_.size() - 8)
    throw Error(p + ": truncated or not a safetensors file (header length " + std::to_string(hlen) +
                " exceeds the file size " + std::to_string(file_.size()) + ")");
  const char* hbeg = reinterpret_cast<const char*>(file_.data() + 8);
  json header;
  try {
    header = json::parse(hbeg, hbeg + hlen);
  } catch (const json::exception& e) {
    throw Error(p + ": bad safetensors JSON header: " + e.what());
  }
  if (!header.is_object()) throw Error(p + ": bad safetensors JSON header: not an object");
  const uint8_t* base = file_.data() + 8 + hlen;
  const uint64_t data_size = file_.size() - 8 - hlen;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (it->is_object())
        for (auto m = it->begin(); m != it->end(); ++m)
          if (m->is_string()) metadata_[m.key()] = m->get<std::string>();
      continue;
    }
    const std::string where = p + ": tensor " + name;
    const json& e = *it;
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      throw Error(where + ": header entry needs dtype, shape and data_offsets");
    TensorInfo t;
    t.name = name;
    t.file = &file_.path();
    const json& jd = e["dtype"];
    bool known = false;
    if (jd.is_string()) {
      const std::string ds = jd.get<std::string>();
      for (const auto& d : kDTypes)
        if (ds == d.name) {
          t.dtype = d.type;
          known = true;
        }
      if (!known) throw Error(where + ": unsupported dtype " + ds);
    } else {
      throw Error(where + ": dtype is not a string");
    }
    const json& js = e["shape"];
    if (!js.is_array()) throw Error(where + ": shape is not an array");
    for (const auto& d : js) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) throw Error(where + ": bad shape entry " + d.dump());
      t.shape.push_back(d.get<int64_t>());
    }
    const json& jo = e["data_offsets"];
    if (!jo.is_array() || jo.size() != 2 || !jo[0].is_number_unsigned() || !jo[1].is_number_unsigned())
      throw Error(where + ": data_offsets must be two non-negative integers");
    const uint64_t b = jo[0].get<uint64_t>(), en = jo[1].get<uint64_t>();
    if (b > en || en > data_size)
      throw Error(where + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(en) +
                  ") outside the data section of " + std::to_string(data_size) + " bytes (truncated file?)");
    const uint64_t want = static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype);
    if (en - b != want)
      throw Error(where + ": holds " + std::to_string(en - b) + " bytes but " + dtype_name(t.dtype) + " " +
                  t.shape_str() + " needs " + std::to_string(want));
    t.data = base + b;
    t.nbytes = en - b;
    tensors_.emplace(name, std::move(t));
  }
}

TensorStore TensorStore::open(const std::string& path) {
  TensorStore s;
  s.source_ = path;
  std::vector<std::string> files;
  std::map<std::string, std::string> expected;  // tensor -> shard, from the index
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    files.push_back(path);
  } else if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    const fs::path index = dir / "model.safetensors.index.json";
    if (fs::exists(index)) {
      json j;
      std::ifstream in(index);
      try {
        j = json::parse(in);
      } catch (const json::exception& e) {
        throw Error(index.string() + ": bad JSON: " + e.what());
      }
      if (!j.contains("weight_map") || !j["weight_map"].is_object())
        throw Error(index.string() + ": no weight_map object");
      std::set<std::string> shards;
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        if (!it->is_string()) throw Error(index.string() + ": weight_map entry for " + it.key() + " is not a file name");
        expected[it.key()] = it->get<std::string>();
        shards.insert(it->get<std::string>());
      }
      for (const auto& sh : shards) {
        const fs::path f = dir / sh;
        if (!fs::exists(f)) throw Error(index.string() + ": shard " + f.string() + " listed in weight_map does not exist");
        files.push_back(f.string());
      }
    } else if (fs::exists(dir / "model.safetensors")) {
      files.push_back((dir / "model.safetensors").string());
    } else {
      for (const auto& e : fs::directory_iterator(dir))
        if (e.is_regular_file() && e.path().extension() == ".safetensors") files.push_back(e.path().string());
      std::sort(files.begin(), files.end());
      if (files.empty()) throw Error(path + ": no *.safetensors files in this folder");
    }
  } else {
    throw Error(path + ": no such file or folder");
  }
  for (const auto& f : files) {
    s.files_.push_back(std::make_unique<SafetensorsFile>(f));
    for (const auto& [name, info] : s.files_.back()->tensors()) {
      auto [it, inserted] = s.index_.emplace(name, &info);
      if (!inserted) throw Error(f + ": tensor " + name + " also appears in " + *it->second->file);
    }
  }
  for (const auto& [name, shard] : expected) {
    auto it = s.index_.find(name);
    if (it == s.index_.end())
      throw Error((fs::path(path) / shard).string() + ": tensor " + name +
                  " is listed in model.safetensors.index.json but missing from the shard");
  }
  return s;
}

const TensorInfo* TensorStore::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const TensorInfo& TensorStore::get(const std::string& name) const {
  const TensorInfo* t = find(name);
  if (!t) throw Error(source_ + ": missing tensor " + name);
  return *t;
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> v;
  v.reserve(index_.size());
  for (const auto& [n, _] : index_) v.push_back(n);
  return v;
}

}  // namespace ft
