#pragma once
// Reference decode of EXL3 trellis tiles (spec exl3-format §4): bitstream → 16-bit states →
// codebook values, placed in tensor-core order. Straight from the spec, no speed tricks: this is
// what the SIMD kernels are checked against.
#include <cstdint>

#include "shared/exl3/codebook.h"

namespace ft::exl3 {

constexpr int kTile = 16;                 // tiles are 16×16 weights
constexpr int kTileWeights = 256;
inline int64_t tile_bytes(int K) { return 32 * K; }

// Position (r*16 + c) inside the tile of the weight with sequence index t (spec §4.7).
constexpr int tile_position(int t) {
  const int l = t / 8, j = t % 8;
  const int r = 2 * (l % 4) + (j & 1) + 8 * ((j >> 1) & 1);
  const int c = l / 4 + 8 * (j >> 2);
  return r * 16 + c;
}

// The tile's little-endian uint32 words U[0 … 8K) (spec §4.3). `tile` may be unaligned.
void tile_words(const uint8_t* tile, int K, uint32_t* words);

// The 256 states S_t in sequence order (spec §4.4, random-access form §4.6).
void tile_states(const uint8_t* tile, int K, uint16_t states[kTileWeights]);

// fp16 bits of the tile's weights, row-major: out[r*16 + c] = W[16a + r][16b + c].
void decode_tile_f16(const uint8_t* tile, int K, Codebook cb, uint16_t out[kTileWeights]);

// Whole trellis [in_p/16][out_p/16][16K] → Wq [in_p][out_p] (input rows, output columns).
void decode_trellis_f16(const uint8_t* trellis, int64_t in_p, int64_t out_p, int K, Codebook cb, uint16_t* wq);
void decode_trellis_f32(const uint8_t* trellis, int64_t in_p, int64_t out_p, int K, Codebook cb, float* wq);

}  // namespace ft::exl3
