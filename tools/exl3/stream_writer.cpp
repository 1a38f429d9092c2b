#include "tools/exl3/stream_writer.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "shared/core/error.h"

namespace ft::exl3 {

void StreamWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape, Fill fill) {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  entries_.push_back({name, dtype, std::move(shape), n, std::move(fill)});
}

void StreamWriter::add_bytes(const std::string& name, DType dtype, std::vector<int64_t> shape,
                             std::vector<uint8_t> bytes) {
  auto data = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  add(name, dtype, std::move(shape), [data](uint8_t* dst, uint64_t off, uint64_t n) {
    std::copy(data->begin() + static_cast<int64_t>(off), data->begin() + static_cast<int64_t>(off + n), dst);
  });
}

uint64_t StreamWriter::total_bytes() const {
  uint64_t t = 0;
  for (const Entry& e : entries_) t += e.bytes;
  return t;
}

uint64_t StreamWriter::write(const std::string& dir, uint64_t shard_bytes) const {
  std::vector<std::vector<const Entry*>> shards(1);
  uint64_t in_shard = 0;
  for (const Entry& e : entries_) {
    if (in_shard > 0 && in_shard + e.bytes > shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&e);
    in_shard += e.bytes;
  }
  const size_t ns = shards.size();
  nlohmann::json weight_map = nlohmann::json::object();
  std::vector<char> buf(8 << 20);
  uint64_t written = 0;
  for (size_t s = 0; s < ns; ++s) {
    char fname[64];
    if (ns == 1) std::snprintf(fname, sizeof fname, "model.safetensors");
    else std::snprintf(fname, sizeof fname, "model-%05zu-of-%05zu.safetensors", s + 1, ns);
    nlohmann::json h = nlohmann::json::object();
    h["__metadata__"] = {{"format", "pt"}};
    uint64_t off = 0;
    for (const Entry* e : shards[s]) {
      h[e->name] = {{"dtype", dtype_name(e->dtype)}, {"shape", e->shape}, {"data_offsets", {off, off + e->bytes}}};
      off += e->bytes;
      weight_map[e->name] = fname;
    }
    std::string header = h.dump();
    header.append((8 - header.size() % 8) % 8, ' ');
    const std::string path = dir + "/" + fname;
    std::ofstream f(path, std::ios::binary);
    if (!f) throw Error(path + ": cannot create");
    const uint64_t hl = header.size();
    f.write(reinterpret_cast<const char*>(&hl), 8);
    f.write(header.data(), static_cast<std::streamsize>(hl));
    for (const Entry* e : shards[s])
      for (uint64_t o = 0; o < e->bytes; o += buf.size()) {
        const uint64_t n = std::min<uint64_t>(buf.size(), e->bytes - o);
        e->fill(reinterpret_cast<uint8_t*>(buf.data()), o, n);
        f.write(buf.data(), static_cast<std::streamsize>(n));
      }
    if (!f) throw Error(path + ": write failed (disk full?)");
    written += 8 + hl + off;
  }
  if (ns > 1) {
    nlohmann::json idx = {{"metadata", {{"total_size", total_bytes()}}}, {"weight_map", weight_map}};
    std::ofstream f(dir + "/model.safetensors.index.json");
    f << idx.dump(1) << "\n";
    if (!f) throw Error(dir + "/model.safetensors.index.json: write failed");
  }
  return written;
}

}  // namespace ft::exl3
