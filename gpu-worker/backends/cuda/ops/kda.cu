// The GPU twins of shared/ops/kda.cpp: the short convolution (prefill of one sequence, decode of
// B rows), the gates and q/k preparation of ReferenceEngine::kda_layer, and the decode step of the
// recurrence. The chunked prefill of the recurrence is in kda_chunk*.cu.
#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/programmatic.cuh"
#include "gpu-worker/backends/cuda/ops/kda.h"
#include "gpu-worker/backends/cuda/ops/kda_common.cuh"

namespace ft::cuda {

using namespace kda_detail;

namespace {

// ---------------------------------------------------------------- short convolution

constexpr int kConvThreads = 256;
constexpr int kConvTokensPerBlock = 64;  // ≥ K−1, so only the first token block reads the window
constexpr int kMaxConvKernel = 8;

// One thread per channel and block of tokens; the last K−1 inputs slide through registers, so
// every input is read once. The sum runs in short_conv_step's order (current tap first, then
// the window oldest first), the same in the decode kernel: a token's bits do not depend on
// which of the two computed it.
template <int K>
__global__ __launch_bounds__(kConvThreads) void conv_prefill_kernel(float* __restrict__ window,
                                                                    const float* __restrict__ z, int64_t ld_z,
                                                                    int64_t n, const float* __restrict__ w, int64_t C,
                                                                    float* __restrict__ out, int64_t ld_out) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  constexpr int W = K - 1;  // window rows
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kConvThreads + threadIdx.x;
  if (c >= C) return;
  const int64_t t_begin = static_cast<int64_t>(blockIdx.y) * kConvTokensPerBlock;
  const int64_t t_end = min(n, t_begin + kConvTokensPerBlock);
  float tap[K];
#pragma unroll
  for (int j = 0; j < K; ++j) tap[j] = w[c * K + j];
  float hist[W > 0 ? W : 1];  // hist[j] = input at t − W + j
#pragma unroll
  for (int j = 0; j < W; ++j) {
    const int64_t t = t_begin - W + j;
    hist[j] = t >= 0 ? z[t * ld_z + c] : window[(W + t) * C + c];
  }
  if constexpr (W > 0) {
    if (blockIdx.y == 0) {
      // This thread alone reads and writes channel c of the window, and hist holds its old rows.
      float next[W];
#pragma unroll
      for (int i = 0; i < W; ++i) {
        const int64_t t = n - W + i;  // the input that window row i holds afterwards
        float v = 0.0f;
        if (t >= 0) {
          v = z[t * ld_z + c];
        } else {
#pragma unroll
          for (int j = 0; j < W; ++j)
            if (j == n + i) v = hist[j];  // old row n + i, selected without indexing registers
        }
        next[i] = v;
      }
#pragma unroll
      for (int i = 0; i < W; ++i) window[i * C + c] = next[i];
    }
  }
  for (int64_t t = t_begin; t < t_end; ++t) {
    const float x = z[t * ld_z + c];
    float s = tap[K - 1] * x;
#pragma unroll
    for (int j = 0; j < W; ++j) s += tap[j] * hist[j];
    out[t * ld_out + c] = silu(s);
#pragma unroll
    for (int j = 0; j + 1 < W; ++j) hist[j] = hist[j + 1];
    if constexpr (W > 0) hist[W - 1] = x;
  }
}

template <int K>
__global__ __launch_bounds__(kConvThreads) void conv_decode_kernel(float* __restrict__ pool,
                                                                   const int32_t* __restrict__ slots, const float* z,
                                                                   int64_t ld_z, const float* __restrict__ w, int64_t C,
                                                                   float* out, int64_t ld_out) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  constexpr int W = K - 1;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kConvThreads + threadIdx.x;
  const int64_t b = blockIdx.y;
  if (c >= C) return;
  const int32_t slot = slots[b];
  if (slot < 0) return;
  float* win = pool + static_cast<int64_t>(slot) * W * C + c;
  const float x = z[b * ld_z + c];
  float hist[W > 0 ? W : 1];
#pragma unroll
  for (int j = 0; j < W; ++j) hist[j] = win[j * C];
  float s = w[c * K + (K - 1)] * x;
#pragma unroll
  for (int j = 0; j < W; ++j) s += w[c * K + j] * hist[j];
#pragma unroll
  for (int j = 0; j + 1 < W; ++j) win[j * C] = hist[j + 1];
  if constexpr (W > 0) win[(W - 1) * C] = x;
  out[b * ld_out + c] = silu(s);
}

