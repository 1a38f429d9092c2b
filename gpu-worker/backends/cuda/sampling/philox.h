#pragma once
// The GPU sampler's random numbers: Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random
// numbers: as easy as 1, 2, 3", SC 2011), a counter-based generator. A sequence's draw number
// `step` under its `seed` gives the same uniform on every device, in every batch and on the host,
// so a seed reproduces a generation whatever else is batched with it, and tests can recompute
// each row's draw exactly.
#include <cstdint>

#if defined(__CUDACC__)
#define FT_HOST_DEVICE __host__ __device__
#else
#define FT_HOST_DEVICE
#endif

namespace ft::cuda {

struct Philox4x32Out {
  uint32_t v[4];
};

// Philox4x32 with 10 rounds: counter c, key k (Random123's philox4x32_R<10>, the same words).
FT_HOST_DEVICE inline Philox4x32Out philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                                  uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return {{c0, c1, c2, c3}};
}

// The 53 random bits of draw `step` of the stream `seed`: key = seed, counter = (step, 0).
// The uniform is r53 · 2^−53 ∈ [0, 1), exactly representable as a double.
FT_HOST_DEVICE inline uint64_t sampling_draw_bits(uint64_t seed, uint64_t step) {
  const Philox4x32Out o = philox4x32_10(static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), 0u, 0u,
                                        static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return ((static_cast<uint64_t>(o.v[1]) << 32) | o.v[0]) >> 11;
}
FT_HOST_DEVICE inline double sampling_uniform(uint64_t seed, uint64_t step) {
  return static_cast<double>(sampling_draw_bits(seed, step)) * 0x1p-53;
}

}  // namespace ft::cuda
