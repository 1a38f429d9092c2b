#include "gpu-worker/backends/cuda/ops/embed.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/programmatic.cuh"
#include "gpu-worker/backends/cuda/ops/misc_device.cuh"
#include "shared/core/error.h"

namespace ft::cuda {
namespace {

using misc::load_chunk;
using misc::store_chunk;

constexpr int kEmbedThreads = 256;
constexpr int kFinalThreads = 256;

// fp16 / bf16 bits widened to fp32 (exact for both).
template <EmbedDtype DT>
__device__ __forceinline__ float widen16(unsigned int bits) {
  if constexpr (DT == EmbedDtype::F16) return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  else return __uint_as_float(bits << 16);
}

// Chunk c (values 4c … 4c+3, the ones < D) of an embedding row as fp32.
template <EmbedDtype DT, bool VEC>
__device__ __forceinline__ void load_embed_chunk(const void* row, int64_t D, int64_t c, float (&v)[4]) {
  if constexpr (DT == EmbedDtype::F32) {
    load_chunk<VEC>(static_cast<const float*>(row), D, c, v);
  } else {
    const unsigned short* r = static_cast<const unsigned short*>(row) + 4 * c;
    if constexpr (VEC) {
      const uint2 u = *reinterpret_cast<const uint2*>(r);  // 4 values in one 8-byte load, value 0 in the low half
      v[0] = widen16<DT>(u.x & 0xffffu), v[1] = widen16<DT>(u.x >> 16);
      v[2] = widen16<DT>(u.y & 0xffffu), v[3] = widen16<DT>(u.y >> 16);
    } else {
      const int64_t cnt = D - 4 * c < 4 ? D - 4 * c : 4;
#pragma unroll
      for (int k = 0; k < 4; ++k) v[k] = k < cnt ? widen16<DT>(r[k]) : 0.0f;
    }
  }
}

template <EmbedDtype DT, bool VEC>
__global__ void __launch_bounds__(kEmbedThreads)
    embed_kernel(const void* table, int64_t vocab, int64_t D, const int32_t* tokens, int64_t hc, float* X) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  const int64_t t = blockIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kEmbedThreads + threadIdx.x;
  if (4 * c >= D) return;
  const int32_t tok = tokens[t];
  float v[4];
  if (tok >= 0 && tok < vocab) {
    constexpr size_t elem = DT == EmbedDtype::F32 ? 4 : 2;
    load_embed_chunk<DT, VEC>(static_cast<const char*>(table) + static_cast<size_t>(tok) * D * elem, D, c, v);
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = __int_as_float(0x7fffffff);
  }
  for (int64_t i = 0; i < hc; ++i) store_chunk<VEC>(X + (t * hc + i) * D, D, c, v);
}

// The reference's stream mean of one value: Σ_k X[k][d] from 0 in stream order, ÷ HC.
template <bool VEC>
__device__ __forceinline__ int stream_mean_chunk(const float* Xt, int64_t hc, int64_t D, int64_t c, float (&h)[4]) {
  float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int cnt = 4;
#pragma unroll 1
  for (int64_t k = 0; k < hc; ++k) {
    float v[4];
    cnt = load_chunk<VEC>(Xt + k * D, D, c, v);
#pragma unroll
    for (int j = 0; j < 4; ++j) s[j] = __fadd_rn(s[j], v[j]);
  }
  const float fh = static_cast<float>(hc);
#pragma unroll
  for (int j = 0; j < 4; ++j) h[j] = __fdiv_rn(s[j], fh);
  return cnt;
}

// One block per output row: the mean is formed twice (for the sum of squares, then for the
// output) rather than kept, so any width fits; both passes give the same bits.
template <bool VEC>
__global__ void __launch_bounds__(kFinalThreads)
    final_norm_kernel(const float* X, int64_t n_tokens, int64_t hc, int64_t D, const int32_t* rows, const float* w,
                      float eps, float* h, int64_t ld_h) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  constexpr int WARPS = kFinalThreads / 32;
  __shared__ double partial[WARPS];
  const int64_t r = blockIdx.x;
  const int64_t src = rows ? rows[r] : r;
  float* hr = h + r * ld_h;
  const int64_t nc = (D + 3) / 4;
  if (src < 0 || src >= n_tokens) {  // uniform per block: no thread waits on a barrier alone
    float nan[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) nan[k] = __int_as_float(0x7fffffff);
    for (int64_t c = threadIdx.x; c < nc; c += kFinalThreads) store_chunk<VEC>(hr, D, c, nan);
    return;
  }
  const float* Xt = X + src * hc * D;

