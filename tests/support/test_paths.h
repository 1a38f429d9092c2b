#pragma once
// Where tests find their data, and scratch folders that clean up after themselves.
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

namespace ft::test {

// The source tree: $FLASHTIER_SOURCE_DIR when set (test binaries carried to another machine, see
// tools/gpu/run-checks.sh), else where this build was configured.
inline std::string source_dir() {
  const char* env = std::getenv("FLASHTIER_SOURCE_DIR");
  return env && *env ? std::string(env) : std::string(FLASHTIER_SOURCE_DIR);
}

inline std::string fixture(const std::string& rel) { return source_dir() + "/tests/fixtures/" + rel; }

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("flashtier-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path() const { return path_.string(); }
  std::string operator/(const std::string& rel) const { return (path_ / rel).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace ft::test
