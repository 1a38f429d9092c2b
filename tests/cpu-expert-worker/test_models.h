#pragma once
// Model folders for the expert-tier tests: the fixtures, and variants written on the fly.
#include <filesystem>
#include <string>

#include "shared/model/safetensors.h"
#include "shared/model/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace ft::test {

inline std::string tiny_chat() { return fixture("glm5-tiny-chat/model"); }
inline std::string tiny_exl3() { return fixture("glm5-tiny-exl3/model"); }

// A copy of `src` (config.json and safetensors) in `dst`, so a test may touch or rewrite it.
inline void copy_model(const std::string& src, const std::string& dst) {
  namespace fs = std::filesystem;
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(src))
    if (e.path().filename() == "config.json" || e.path().extension() == ".safetensors")
      fs::copy_file(e.path(), fs::path(dst) / e.path().filename(), fs::copy_options::overwrite_existing);
}

}  // namespace ft::test
