// token_logprobs: per-chunk partial log-sum-exp and top-n candidates (one block per row chunk),
// then one block per row combines them in a fixed order.
#include <algorithm>
#include <cmath>
#include <string>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/sampling/logprobs.h"
#include "gpu-worker/backends/cuda/sampling/sampling_device.cuh"

namespace ft::cuda {
namespace {

using namespace sampling_detail;

constexpr int kChunkThreads = 256;
constexpr int kPerThread = 32;
constexpr int kChunk = kChunkThreads * kPerThread;  // 8192 logits per block
constexpr int kFinalThreads = 256;

struct Workspace {
  float* part_max = nullptr;     // [rows][chunks]
  double* part_sum = nullptr;    // [rows][chunks] Σ expf(x − part_max)
  ull* part_top = nullptr;       // [rows][chunks][kMaxTopLogprobs] candidate keys of the raw logits, best first
  int64_t chunks = 0;
};

size_t align256(size_t b) { return (b + 255) & ~static_cast<size_t>(255); }

size_t carve(char* base, int64_t rows, int64_t vocab, Workspace* ws) {
  Workspace w;
  w.chunks = (vocab + kChunk - 1) / kChunk;
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* p = base ? base + off : nullptr;
    off += align256(bytes);
    return p;
  };
  const size_t n = static_cast<size_t>(rows) * w.chunks;
  w.part_max = reinterpret_cast<float*>(take(n * sizeof(float)));
  w.part_sum = reinterpret_cast<double*>(take(n * sizeof(double)));
  w.part_top = reinterpret_cast<ull*>(take(n * kMaxTopLogprobs * sizeof(ull)));
  if (ws) *ws = w;
  return off;
}

__device__ __forceinline__ int top_count(int32_t logprobs, int64_t vocab) {
  const int64_t n = logprobs < kMaxTopLogprobs ? logprobs : kMaxTopLogprobs;
  return static_cast<int>(n < vocab ? n : vocab);
}

// Block-wide sum of doubles over a fixed tree (the same bits whatever the data order).
__device__ __forceinline__ double block_sum_f64(double v, double* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < warps ? red[lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float block_max_f32(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < warps ? red[lane] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__global__ __launch_bounds__(kChunkThreads) void chunk_kernel(const float* __restrict__ logits, int64_t ld_logits,
                                                              int64_t vocab,
                                                              const SamplingRowParams* __restrict__ params,
                                                              Workspace ws) {
  __shared__ double red_d[kChunkThreads / 32];
  __shared__ float red_f[kChunkThreads / 32];
  __shared__ ull red_k[kChunkThreads / 32];
  const int64_t r = blockIdx.y, c = blockIdx.x;
  const int32_t want = params[r].logprobs;
  if (want < 0) return;
  const float* row = logits + r * ld_logits;
  const int64_t base = c * kChunk;
  float x[kPerThread];
  float m = -INFINITY;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int64_t i = base + j * kChunkThreads + threadIdx.x;
    x[j] = i < vocab ? row[i] : -INFINITY;
    m = fmaxf(m, x[j]);
  }
  m = block_max_f32(m, red_f);
  double sum = 0.0;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) sum += static_cast<double>(expf(x[j] - m));  // −inf − m → 0
  sum = block_sum_f64(sum, red_d);
  const int64_t slot = r * ws.chunks + c;
  if (threadIdx.x == 0) {
    ws.part_max[slot] = m;
    ws.part_sum[slot] = sum;
  }
  // Top n of the chunk: n rounds, each the best key after the previous round's (keys are unique).
  const int n = top_count(want, vocab);
  ull last = 0;
  for (int round = 0; round < n; ++round) {
    ull best = kNoKey;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int64_t i = base + j * kChunkThreads + threadIdx.x;
      const ull ck = i < vocab ? candidate_key(desc_key(x[j]), static_cast<uint32_t>(i)) : kNoKey;
      if ((round == 0 || ck > last) && ck < best) best = ck;
    }
    best = block_min_u64(best, red_k);
    if (threadIdx.x == 0) ws.part_top[slot * kMaxTopLogprobs + round] = best;
    last = best;
  }
}

__global__ __launch_bounds__(kFinalThreads) void final_kernel(const float* __restrict__ logits, int64_t ld_logits,
                                                              int64_t vocab,
                                                              const SamplingRowParams* __restrict__ params,
                                                              const int32_t* __restrict__ chosen, Workspace ws,
                                                              float* chosen_logprob, int32_t* top_ids,
                                                              float* top_logprobs) {
  __shared__ double s_lse;
  __shared__ ull red_k[kFinalThreads / 32];
  const int64_t r = blockIdx.x;
  const int32_t want = params[r].logprobs;
  if (want < 0) return;
  if (threadIdx.x == 0) {
    // Chunks combined in ascending order: the same bits for the row whatever else is batched.
    float mx = -INFINITY;
    for (int64_t c = 0; c < ws.chunks; ++c) mx = fmaxf(mx, ws.part_max[r * ws.chunks + c]);
    double sum = 0.0;
    for (int64_t c = 0; c < ws.chunks; ++c) {
      const float mc = ws.part_max[r * ws.chunks + c];
      if (mc > -INFINITY) sum += ws.part_sum[r * ws.chunks + c] * exp(static_cast<double>(mc) - mx);
    }
    const double lse = static_cast<double>(mx) + log(sum);
    s_lse = lse;
    const int32_t t = chosen[r];
    chosen_logprob[r] = t >= 0 && t < vocab ? static_cast<float>(static_cast<double>(logits[r * ld_logits + t]) - lse)
                                            : NAN;
  }
  __syncthreads();
  const double lse = s_lse;
  const int n = top_count(want, vocab);
  const int64_t cands = ws.chunks * n;
  const ull* part = ws.part_top + r * ws.chunks * kMaxTopLogprobs;
  ull last = 0;
  for (int round = 0; round < kMaxTopLogprobs; ++round) {
    if (round < n) {
      ull best = kNoKey;
      for (int64_t q = threadIdx.x; q < cands; q += kFinalThreads) {
        const ull ck = part[(q / n) * kMaxTopLogprobs + q % n];
        if ((round == 0 || ck > last) && ck < best) best = ck;
      }
      best = block_min_u64(best, red_k);
      last = best;
      if (threadIdx.x == 0) {
        top_ids[r * kMaxTopLogprobs + round] = static_cast<int32_t>(candidate_id(best));
        top_logprobs[r * kMaxTopLogprobs + round] =
            static_cast<float>(static_cast<double>(candidate_value(best)) - lse);
      }
    } else if (threadIdx.x == 0) {
      top_ids[r * kMaxTopLogprobs + round] = -1;
      top_logprobs[r * kMaxTopLogprobs + round] = -INFINITY;
    }
  }
}

}  // namespace

