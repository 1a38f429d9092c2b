#pragma once
// Where tests find their data, and scratch folders that clean up after themselves.
#include <filesystem>
#include <random>
#include <string>

namespace ft::test {

inline std::string fixture(const std::string& rel) {
  return std::string(FLASHTIER_SOURCE_DIR) + "/tests/fixtures/" + rel;
}

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
