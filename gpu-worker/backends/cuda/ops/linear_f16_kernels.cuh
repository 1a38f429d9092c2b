#pragma once
// The configurations of the fp16 linear kernels that the dense and the grouped (MoE) launchers
// instantiate, and the rules that pick between them. Only speed depends on these choices: every
// configuration obeys the reduction contract, so all give the same bits.
#include "gpu-worker/backends/cuda/ops/linear_f16_skinny.cuh"
#include "gpu-worker/backends/cuda/ops/linear_f16_tiled.cuh"

namespace ft::cuda::lin {

// Skinny up to 32 rows: ≤ 8 rows stream 8 outputs per block (one n8 tile per warp), more rows
// pair two tiles per warp so each activation byte copied serves twice the weights. Rings keep
// S − 1 stages per warp in flight: with ≤ 8 rows that is 48 KB per block, so even an SM left
// with a single block at the end of the grid still streams near its share of HBM.
constexpr int kSkinnyMaxRows = 32;
using SkinnyRows8 = SkinnyCfg<1, 1, 4>;    // 64 KB of rings: 3 blocks/SM on sm_90 (72 registers), 1 on sm_86
using SkinnyRows16 = SkinnyCfg<2, 2, 3>;   // 96 KB: 2 blocks/SM on sm_90
using SkinnyRows32 = SkinnyCfg<4, 2, 2>;   // 96 KB
using SkinnySwiglu8 = SkinnyCfg<1, 2, 4>;  // MoE gate+up: 96 KB
// ≤ 8 rows, two n8 tiles per warp (96 KB: 2 blocks/SM on sm_90): for dense calls whose one-tile
// grid would end in a second, mostly idle wave (4096 outputs: 512 blocks on 396 resident places)
// but whose two-tile grid fits one (256 on 264).
using SkinnyRows8Pair = SkinnyCfg<1, 2, 4>;

// Warps along K: the largest power of two ≤ min(chunks, 8) (every warp gets ≤ 2 chunks).
inline int skinny_warps_along_k(int chunks) {
  int wk = 1;
  while (wk * 2 <= chunks && wk * 2 <= kSkinnyWarps) wk *= 2;
  return wk;
}

// Tiled: 128×128 blocks (8 warps of 64×32) when they fill the GPU, 64×64 (4 warps of 32×32)
// otherwise; 4 stages where the device has the shared memory (sm_90), else 3 (sm_86: 99 KB).
using TiledLarge4 = TiledCfg<128, 128, 2, 4, 4>;  // 128 KB
using TiledLarge3 = TiledCfg<128, 128, 2, 4, 3>;  // 96 KB
using TiledMedium = TiledCfg<64, 64, 2, 2, 4>;    // 64 KB

}  // namespace ft::cuda::lin