template <class F>
void dispatch_conv_kernel(int64_t kernel, F&& f) {
  switch (kernel) {
    case 1:
      f(std::integral_constant<int, 1>{});
      break;
    case 2:
      f(std::integral_constant<int, 2>{});
      break;
    case 3:
      f(std::integral_constant<int, 3>{});
      break;
    case 4:
      f(std::integral_constant<int, 4>{});
      break;
    case 5:
      f(std::integral_constant<int, 5>{});
      break;
    case 6:
      f(std::integral_constant<int, 6>{});
      break;
    case 7:
      f(std::integral_constant<int, 7>{});
      break;
    default:
      f(std::integral_constant<int, 8>{});
      break;
  }
}

void check_conv(int64_t channels, int64_t kernel, const char* fn) {
  require(channels > 0, fn, "channels must be positive");
  require(kernel >= 1 && kernel <= kMaxConvKernel, fn,
          "conv kernel " + std::to_string(kernel) + " not supported (1…8)");
}

// ---------------------------------------------------------------- gates and q/k preparation

constexpr int kPrepareWarps = 8;

// One warp per (row, head): lane l holds channels l, l+32, …; the sums of squares reduce over
// the lanes in a fixed butterfly (every lane ends with the same bits).
template <int DL>
__global__ __launch_bounds__(kPrepareWarps *
                             32) void prepare_kernel(float* __restrict__ qkv, int64_t ld_qkv, const float* r,
                                                     int64_t ld_r, const float* beta_logits, int64_t ld_beta_logits,
                                                     int64_t rows, int64_t H, const float* __restrict__ dt_bias,
                                                     const float* __restrict__ a_log, bool bounded, float lower_bound,
                                                     float* g, int64_t ld_g, float* beta, int64_t ld_beta) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  constexpr int PER = (DL + 31) / 32;
  const int lane = threadIdx.x & 31;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kPrepareWarps + (threadIdx.x >> 5);
  if (item >= rows * H) return;
  const int64_t row = item / H, h = item % H, Q = H * DL;
  float* q = qkv + row * ld_qkv + h * DL;
  float* k = q + Q;
  float qv[PER], kv[PER];
  float ssq = 0.0f, ssk = 0.0f;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < DL ? q[d] : 0.0f;
    kv[i] = d < DL ? k[d] : 0.0f;
    ssq += qv[i] * qv[i];
    ssk += kv[i] * kv[i];
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    ssq += __shfl_xor_sync(0xffffffffu, ssq, off);
    ssk += __shfl_xor_sync(0xffffffffu, ssk, off);
  }
  const float inv_q = 1.0f / sqrtf(ssq + 1e-6f);
  const float inv_k = 1.0f / sqrtf(ssk + 1e-6f);
  const float qscale = 1.0f / sqrtf(static_cast<float>(DL));
  const float alpha = expf(a_log[h]);
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int d = lane + 32 * i;
    if (d >= DL) continue;
    q[d] = (qv[i] * inv_q) * qscale;
    k[d] = kv[i] * inv_k;
    const float x = r[row * ld_r + h * DL + d] + dt_bias[h * DL + d];
    g[row * ld_g + h * DL + d] = bounded ? lower_bound * sigmoid(alpha * x) : -alpha * softplus(x);
  }
  if (lane == 0) beta[row * ld_beta + h] = sigmoid(beta_logits[row * ld_beta_logits + h]);
}

// ---------------------------------------------------------------- decode step

// Block = (column tile of JC value columns, head, row). Thread (tq, tg) owns state rows
// 4tg…4tg+3 and columns 4tq…4tq+3 of the tile: it reads and writes them once (16-byte accesses,
// a warp covers whole 128-byte lines). The predictions p_j and outputs o_j are sums over the DL
// key rows: per thread over its 4 rows in order, then over the thread groups in a fixed
// butterfly inside the warp, then over the warps in order.
template <int DL>
struct DecodeCfg {
  static constexpr int JC = DL < 32 ? DL : 32;  // columns per block
  static constexpr int JQ = JC / 4;             // column quads per block
  static constexpr int NG = DL / 4;             // row groups of 4
  static constexpr int threads = JQ * NG;
  static constexpr int warps = threads >= 32 ? threads / 32 : 1;
  static constexpr int lanes = threads >= 32 ? 32 : threads;
  static constexpr int tiles = DL / JC;
};

