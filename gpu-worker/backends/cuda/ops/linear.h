#pragma once
// Dense linears on the GPU, y = W·x (+ b), W row-major [out, in] (nn.Linear layout) — the twin
// of shared/ops/linear.h.
//
// Operands of the tensor-core kernels are fp16 with fp32 accumulation:
//   * weights are stored once as fp16 of W·2^e with one power-of-two exponent per tensor
//     (w_scale = 2^−e), chosen so the largest |W| lands in [2^14, 2^15): every bf16 weight is
//     then represented exactly (fp16 has 3 more mantissa bits), fp32 weights to 2^−11;
//   * activations are converted per row to fp16 of x·2^e_row with a power-of-two exponent per row
//     (row_scale = 2^−e_row) by to_f16_rows, so no activation overflows fp16 or loses its small
//     values to subnormals; the scales multiply the fp32 result exactly.
//
// Batch invariance (the reduction contract every linear kernel here and in exl3/ obeys): for
// each output (m, n) the sum over the input dimension is
//     acc = P_0 + P_1 + … + P_{C−1}   (fp32, left to right),
// where P_c is a chain of mma.sync.m16n8k16 (f16 × f16 → f32) over the k16 steps of chunk c in
// ascending order starting from zero, chunk c = [c·KC, (c+1)·KC) ∩ [0, in). KC (LinearF16::k_chunk)
// is a function of (in, out) only, never of the number of rows. The decode-shaped (skinny) kernel
// and the prefill (tiled) kernel both follow it, so a row's bits do not depend on how many rows
// share the call, which kernel ran, or where the row sits in the batch.
//
// All functions take device pointers and a stream, allocate nothing and never synchronise, so
// they can be captured into CUDA graphs.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace ft::cuda {

// Device-side description of one dense fp16 linear (pointers into weight memory).
struct LinearF16 {
  int64_t out = 0, in = 0;
  const __half* w = nullptr;    // [out, in_pad] row-major, fp16 of W·2^e, in_pad = in rounded up to 8
                                // (padding columns 0, as prepare_linear_f16 makes it); 16-byte aligned
  float w_scale = 1.0f;         // 2^−e
  const float* bias = nullptr;  // [out] fp32, or null
  int k_chunk = 0;              // KC, from linear_k_chunk(in, out)
};

// KC for a weight of this shape: a multiple of 16 (every K-split a kernel may use is a union of
// whole chunks). Depends on (in, out) only. This implementation: max(256, ⌈in/16⌉ rounded up to
// 64), i.e. a multiple of 64 with at most 16 chunks — what linear_f16 requires of k_chunk.
int linear_k_chunk(int64_t in, int64_t out);

// Host-side preparation of a weight for upload: fp16 bits of W·2^e (row-major [out, in_pad],
// in_pad = in rounded up to a multiple of 8, zero-padded) and w_scale = 2^−e.
struct HostLinearF16 {
  int64_t out = 0, in = 0, in_pad = 0;
  std::vector<uint16_t> w;
  float w_scale = 1.0f;
};
HostLinearF16 prepare_linear_f16(const float* W, int64_t out, int64_t in);

// xh[r][c] = fp16(x[r][c]·2^e_r), row_scale[r] = 2^−e_r, with e_r chosen per row so max|x[r]|
// lands in [2^14, 2^15) (rows of zeros: e_r = 0). Columns c ∈ [cols, ld_xh) are written as 0
// (ld_xh ≥ cols, multiple of 8). x rows are ld_x floats apart.
void to_f16_rows(const float* x, int64_t ld_x, int64_t rows, int64_t cols, __half* xh, int64_t ld_xh,
                 float* row_scale, cudaStream_t stream);

enum class LinearStore : int {
  Overwrite,   // y = W·x (+ b)
  Accumulate,  // y += W·x (+ b)
};

// y[r][n] = row_scale[r]·w_scale·acc(r, n) (+ bias[n]) for r < rows, n < L.out, y rows ld_y
// floats apart; xh rows ld_xh halves apart (ld_xh ≥ L.in rounded up to 8). Picks the skinny
// kernel for few rows and the tiled one for many; both obey the reduction contract above.
// Stored value: (acc·row_scale)·w_scale, then + bias[n], then (Accumulate) y + that, in fp32 in
// this order. xh 16-byte aligned, ld_xh % 8 == 0; y may be unaligned (parts side by side).
void linear_f16(const LinearF16& L, const __half* xh, int64_t ld_xh, const float* row_scale, int64_t rows, float* y,
                int64_t ld_y, cudaStream_t stream, LinearStore store = LinearStore::Overwrite);

// The same linear applied independently to `batch` groups (MLA's per-head absorption): group g
// uses weight L.w + g·w_stride (halves), inputs xh + g·x_stride (halves), row_scale +
// g·scale_stride, outputs y + g·y_stride (floats). L.bias must be null.
void linear_f16_batched(const LinearF16& L, int64_t batch, int64_t w_stride, const __half* xh, int64_t ld_xh,
                        int64_t x_stride, const float* row_scale, int64_t scale_stride, int64_t rows, float* y,
                        int64_t ld_y, int64_t y_stride, cudaStream_t stream);

// fp32 linears where the spec keeps fp32 (router logits, mHC mixing logits, indexer head
// weights) and every dense linear of an engine in fp32 precision (EngineConfig::precision):
// y[r][n] = Σ_k x[r][k]·W[n][k] with fp32 FMAs, W fp32 or bf16 (bf16 is widened exactly). The
// summation order for (r, n) is a fixed function of `in` only (batch invariant). Stored value:
// sum (+ bias[n]), then (Accumulate) y + that, in fp32 in this order.
struct LinearF32 {
  int64_t out = 0, in = 0;
  const void* w = nullptr;      // [out, in] row-major
  bool w_bf16 = false;          // else fp32
  const float* bias = nullptr;  // [out] fp32, or null
};
// workspace (optional, device floats): with at least linear_f32_workspace_floats(L, rows) of
// them, calls whose output tiles cannot fill the GPU spread K over it too (same bits; the
// workspace is free again when the call's kernels are done, in stream order).
void linear_f32(const LinearF32& L, const float* x, int64_t ld_x, int64_t rows, float* y, int64_t ld_y,
                cudaStream_t stream, LinearStore store = LinearStore::Overwrite, float* workspace = nullptr,
                size_t workspace_floats = 0);
size_t linear_f32_workspace_floats(const LinearF32& L, int64_t rows);  // 0: no call of this shape splits

}  // namespace ft::cuda
