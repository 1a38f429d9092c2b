#include "shared/exl3/trellis.h"

#include <cstring>
#include <vector>

#include "shared/core/half.h"

namespace ft::exl3 {

void tile_words(const uint8_t* tile, int K, uint32_t* words) {
  for (int j = 0; j < 8 * K; ++j) {
    uint16_t lo, hi;
    std::memcpy(&lo, tile + 4 * j, 2);
    std::memcpy(&hi, tile + 4 * j + 2, 2);
    words[j] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
}

void tile_states(const uint8_t* tile, int K, uint16_t states[kTileWeights]) {
  uint32_t U[64];
  tile_words(tile, K, U);
  const int64_t L = 256 * K, nwords = 8 * K;
  for (int t = 0; t < kTileWeights; ++t) {
    // The 16-bit window ending at stream bit (t+1)K − 1, wrapping inside the tile (tail-biting).
    const int64_t e = (t + 1) * K + L;
    const int64_t i0 = ((e - 16) / 32) % nwords, i1 = ((e - 1) / 32) % nwords;
    const int64_t shift = 32 * ((e - 1) / 32 + 1) - e;
    const uint64_t both = (static_cast<uint64_t>(U[i0]) << 32) | U[i1];
    states[t] = static_cast<uint16_t>((both >> shift) & 0xFFFFu);
  }
}

void decode_tile_f16(const uint8_t* tile, int K, Codebook cb, uint16_t out[kTileWeights]) {
  uint16_t st[kTileWeights];
  tile_states(tile, K, st);
  for (int t = 0; t < kTileWeights; ++t) out[tile_position(t)] = codebook_value_f16(st[t], cb);
}

void decode_trellis_f16(const uint8_t* trellis, int64_t in_p, int64_t out_p, int K, Codebook cb, uint16_t* wq) {
  const int64_t ta = in_p / kTile, tb = out_p / kTile;
  uint16_t tile[kTileWeights];
  for (int64_t a = 0; a < ta; ++a)
    for (int64_t b = 0; b < tb; ++b) {
      decode_tile_f16(trellis + (a * tb + b) * tile_bytes(K), K, cb, tile);
      for (int r = 0; r < kTile; ++r)
        std::memcpy(wq + (a * kTile + r) * out_p + b * kTile, tile + r * kTile, kTile * sizeof(uint16_t));
    }
}

void decode_trellis_f32(const uint8_t* trellis, int64_t in_p, int64_t out_p, int K, Codebook cb, float* wq) {
  std::vector<uint16_t> h(static_cast<size_t>(in_p * out_p));
  decode_trellis_f16(trellis, in_p, out_p, K, cb, h.data());
  for (size_t i = 0; i < h.size(); ++i) wq[i] = f16_to_f32(h[i]);
}

}  // namespace ft::exl3