template <int DL>
__device__ __forceinline__ void decode_reduce(float (&v)[4], float (*red)[DecodeCfg<DL>::JC], int tq, int tg) {
  using Cfg = DecodeCfg<DL>;
  constexpr unsigned mask = Cfg::lanes == 32 ? 0xffffffffu : ((1u << Cfg::lanes) - 1u);
#pragma unroll
  for (int off = Cfg::JQ; off < Cfg::lanes; off <<= 1)
#pragma unroll
    for (int c = 0; c < 4; ++c) v[c] += __shfl_xor_sync(mask, v[c], off);
  if constexpr (Cfg::warps > 1) {
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) < Cfg::JQ)
#pragma unroll
      for (int c = 0; c < 4; ++c) red[warp][4 * tq + c] = v[c];
    __syncthreads();
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      float s = red[0][4 * tq + c];
#pragma unroll
      for (int w = 1; w < Cfg::warps; ++w) s += red[w][4 * tq + c];
      v[c] = s;
    }
  }
  (void)tg;
}

template <int DL>
__global__ __launch_bounds__(DecodeCfg<DL>::threads) void decode_step_kernel(
    float* __restrict__ pool, const int32_t* __restrict__ slots, const float* __restrict__ qkv, int64_t ld_qkv,
    const float* __restrict__ g, int64_t ld_g, const float* __restrict__ beta, int64_t ld_beta, int64_t H,
    float* __restrict__ o, int64_t ld_o) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained
  using Cfg = DecodeCfg<DL>;
  __shared__ float red_p[Cfg::warps][Cfg::JC];
  __shared__ float red_o[Cfg::warps][Cfg::JC];
  const int64_t b = blockIdx.y;
  const int32_t slot = slots[b];
  if (slot < 0) return;  // uniform over the block, before any barrier
  const int tile = blockIdx.x % Cfg::tiles;
  const int64_t h = blockIdx.x / Cfg::tiles;
  const int tq = threadIdx.x % Cfg::JQ, tg = threadIdx.x / Cfg::JQ;
  const int j = tile * Cfg::JC + 4 * tq, d0 = 4 * tg;
  const int64_t Q = H * DL;
  const float* qrow = qkv + b * ld_qkv + h * DL;
  const float4 kd = *reinterpret_cast<const float4*>(qrow + Q + d0);
  const float4 qd = *reinterpret_cast<const float4*>(qrow + d0);
  const float4 gd = *reinterpret_cast<const float4*>(g + b * ld_g + h * DL + d0);
  const float4 vj = *reinterpret_cast<const float4*>(qrow + 2 * Q + j);
  const float bt = beta[b * ld_beta + h];
  const float kk[4] = {kd.x, kd.y, kd.z, kd.w}, qq[4] = {qd.x, qd.y, qd.z, qd.w};
  const float decay[4] = {expf(gd.x), expf(gd.y), expf(gd.z), expf(gd.w)};
  float* S = pool + ((static_cast<int64_t>(slot) * H + h) * DL) * DL;
  float s[4][4];
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const float4 x = __ldcs(reinterpret_cast<const float4*>(S + (d0 + m) * DL + j));
    s[m][0] = x.x * decay[m];
    s[m][1] = x.y * decay[m];
    s[m][2] = x.z * decay[m];
    s[m][3] = x.w * decay[m];
  }
  float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int m = 0; m < 4; ++m)
#pragma unroll
    for (int c = 0; c < 4; ++c) p[c] += s[m][c] * kk[m];
  decode_reduce<DL>(p, red_p, tq, tg);
  const float v[4] = {vj.x, vj.y, vj.z, vj.w};
  float delta[4];
#pragma unroll
  for (int c = 0; c < 4; ++c) delta[c] = bt * (v[c] - p[c]);
  float out[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int m = 0; m < 4; ++m) {
#pragma unroll
    for (int c = 0; c < 4; ++c) s[m][c] += kk[m] * delta[c];
    __stcs(reinterpret_cast<float4*>(S + (d0 + m) * DL + j), make_float4(s[m][0], s[m][1], s[m][2], s[m][3]));
  }
#pragma unroll
  for (int m = 0; m < 4; ++m)
#pragma unroll
    for (int c = 0; c < 4; ++c) out[c] += s[m][c] * qq[m];
  decode_reduce<DL>(out, red_o, tq, tg);
  if (tg == 0) *reinterpret_cast<float4*>(o + b * ld_o + h * DL + j) = make_float4(out[0], out[1], out[2], out[3]);
}

}  // namespace

