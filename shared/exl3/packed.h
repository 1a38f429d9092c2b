#pragma once
// The packed form of one EXL3 projection that the CPU kernels stream through.
//
// Same bits as the EXL3 trellis, rearranged so one pass reads them sequentially:
//   * tiles go by pairs of output tile-columns (32 output columns), each pair contiguous;
//   * inside a pair, input tile-rows a = 0 … in_p/16 − 1 follow each other;
//   * inside one (pair, a) step (64·K bytes), the 2·8K uint32 words of the two tiles are
//     transposed word-major: dword [w·16 + h·8 + i] = U_{tile(a, 2·pair + h)}[K·i + w]
//     (U = the tile's little-endian uint32 words, exl3-format §4.3; w < K, h < 2, i < 8).
// Lane i of a word vector then holds the K words that encode weights t = 32i … 32i+31 of its
// tile, so all lanes extract their states with the same shift (see kernel_body.h).
// A GPU reading this form finds word U[j] of tile (a, b) at dword
//   (b/2)·(in_p/16)·16K + a·16K + (j mod K)·16 + (b mod 2)·8 + j/K.
#include <cstdint>

#include "shared/exl3/codebook.h"

namespace ft::exl3 {

struct PackedProj {
  int K = 0;
  Codebook codebook = Codebook::Inst3;
  int64_t in_p = 0, out_p = 0;
  const uint32_t* data = nullptr;  // 64-byte aligned

  int64_t tile_rows() const { return in_p / 16; }                   // A
  int64_t pairs() const { return out_p / 32; }
  int64_t step_dwords() const { return 16 * K; }                   // one (pair, a) step
  int64_t pair_dwords() const { return tile_rows() * step_dwords(); }
  int64_t bytes() const { return in_p * out_p * K / 8; }
  const uint32_t* pair(int64_t p) const { return data + p * pair_dwords(); }
};

// Packs an EXL3 trellis ([in_p/16][out_p/16][16K] int16 as stored, maybe unaligned) into `dst`
// (PackedProj::bytes() bytes, 64-byte aligned).
void pack_trellis(const uint8_t* trellis, int64_t in_p, int64_t out_p, int K, uint32_t* dst);

// Word j of tile (a, b) read back from the packed form (for tests and documentation).
uint32_t packed_tile_word(const PackedProj& p, int64_t a, int64_t b, int j);

}  // namespace ft::exl3