size_t logprobs_workspace_bytes(int64_t max_rows, int64_t vocab) {
  return carve(nullptr, std::max<int64_t>(max_rows, 1), std::max<int64_t>(vocab, 1), nullptr);
}

void token_logprobs(const float* logits, int64_t ld_logits, int64_t rows, int64_t vocab,
                    const SamplingRowParams* params, const int32_t* chosen, void* workspace, size_t workspace_bytes,
                    float* chosen_logprob, int32_t* top_ids, float* top_logprobs, cudaStream_t stream) {
  if (rows <= 0) return;
  if (vocab <= 0 || vocab > (int64_t{1} << 31) - 1 || ld_logits < vocab || rows > 65535)
    throw Error("token_logprobs: bad shape (rows " + std::to_string(rows) + ", vocab " + std::to_string(vocab) +
                ", ld " + std::to_string(ld_logits) + ")");
  Workspace ws;
  const size_t need = carve(static_cast<char*>(workspace), rows, vocab, &ws);
  if (workspace_bytes < need || !workspace)
    throw Error("token_logprobs: workspace of " + std::to_string(workspace_bytes) + " bytes, " +
                std::to_string(rows) + " rows need " + std::to_string(need) + " (logprobs_workspace_bytes)");
  chunk_kernel<<<dim3(static_cast<unsigned>(ws.chunks), static_cast<unsigned>(rows)), kChunkThreads, 0, stream>>>(
      logits, ld_logits, vocab, params, ws);
  FT_CUDA_CHECK_LAUNCH();
  final_kernel<<<static_cast<unsigned>(rows), kFinalThreads, 0, stream>>>(logits, ld_logits, vocab, params, chosen, ws,
                                                                          chosen_logprob, top_ids, top_logprobs);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
