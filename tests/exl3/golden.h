#pragma once
// Access to tests/fixtures/exl3-decode: 24 cases (K = 1..8 × 3inst/mcg/mul1) decoded by
// exllamav3's own CUDA kernels.
#include <string>
#include <vector>

#include "shared/exl3/exl3_linear.h"
#include "shared/model/safetensors.h"
#include "tests/support/test_paths.h"

namespace ft::exl3::test {

// $FLASHTIER_SOURCE_DIR first, like every other test (binaries carried to the GPU machine).
inline std::string fixture(const std::string& rel) { return ft::test::fixture(rel); }

struct GoldenCase {
  int K;
  Codebook cb;
  std::string prefix() const {
    std::string s = "k";  // built by appending: GCC 12 warns falsely on literal + string
    s += std::to_string(K);
    s += '.';
    s += codebook_name(cb);
    return s;
  }
};

inline std::vector<GoldenCase> golden_cases() {
  std::vector<GoldenCase> v;
  for (int k = 1; k <= 8; ++k)
    for (Codebook cb : {Codebook::Inst3, Codebook::Mcg, Codebook::Mul1}) v.push_back({k, cb});
  return v;
}

inline const TensorStore& golden_store() {
  static const TensorStore st = TensorStore::open(fixture("exl3-decode/exl3-decode-golden.safetensors"));
  return st;
}

// The golden case as an Exl3Linear (the fixture has no markers: the codebook comes from the name).
Exl3Linear golden_linear(const GoldenCase& c);

}  // namespace ft::exl3::test
