#pragma once
// Fixture access for the text-layer tests: everything is read from tests/fixtures in the source tree.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace ft::text::testing {

inline std::filesystem::path fixture(const std::string& rel) {
  return std::filesystem::path(FLASHTIER_SOURCE_DIR) / "tests" / "fixtures" / rel;
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace ft::text::testing