  misc::SumSq acc;
#pragma unroll 2
  for (int64_t c = threadIdx.x; c < nc; c += kFinalThreads) {
    float m[4];
    const int cnt = stream_mean_chunk<VEC>(Xt, hc, D, c, m);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (k < cnt) acc.add(m[k]);
  }
  const double ss = misc::group_sum<WARPS>(acc.value(), partial, [] { __syncthreads(); });
  const float rr = misc::inv_rms(ss, D, eps);

#pragma unroll 2
  for (int64_t c = threadIdx.x; c < nc; c += kFinalThreads) {
    float m[4], wv[4];
    stream_mean_chunk<VEC>(Xt, hc, D, c, m);
    load_chunk<VEC>(w, D, c, wv);
#pragma unroll
    for (int k = 0; k < 4; ++k) m[k] = __fmul_rn(__fmul_rn(m[k], rr), wv[k]);
    store_chunk<VEC>(hr, D, c, m);
  }
}

template <EmbedDtype DT>
void launch_embed(const EmbedTable& e, const int32_t* tokens, int64_t n, int64_t hc, float* X, bool vec,
                  cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(n),
                  static_cast<unsigned>((e.dim + 4 * kEmbedThreads - 1) / (4 * kEmbedThreads)));
  if (vec)
    launch_chained(embed_kernel<DT, true>, grid, kEmbedThreads, 0, stream, e.data, e.vocab, e.dim, tokens, hc, X);
  else
    launch_chained(embed_kernel<DT, false>, grid, kEmbedThreads, 0, stream, e.data, e.vocab, e.dim, tokens, hc, X);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void embed_tokens(const EmbedTable& table, const int32_t* tokens, int64_t n_tokens, int64_t hc, float* X,
                  cudaStream_t stream) {
  if (table.dim <= 0 || table.vocab <= 0 || hc <= 0 || !table.data)
    throw Error("embed_tokens: bad table or stream count (vocab " + std::to_string(table.vocab) + ", dim " +
                std::to_string(table.dim) + ", hc " + std::to_string(hc) + ")");
  if (n_tokens <= 0) return;
  const uintptr_t align = table.dtype == EmbedDtype::F32 ? 16 : 8;  // one chunk of 4 values per load
  const bool vec = table.dim % 4 == 0 && misc::aligned16(X) && (reinterpret_cast<uintptr_t>(table.data) % align) == 0;
  switch (table.dtype) {
    case EmbedDtype::F32:
      return launch_embed<EmbedDtype::F32>(table, tokens, n_tokens, hc, X, vec, stream);
    case EmbedDtype::F16:
      return launch_embed<EmbedDtype::F16>(table, tokens, n_tokens, hc, X, vec, stream);
    case EmbedDtype::BF16:
      return launch_embed<EmbedDtype::BF16>(table, tokens, n_tokens, hc, X, vec, stream);
  }
  throw Error("embed_tokens: unknown dtype");
}

void final_norm(const float* X, int64_t n_tokens, int64_t hc, int64_t dim, const int32_t* rows, int64_t n_rows,
                const float* w, float eps, float* h, int64_t ld_h, cudaStream_t stream) {
  if (hc <= 0 || dim <= 0 || ld_h < dim || !w || (!rows && n_rows > n_tokens))
    throw Error("final_norm: bad shape (hc " + std::to_string(hc) + ", dim " + std::to_string(dim) + ", ld_h " +
                std::to_string(ld_h) + ", rows " + std::to_string(n_rows) + " of " + std::to_string(n_tokens) + ")");
  if (n_rows <= 0) return;
  const bool vec = dim % 4 == 0 && ld_h % 4 == 0 && misc::aligned16(X) && misc::aligned16(h) && misc::aligned16(w);
  if (vec)
    launch_chained(final_norm_kernel<true>, static_cast<unsigned>(n_rows), kFinalThreads, 0, stream, X, n_tokens, hc,
                   dim, rows, w, eps, h, ld_h);
  else
    launch_chained(final_norm_kernel<false>, static_cast<unsigned>(n_rows), kFinalThreads, 0, stream, X, n_tokens, hc,
                   dim, rows, w, eps, h, ld_h);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
