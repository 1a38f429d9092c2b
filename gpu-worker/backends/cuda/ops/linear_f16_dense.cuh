#pragma once
// The dense problem of linear_f16 / linear_f16_batched as the linear kernels see it (items,
// rows, weights, epilogue). Shared by the launcher (linear_f16.cu) and the sm_90a wgmma
// instantiation (linear_f16_wgmma.cu), so both kernels read one definition.
#include <cuda_fp16.h>

#include <cstdint>

#include "gpu-worker/backends/cuda/ops/linear_contract.cuh"
#include "gpu-worker/backends/cuda/ops/linear_launch.h"

namespace ft::cuda {

// Rows r of group g: xh + g·x_stride + r·ld_xh against W + g·w_stride, into y + g·y_stride + r·ld_y.
struct DenseProblem {
  static constexpr bool kSwiglu = false;
  lin::KGeom k;
  int64_t out = 0;
  const __half* w = nullptr;
  int64_t w_stride = 0;
  float ws = 1.0f;
  const float* bias = nullptr;
  const __half* xh = nullptr;
  int64_t ld_xh = 0, x_stride = 0;
  const float* rs = nullptr;
  int64_t rs_stride = 0;
  float* y = nullptr;
  int64_t ld_y = 0, y_stride = 0;
  bool accumulate = false;
  bool programmatic = false;  // launched to start early (linear_f16_skinny.cuh, starts_early)
  bool trigger = false;       // lets the kernel after it launch early (lin::linear_trigger)
  int64_t rows = 0;
  int rows_per_item = 0, block_n = 0;
  int64_t n_blocks = 0, m_tiles = 0, items = 0;

  int64_t band = 0;  // output blocks per band (lin::dense_band); 0: one band

  // Items of bm rows × bn outputs for every (group, row tile, output block) of `batch` groups.
  void set_tiles(int bm, int bn, int64_t batch) {
    rows_per_item = bm;
    block_n = bn;
    n_blocks = (out + bn - 1) / bn;
    m_tiles = (rows + bm - 1) / bm;
    items = n_blocks * m_tiles * batch;
    band = lin::dense_band(n_blocks, bn, k.in8);
  }

  __device__ int64_t n_items() const { return items; }
  // Items run in bands of `band` output blocks: within a band output block fastest (neighbouring
  // items share their rows), then row tile, so a band's weights stay in L2 while every row tile
  // passes over them instead of streaming from HBM once per row tile. Only the order of items
  // changes with it, not what an item computes.
  __device__ bool load_item(int64_t idx, lin::LinItem& it) const {
    const int64_t per_group = n_blocks * m_tiles;
    const int64_t g = idx / per_group, r = idx - g * per_group;
    int64_t nb, mt;
    if (band <= 0 || band >= n_blocks || m_tiles == 1) {  // one band (the skinny kernels': one row tile)
      nb = r % n_blocks;
      mt = r / n_blocks;
    } else {
      const int64_t b = r / (band * m_tiles), within = r - b * (band * m_tiles);
      const int64_t nb0 = b * band, width = n_blocks - nb0 < band ? n_blocks - nb0 : band;
      nb = nb0 + within % width;
      mt = within / width;
    }
    it.n0 = nb * block_n;
    it.base = mt * rows_per_item;
    it.g = g;
    const int64_t left = rows - it.base;
    it.rows = left < rows_per_item ? static_cast<int>(left) : rows_per_item;
    it.w0 = w + g * w_stride;
    it.ws0 = ws;
    it.bias0 = bias;
    return true;
  }
  __device__ int32_t row_id(const lin::LinItem& it, int i) const { return static_cast<int32_t>(it.base + i); }
  __device__ const __half* a_row(const lin::LinItem& it, int32_t id) const { return xh + it.g * x_stride + id * ld_xh; }
  __device__ float a_scale(const lin::LinItem& it, int32_t id) const { return rs[it.g * rs_stride + id]; }
  __device__ const __half* w_row(const lin::LinItem& it, int, int64_t n) const {
    return n < out ? it.w0 + n * k.in8 : nullptr;
  }
  __device__ void store(const lin::LinItem& it, int32_t id, int64_t n, float acc, float row_scale) const {
    lin::store_value(y + it.g * y_stride + id * ld_y + n, lin::linear_value(acc, row_scale, it.ws0, it.bias0, n),
                     accumulate);
  }
};

}  // namespace ft::cuda
