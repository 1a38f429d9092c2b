// Portable path: rebuilds each tile's words from the packed form and decodes it with the
// reference decoder. Slow; it exists for hosts without AVX2 and as a third opinion in tests.
#include "shared/core/half.h"
#include "shared/exl3/kernels.h"
#include "shared/exl3/trellis.h"

namespace ft::exl3::detail {

void matmul_pairs_scalar(const PackedProj& w, int64_t p0, int64_t npairs, const float* xh, int64_t xs, int n, float* z,
                         int64_t zs) {
  const int K = w.K;
  uint32_t U[64];  // little-endian words: the same bytes as the stored tile
  uint16_t tile[kTileWeights];
  float wf[kTileWeights];
  for (int r = 0; r < n; ++r)
    for (int64_t j = 0; j < 32 * npairs; ++j) z[r * zs + j] = 0.0f;
  for (int64_t b = 2 * p0; b < 2 * (p0 + npairs); ++b) {
    const int64_t col0 = (b - 2 * p0) * kTile;
    for (int64_t a = 0; a < w.tile_rows(); ++a) {
      for (int j = 0; j < 8 * K; ++j) U[j] = packed_tile_word(w, a, b, j);
      decode_tile_f16(reinterpret_cast<const uint8_t*>(U), K, w.codebook, tile);
      for (int i = 0; i < kTileWeights; ++i) wf[i] = f16_to_f32(tile[i]);
      for (int r = 0; r < n; ++r) {
        const float* x = xh + r * xs + a * kTile;
        float* zr = z + r * zs + col0;
        for (int i = 0; i < kTile; ++i)
          for (int c = 0; c < kTile; ++c) zr[c] += x[i] * wf[i * kTile + c];
      }
    }
  }
}

}  // namespace ft::exl3::detail
