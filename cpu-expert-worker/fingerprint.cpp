#include "cpu-expert-worker/fingerprint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "shared/core/error.h"

namespace ft::cew {

namespace {

// Two independent 64-bit FNV-1a streams: collisions need both to collide.
struct Hash128 {
  uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
  void add(const void* p, size_t n) {
    const auto* s = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) {
      a = (a ^ s[i]) * 0x100000001b3ull;
      b = (b ^ s[i] ^ 0x5a) * 0x00000100000001b3ull + 0x9e3779b97f4a7c15ull;
    }
  }
  void add(const std::string& s) {
    const uint64_t n = s.size();
    add(&n, 8);
    add(s.data(), s.size());
  }
  void add_u64(uint64_t v) { add(&v, 8); }
  std::string hex() const {
    char s[40];
    std::snprintf(s, sizeof s, "%016llx%016llx", static_cast<unsigned long long>(a), static_cast<unsigned long long>(b));
    return s;
  }
};

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

std::string model_fingerprint(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const fs::path dir(model_dir);
  if (!fs::exists(dir / "config.json")) throw Error(model_dir + ": no config.json (not a model folder)");
  Hash128 h;
  h.add(std::string("flashtier-model-fingerprint-1"));
  h.add(read_file(dir / "config.json"));
  if (fs::exists(dir / "model.safetensors.index.json")) h.add(read_file(dir / "model.safetensors.index.json"));
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") files.push_back(e.path());
  if (files.empty()) throw Error(model_dir + ": no .safetensors file");
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    struct stat st;
    if (stat(p.c_str(), &st) != 0) throw Error(p.string() + ": cannot stat");
    h.add(p.filename().string());
    h.add_u64(static_cast<uint64_t>(st.st_size));
    h.add_u64(static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ull + static_cast<uint64_t>(st.st_mtim.tv_nsec));
    std::ifstream f(p, std::ios::binary);
    uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    if (!f || n > (uint64_t{1} << 32)) throw Error(p.string() + ": not a safetensors file (bad header length)");
    std::string header(n, '\0');
    f.read(header.data(), static_cast<std::streamsize>(n));
    if (!f) throw Error(p.string() + ": truncated safetensors header");
    h.add(header);
  }
  return h.hex();
}

}  // namespace ft::cew
