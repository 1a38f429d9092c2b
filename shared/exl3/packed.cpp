#include "shared/exl3/packed.h"

#include "shared/exl3/trellis.h"

namespace ft::exl3 {

void pack_trellis(const uint8_t* trellis, int64_t in_p, int64_t out_p, int K, uint32_t* dst) {
  const int64_t A = in_p / 16, B = out_p / 16;
  uint32_t U[64];
  for (int64_t b = 0; b < B; ++b) {
    uint32_t* pair = dst + (b / 2) * A * 16 * K;
    const int h = static_cast<int>(b % 2);
    for (int64_t a = 0; a < A; ++a) {
      tile_words(trellis + (a * B + b) * tile_bytes(K), K, U);
      uint32_t* step = pair + a * 16 * K;
      for (int i = 0; i < 8; ++i)
        for (int w = 0; w < K; ++w) step[w * 16 + h * 8 + i] = U[K * i + w];
    }
  }
}

uint32_t packed_tile_word(const PackedProj& p, int64_t a, int64_t b, int j) {
  const int K = p.K;
  return p.pair(b / 2)[a * 16 * K + (j % K) * 16 + (b % 2) * 8 + j / K];
}

}  // namespace ft::exl3
