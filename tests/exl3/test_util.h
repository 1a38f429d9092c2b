#pragma once
// Helpers shared by the EXL3 tests: random trellis bits (any bit pattern is a valid EXL3 tile)
// and 64-byte aligned packed copies.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "shared/exl3/exl3_linear.h"
#include "shared/exl3/packed.h"

namespace ft::exl3::test {

inline std::vector<uint8_t> random_trellis(int64_t in_p, int64_t out_p, int K, std::mt19937& rng) {
  std::vector<uint8_t> v(static_cast<size_t>(in_p * out_p * K / 8));
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

struct PackedBuffer {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<uint32_t, Free> mem;
  PackedProj proj;

  PackedBuffer(const uint8_t* trellis, int64_t in_p, int64_t out_p, int K, Codebook cb) {
    proj.K = K;
    proj.codebook = cb;
    proj.in_p = in_p;
    proj.out_p = out_p;
    const size_t bytes = (static_cast<size_t>(proj.bytes()) + 63) / 64 * 64;
    mem.reset(static_cast<uint32_t*>(std::aligned_alloc(64, bytes)));
    pack_trellis(trellis, in_p, out_p, K, mem.get());
    proj.data = mem.get();
  }
  explicit PackedBuffer(const Exl3Linear& q) : PackedBuffer(q.trellis, q.in_p, q.out_p, q.K, q.codebook) {}
};

}  // namespace ft::exl3::test