void kda_conv_prefill(float* window, const float* z, int64_t ld_z, int64_t n, const float* w, int64_t channels,
                      int64_t kernel, float* out, int64_t ld_out, cudaStream_t stream) {
  check_conv(channels, kernel, "kda_conv_prefill");
  require(n >= 0 && ld_z >= channels && ld_out >= channels, "kda_conv_prefill", "bad n or row strides");
  if (n == 0) return;
  const dim3 grid(static_cast<unsigned>((channels + kConvThreads - 1) / kConvThreads),
                  static_cast<unsigned>((n + kConvTokensPerBlock - 1) / kConvTokensPerBlock));
  require(grid.y <= 65535, "kda_conv_prefill", "too many tokens in one call");
  dispatch_conv_kernel(kernel, [&](auto kc) {
    launch_chained(conv_prefill_kernel<decltype(kc)::value>, grid, kConvThreads, 0, stream, window, z, ld_z, n, w,
                   channels, out, ld_out);
  });
  FT_CUDA_CHECK_LAUNCH();
}

void kda_conv_decode(float* window_pool, const int32_t* slots, const float* z, int64_t ld_z, int64_t rows,
                     const float* w, int64_t channels, int64_t kernel, float* out, int64_t ld_out,
                     cudaStream_t stream) {
  check_conv(channels, kernel, "kda_conv_decode");
  require(rows >= 0 && rows <= 65535 && ld_z >= channels && ld_out >= channels, "kda_conv_decode",
          "bad rows or row strides");
  if (rows == 0) return;
  const dim3 grid(static_cast<unsigned>((channels + kConvThreads - 1) / kConvThreads), static_cast<unsigned>(rows));
  dispatch_conv_kernel(kernel, [&](auto kc) {
    launch_chained(conv_decode_kernel<decltype(kc)::value>, grid, kConvThreads, 0, stream, window_pool, slots, z, ld_z,
                   w, channels, out, ld_out);
  });
  FT_CUDA_CHECK_LAUNCH();
}

void kda_prepare(float* qkv, int64_t ld_qkv, const float* r, int64_t ld_r, const float* beta_logits,
                 int64_t ld_beta_logits, int64_t rows, const float* dt_bias, const float* a_log,
                 std::optional<float> lower_bound, const KdaShape& shape, float* g, int64_t ld_g, float* beta,
                 int64_t ld_beta, cudaStream_t stream) {
  check_shape(shape, "kda_prepare", true);
  const int64_t Q = shape.width();
  require(
      rows >= 0 && ld_qkv >= 3 * Q && ld_r >= Q && ld_g >= Q && ld_beta_logits >= shape.heads && ld_beta >= shape.heads,
      "kda_prepare", "bad rows or row strides");
  if (rows == 0) return;
  const int64_t items = rows * shape.heads;
  const int64_t blocks = (items + kPrepareWarps - 1) / kPrepareWarps;
  require(blocks < (int64_t{1} << 31), "kda_prepare", "too many rows");
  dispatch_token_head_dim(shape.head_dim, [&](auto dl) {
    launch_chained(prepare_kernel<decltype(dl)::value>, static_cast<unsigned>(blocks), kPrepareWarps * 32, 0, stream,
                   qkv, ld_qkv, r, ld_r, beta_logits, ld_beta_logits, rows, shape.heads, dt_bias, a_log,
                   lower_bound.has_value(), lower_bound.value_or(0.0f), g, ld_g, beta, ld_beta);
  });
  FT_CUDA_CHECK_LAUNCH();
}

void kda_decode_step(float* state_pool, const int32_t* slots, const float* qkv, int64_t ld_qkv, const float* g,
                     int64_t ld_g, const float* beta, int64_t ld_beta, int64_t rows, const KdaShape& shape, float* o,
                     int64_t ld_o, cudaStream_t stream) {
  check_shape(shape, "kda_decode_step", true);
  const int64_t Q = shape.width();
  require(rows >= 0 && rows <= 65535 && ld_qkv >= 3 * Q && ld_g >= Q && ld_o >= Q && ld_beta >= shape.heads,
          "kda_decode_step", "bad rows or row strides");
  require(ld_qkv % 4 == 0 && ld_g % 4 == 0 && ld_o % 4 == 0, "kda_decode_step",
          "row strides of qkv, g and o must be multiples of 4 floats");
  require(aligned16(state_pool) && aligned16(qkv) && aligned16(g) && aligned16(o), "kda_decode_step",
          "state_pool, qkv, g and o must be 16-byte aligned");
  if (rows == 0) return;
  dispatch_token_head_dim(shape.head_dim, [&](auto dl) {
    using Cfg = DecodeCfg<decltype(dl)::value>;
    const dim3 grid(static_cast<unsigned>(shape.heads * Cfg::tiles), static_cast<unsigned>(rows));
    launch_chained(decode_step_kernel<decltype(dl)::value>, grid, Cfg::threads, 0, stream, state_pool, slots, qkv,
                   ld_qkv, g, ld_g, beta, ld_beta, shape.heads, o, ld_o);
  });
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
