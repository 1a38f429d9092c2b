// sample_tokens: the GPU twin of sample_from (shared/sampling/sampler.cpp). Three launches over
// all rows of a step:
//   1. prep   (blocks over row chunks): penalised logits → candidate order keys, each chunk's
//             best candidate (greedy rows are done after this), the histograms zeroed;
//   2. hist   (blocks over row chunks, sampled rows): each candidate's log-weight bin and integer
//             weight → per-row (count, weight) histogram, and the min-p count and weight;
//   3. select (one block per row): top-k, top-p and the draw, each the first candidate (in
//             candidate order) where a running count or weight reaches a target, found by a
//             radix descent: histogram bin → digits of the candidate key over the row → the run
//             gathered into shared memory → digits again → one warp ranks the last ≤ 32.
// Counts and weights are integers, so every sum is exact in any order: rows never influence each
// other and a row's result is independent of the grid, the thread count and the descent path.
#include <algorithm>
#include <cmath>
#include <string>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/sampling/philox.h"
#include "gpu-worker/backends/cuda/sampling/sampler.h"
#include "gpu-worker/backends/cuda/sampling/sampling_device.cuh"

namespace ft::cuda {
namespace {

using namespace sampling_detail;

constexpr int kChunk = 8192;         // candidates per block in the row-parallel passes
constexpr int kRowThreads = 256;
constexpr int kSelectThreads = 1024;
constexpr int kGatherCap = 2048;     // candidates a run may hold to be gathered into shared memory
constexpr int kDigitBits = 9;
constexpr int kDigits = 1 << kDigitBits;
constexpr int kFinalCap = 32;        // runs this small are ranked by one warp
static_assert(kBins == kSelectThreads, "select scans one first-level bin per thread");
static_assert(kGatherCap == 2 * kSelectThreads, "run compaction holds two candidates per thread");

// SampleTrace::errors bits.
constexpr uint32_t kErrGather = 1;     // a gathered run did not have the histogram's count
constexpr uint32_t kErrDigit = 2;      // no digit reached a target its run reaches
constexpr uint32_t kErrFinal = 4;      // the final warp found no candidate
constexpr uint32_t kErrBins = 8;       // the histogram does not count V candidates
constexpr uint32_t kErrNoWeight = 16;  // the row has no weight (no finite best logit): the best id is returned
constexpr uint32_t kErrNotFound = 32;  // a cut its row's totals guarantee was not found

struct Workspace {
  uint32_t* keys = nullptr;        // [rows][stride] candidate order keys (desc_key of the penalised logit)
  ull* best = nullptr;             // [rows][chunks] best candidate key of each chunk
  uint32_t* bin_count = nullptr;   // [rows][kBins]
  ull* bin_weight = nullptr;       // [rows][kBins]
  ull* minp_weight = nullptr;      // [rows]
  uint32_t* minp_count = nullptr;  // [rows]
  int64_t stride = 0, chunks = 0;
};

size_t align256(size_t b) { return (b + 255) & ~static_cast<size_t>(255); }

// Carves the workspace for `rows` rows; returns its size (base may be null to measure).
size_t carve(char* base, int64_t rows, int64_t vocab, Workspace* ws) {
  Workspace w;
  w.stride = (vocab + 3) / 4 * 4;  // 16-byte aligned rows for vector loads
  w.chunks = (vocab + kChunk - 1) / kChunk;
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* p = base ? base + off : nullptr;
    off += align256(bytes);
    return p;
  };
  const size_t R = static_cast<size_t>(rows);
  w.keys = reinterpret_cast<uint32_t*>(take(R * w.stride * sizeof(uint32_t)));
  w.best = reinterpret_cast<ull*>(take(R * w.chunks * sizeof(ull)));
  w.bin_count = reinterpret_cast<uint32_t*>(take(R * kBins * sizeof(uint32_t)));
  w.bin_weight = reinterpret_cast<ull*>(take(R * kBins * sizeof(ull)));
  w.minp_weight = reinterpret_cast<ull*>(take(R * sizeof(ull)));
  w.minp_count = reinterpret_cast<uint32_t*>(take(R * sizeof(uint32_t)));
  if (ws) *ws = w;
  return off;
}

// 2^F with F = min(44, 62 − ⌈log2 V⌉): V weights of at most 2^F sum below 2^62.
float weight_scale(int64_t vocab) {
  int lg = 0;
  while ((int64_t{1} << lg) < vocab) ++lg;
  return std::ldexp(1.0f, std::min(44, 62 - lg));
}

__device__ __forceinline__ ull row_best(const Workspace& ws, int64_t r, ull* red) {
  ull b = kNoKey;
  for (int64_t c = threadIdx.x; c < ws.chunks; c += blockDim.x) b = umin64(b, ws.best[r * ws.chunks + c]);
  return block_min_u64(b, red);
}

__device__ __forceinline__ Softmax row_softmax(ull best, const SamplingRowParams& p, float w_scale) {
  return Softmax{candidate_value(best), __fdiv_rn(1.0f, p.temperature), w_scale};
}

// ---------------------------------------------------------------------------------------------
// 1. prep

__global__ __launch_bounds__(kRowThreads) void prep_kernel(const float* __restrict__ logits, int64_t ld_logits,
                                                           int64_t vocab, const SamplingRowParams* __restrict__ params,
                                                           SamplingPenaltyState st, int64_t words, Workspace ws) {
  __shared__ ull red[kRowThreads / 32];
  const int64_t r = blockIdx.y, c = blockIdx.x;
  const SamplingRowParams p = params[r];
  const bool pen = has_penalties(p, st.slots);
  const bool greedy = is_greedy(p);
  const float* row = logits + r * ld_logits;
  uint32_t* keys = ws.keys + r * ws.stride;
  const int32_t* counts = pen ? st.counts + p.slot * vocab : nullptr;
  const uint32_t* bits = pen ? st.prompt_bits + p.slot * words : nullptr;
  const int64_t lo = c * kChunk, hi = std::min<int64_t>(vocab, lo + kChunk);
  ull best = kNoKey;
  // Unrolled so several loads are in flight: a step with one row has only ~19 blocks.
#pragma unroll 8
  for (int64_t i = lo + threadIdx.x; i < hi; i += kRowThreads) {
    float y = row[i];
    if (pen) y = penalise(y, counts[i], (bits[i >> 5] >> (i & 31)) & 1u, p);
    const uint32_t k = desc_key(y);
    if (!greedy) keys[i] = k;
    best = umin64(best, candidate_key(k, static_cast<uint32_t>(i)));
  }
  best = block_min_u64(best, red);
  if (threadIdx.x == 0) ws.best[r * ws.chunks + c] = best;
  if (greedy) return;
  for (int64_t b = c * kRowThreads + threadIdx.x; b < kBins; b += static_cast<int64_t>(gridDim.x) * kRowThreads) {
    ws.bin_count[r * kBins + b] = 0;
    ws.bin_weight[r * kBins + b] = 0;
  }
  if (c == 0 && threadIdx.x == 0) {
    ws.minp_weight[r] = 0;
    ws.minp_count[r] = 0;
  }
}

// ---------------------------------------------------------------------------------------------
// 2. hist

__global__ __launch_bounds__(kRowThreads) void hist_kernel(int64_t vocab, const SamplingRowParams* __restrict__ params,
                                                           Workspace ws, float w_scale) {
  __shared__ uint32_t s_count[kBins];
  __shared__ ull s_weight[kBins];
  __shared__ ull red[kRowThreads / 32];
  const int64_t r = blockIdx.y, c = blockIdx.x;
  const SamplingRowParams p = params[r];
  if (is_greedy(p)) return;
  for (int b = threadIdx.x; b < kBins; b += kRowThreads) {
    s_count[b] = 0;
    s_weight[b] = 0;
  }
  const Softmax sm = row_softmax(row_best(ws, r, red), p, w_scale);  // its barriers also publish the zeroing
  const bool minp_on = p.min_p > 0.0f;
  const float t_min = minp_on ? logf(p.min_p) : 0.0f;
  const uint32_t* keys = ws.keys + r * ws.stride;
  const int64_t lo = c * kChunk, hi = std::min<int64_t>(vocab, lo + kChunk);
  // The overflow bin (most of the vocabulary, weight 0) is counted in registers: one shared
  // counter would serialise every warp on it.
  ull over_count = 0, over_weight = 0, minp_count = 0, minp_weight = 0;
#pragma unroll 8
  for (int64_t i = lo + threadIdx.x; i < hi; i += kRowThreads) {
    const float t = log_weight(desc_key_value(keys[i]), sm);
    const int b = bin_of(t);
    const ull w = weight_of(t, sm);
    if (b == kOverflowBin) {
      ++over_count;
      over_weight += w;
    } else {
      atomicAdd(&s_count[b], 1u);
      if (w) atomicAdd(&s_weight[b], w);
    }
    if (minp_on && t >= t_min) {
      ++minp_count;
      minp_weight += w;
    }
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += kRowThreads) {
    if (s_count[b]) atomicAdd(&ws.bin_count[r * kBins + b], s_count[b]);
    if (s_weight[b]) atomicAdd(&ws.bin_weight[r * kBins + b], s_weight[b]);
  }
  over_count = block_sum_u64(over_count, red);
  over_weight = block_sum_u64(over_weight, red);
  minp_count = block_sum_u64(minp_count, red);
  minp_weight = block_sum_u64(minp_weight, red);
  if (threadIdx.x == 0) {
    if (over_count) atomicAdd(&ws.bin_count[r * kBins + kOverflowBin], static_cast<uint32_t>(over_count));
    if (over_weight) atomicAdd(&ws.bin_weight[r * kBins + kOverflowBin], over_weight);
    if (minp_count) atomicAdd(&ws.minp_count[r], static_cast<uint32_t>(minp_count));
    if (minp_weight) atomicAdd(&ws.minp_weight[r], minp_weight);
  }
}

// ---------------------------------------------------------------------------------------------
// 3. select

struct CountWeight {
  uint32_t count;
  ull weight;
};

// Inclusive scan over the block's threads (kSelectThreads), integers: exact.
__device__ __forceinline__ CountWeight block_scan(CountWeight v, CountWeight* warp_total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t c = __shfl_up_sync(0xffffffffu, v.count, o);
    const ull w = __shfl_up_sync(0xffffffffu, v.weight, o);
    if (lane >= o) v.count += c, v.weight += w;
  }
  __syncthreads();
  if (lane == 31) warp_total[warp] = v;
  __syncthreads();
  if (warp == 0) {
    CountWeight t = warp_total[lane];  // kSelectThreads / 32 == 32 warps
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t c = __shfl_up_sync(0xffffffffu, t.count, o);
      const ull w = __shfl_up_sync(0xffffffffu, t.weight, o);
      if (lane >= o) t.count += c, t.weight += w;
    }
    warp_total[lane] = t;
  }
  __syncthreads();
  if (warp > 0) {
    const CountWeight before = warp_total[warp - 1];
    v.count += before.count, v.weight += before.weight;
  }
  return v;
}

enum class Cut : int {
  CountAtLeast,   // top-k: the k-th candidate
  WeightAtLeast,  // top-p: the first whose cumulative weight reaches the target
  WeightAbove,    // the draw: the first whose cumulative weight exceeds u
};
struct Target {
  Cut cut;
  ull value;
  __device__ __forceinline__ bool reached(ull count, ull weight) const {
    return cut == Cut::CountAtLeast ? count >= value : cut == Cut::WeightAtLeast ? weight >= value : weight > value;
  }
};

// The candidate a selection found, with the count and weight of the candidates before it.
struct Found {
  ull key;
  ull count_before;
  ull weight_before;
  ull weight;
  int ok;
};

struct SelectShared {
  uint32_t bin_count_incl[kBins];  // first-level histogram, inclusive prefix
  ull bin_weight_incl[kBins];
  uint32_t dig_count[kDigits];     // one descent level
  ull dig_weight[kDigits];
  ull dig_lo[kDigits];
  ull dig_hi[kDigits];
  ull run[kGatherCap];             // the gathered run (candidate keys, any order)
  CountWeight warp_total[kSelectThreads / 32];
  ull red[kSelectThreads / 32];
  // The current run: candidates with keys in [lo, hi], `n` of them, after base_* others.
  ull lo, hi, base_count, base_weight;
  uint32_t n, gathered;
  int digit;
  Found found;
};

// The selection machinery of one row; every member function is called by the whole block.
struct Selector {
  SelectShared& s;
  const uint32_t* keys;  // the row's candidate keys, 16-byte aligned
  int64_t vocab;
  Softmax sm;
  int passes = 0;       // passes over the row
  uint32_t errors = 0;  // thread 0's copy is reported

  // f(candidate key) for every candidate of the row (vector loads; the tail one by one).
  template <class F>
  __device__ __forceinline__ void for_each_candidate(F&& f) {
    const int64_t n4 = vocab / 4;
    const uint4* k4 = reinterpret_cast<const uint4*>(keys);
#pragma unroll 4
    for (int64_t j = threadIdx.x; j < n4; j += kSelectThreads) {
      const uint4 q = __ldg(k4 + j);
      const uint32_t i = static_cast<uint32_t>(4 * j);
      f(candidate_key(q.x, i));
      f(candidate_key(q.y, i + 1));
      f(candidate_key(q.z, i + 2));
      f(candidate_key(q.w, i + 3));
    }
    for (int64_t i = 4 * n4 + threadIdx.x; i < vocab; i += kSelectThreads)
      f(candidate_key(__ldg(keys + i), static_cast<uint32_t>(i)));
    ++passes;
  }

  __device__ __forceinline__ int bin_of_key(ull ck) const { return bin_of(log_weight(candidate_value(ck), sm)); }

  __device__ __forceinline__ void clear_digits() {
    for (int d = threadIdx.x; d < kDigits; d += kSelectThreads) {
      s.dig_count[d] = 0;
      s.dig_weight[d] = 0;
      s.dig_lo[d] = kNoKey;
      s.dig_hi[d] = 0;
    }
    __syncthreads();
  }
  __device__ __forceinline__ void add_to_digit(ull ck, ull lo, int shift) {
    const int d = static_cast<int>((ck - lo) >> shift);
    atomicAdd(&s.dig_count[d], 1u);
    const ull w = weight_of_key(ck, sm);
    if (w) atomicAdd(&s.dig_weight[d], w);
    atomicMin(&s.dig_lo[d], ck);
    atomicMax(&s.dig_hi[d], ck);
  }
  // Digits of (key − lo) keep the top kDigitBits bits of the run's key span.
  __device__ __forceinline__ static int digit_shift(ull lo, ull hi) {
    const int bits = 64 - __clzll(static_cast<long long>(hi - lo));
    return bits > kDigitBits ? bits - kDigitBits : 0;
  }
  // After a level's histogram: the first digit where `t` is reached becomes the run.
  __device__ void descend_into_digit(const Target& t) {
    __syncthreads();
    const bool mine = threadIdx.x < kDigits;
    const CountWeight v = {mine ? s.dig_count[threadIdx.x] : 0u, mine ? s.dig_weight[threadIdx.x] : 0ull};
    const CountWeight inc = block_scan(v, s.warp_total);
    const ull bc = s.base_count, bw = s.base_weight;
    const bool ok = !mine || t.reached(bc + inc.count, bw + inc.weight);
    const int first = __syncthreads_count(!ok);
    if (first >= kDigits) {
      errors |= kErrDigit;
      if (threadIdx.x == 0) s.digit = -1;
    } else if (threadIdx.x == first) {
      s.digit = first;
      s.base_count = bc + inc.count - v.count;
      s.base_weight = bw + inc.weight - v.weight;
      s.lo = s.dig_lo[first];
      s.hi = s.dig_hi[first];
      s.n = v.count;
    }
    __syncthreads();
  }

  // The first candidate (in candidate order) whose running count/weight reaches `t`.
  __device__ Found select(const Target& t) {
    // First level: the histogram bins.
    const bool ok = t.reached(s.bin_count_incl[threadIdx.x], s.bin_weight_incl[threadIdx.x]);
    const int bin = __syncthreads_count(!ok);
    if (bin >= kBins) return Found{kNoKey, 0, 0, 0, 0};
    if (threadIdx.x == 0) {
      s.base_count = bin ? s.bin_count_incl[bin - 1] : 0u;
      s.base_weight = bin ? s.bin_weight_incl[bin - 1] : 0ull;
      s.n = s.bin_count_incl[bin] - static_cast<uint32_t>(s.base_count);
    }
    __syncthreads();
    bool by_range = false;
    if (s.n > kGatherCap) {
      // Too many to gather: find the bin's key range, then descend by digits over the row.
      ull lo = kNoKey, hi = 0;
      for_each_candidate([&](ull ck) {
        if (bin_of_key(ck) == bin) lo = umin64(lo, ck), hi = umax64(hi, ck);
      });
      lo = block_min_u64(lo, s.red);
      hi = block_max_u64(hi, s.red);
      if (threadIdx.x == 0) s.lo = lo, s.hi = hi;
      __syncthreads();
      while (s.n > kGatherCap) {
        clear_digits();
        const ull rlo = s.lo, rhi = s.hi;
        const int shift = digit_shift(rlo, rhi);
        for_each_candidate([&](ull ck) {
          if (ck >= rlo && ck <= rhi) add_to_digit(ck, rlo, shift);
        });
        descend_into_digit(t);
        if (s.digit < 0) return Found{kNoKey, 0, 0, 0, 0};
      }
      by_range = true;
    }
    // Gather the run into shared memory.
    if (threadIdx.x == 0) s.gathered = 0, s.lo = by_range ? s.lo : kNoKey, s.hi = by_range ? s.hi : 0;
    __syncthreads();
    const ull rlo = s.lo, rhi = s.hi;
    for_each_candidate([&](ull ck) {
      if (by_range ? (ck >= rlo && ck <= rhi) : bin_of_key(ck) == bin) {
        const uint32_t at = atomicAdd(&s.gathered, 1u);
        if (at < kGatherCap) s.run[at] = ck;
        if (!by_range) atomicMin(&s.lo, ck), atomicMax(&s.hi, ck);
      }
    });
    __syncthreads();
    if (s.gathered != s.n) errors |= kErrGather;  // s.n ≤ kGatherCap here by construction
    // Descend inside shared memory until one warp can rank the rest.
    while (s.n > kFinalCap) {
      clear_digits();
      const ull lo = s.lo, hi = s.hi;
      const int shift = digit_shift(lo, hi);
      const uint32_t n = s.n;
      for (uint32_t j = threadIdx.x; j < n; j += kSelectThreads) add_to_digit(s.run[j], lo, shift);
      descend_into_digit(t);
      if (s.digit < 0) return Found{kNoKey, 0, 0, 0, 0};
      const ull a = threadIdx.x < n ? s.run[threadIdx.x] : kNoKey;
      const ull b = threadIdx.x + kSelectThreads < n ? s.run[threadIdx.x + kSelectThreads] : kNoKey;
      const ull nlo = s.lo, nhi = s.hi;
      __syncthreads();
      if (threadIdx.x == 0) s.gathered = 0;
      __syncthreads();
      if (a >= nlo && a <= nhi) s.run[atomicAdd(&s.gathered, 1u)] = a;
      if (b >= nlo && b <= nhi) s.run[atomicAdd(&s.gathered, 1u)] = b;
      __syncthreads();
      if (s.gathered != s.n) errors |= kErrGather;
      __syncthreads();
    }
    // The last ≤ 32: each lane ranks its candidate against the others.
    if (threadIdx.x < 32) {
      const uint32_t n = s.n;
      const int lane = threadIdx.x;
      const ull ck = lane < static_cast<int>(n) ? s.run[lane] : kNoKey;
      const ull w = lane < static_cast<int>(n) ? weight_of_key(ck, sm) : 0ull;
      uint32_t rank = 0;
      ull w_before = 0;
      for (uint32_t j = 0; j < n; ++j) {
        const ull cj = __shfl_sync(0xffffffffu, ck, j);
        const ull wj = __shfl_sync(0xffffffffu, w, j);
        if (cj < ck) ++rank, w_before += wj;
      }
      const bool hit = lane < static_cast<int>(n) && t.reached(s.base_count + rank + 1, s.base_weight + w_before + w);
      ull win = hit ? ck : kNoKey;
      for (int o = 16; o > 0; o >>= 1) win = umin64(win, __shfl_xor_sync(0xffffffffu, win, o));
      if (hit && ck == win) s.found = Found{ck, s.base_count + rank, s.base_weight + w_before, w, 1};
      if (lane == 0 && win == kNoKey) s.found = Found{kNoKey, 0, 0, 0, 0};
    }
    __syncthreads();
    const Found f = s.found;
    if (!f.ok) errors |= kErrFinal;
    __syncthreads();
    return f;
  }
};

__global__ __launch_bounds__(kSelectThreads, 1) void select_kernel(int64_t vocab,
                                                                   const SamplingRowParams* __restrict__ params,
                                                                   SamplingPenaltyState st, Workspace ws,
                                                                   float w_scale, int32_t* tokens, SampleTrace* trace) {
  // Row-uniform values live in shared memory, not in 1024 threads' registers.
  __shared__ SelectShared s;
  __shared__ SamplingRowParams p;
  __shared__ SampleTrace tr;
  const int64_t r = blockIdx.x;
  if (threadIdx.x == 0) {
    p = params[r];
    tr = SampleTrace{};
  }
  const ull best = row_best(ws, r, s.red);  // its barriers publish p
  if (threadIdx.x == 0) tr.token = static_cast<int32_t>(candidate_id(best));
  Selector sel{s, ws.keys + r * ws.stride, vocab, row_softmax(best, p, w_scale)};
  if (!is_greedy(p)) {
    // First-level histogram, inclusive prefix over the bins (one bin per thread).
    const CountWeight v = {ws.bin_count[r * kBins + threadIdx.x], ws.bin_weight[r * kBins + threadIdx.x]};
    const CountWeight inc = block_scan(v, s.warp_total);
    s.bin_count_incl[threadIdx.x] = inc.count;
    s.bin_weight_incl[threadIdx.x] = inc.weight;
    __syncthreads();
    const ull all_weight = s.bin_weight_incl[kBins - 1];
    if (s.bin_count_incl[kBins - 1] != vocab) sel.errors |= kErrBins;
    // top-k
    const ull k = p.top_k > 0 && p.top_k < vocab ? static_cast<ull>(p.top_k) : static_cast<ull>(vocab);
    ull topk_weight = all_weight;
    if (k < static_cast<ull>(vocab)) {
      const Found f = sel.select(Target{Cut::CountAtLeast, k});
      if (!f.ok) sel.errors |= kErrNotFound;
      topk_weight = f.weight_before + f.weight;
    }
    // min-p: the candidates with t ≥ log(min_p) are a prefix of the order; at least one is kept.
    const bool minp_on = p.min_p > 0.0f;
    const ull minp_count = minp_on ? ws.minp_count[r] : static_cast<ull>(vocab);
    const ull minp_weight = minp_on ? ws.minp_weight[r] : all_weight;
    const ull m = max(1ull, min(k, minp_count));
    ull kept = m;
    ull kept_weight = m == k ? topk_weight : minp_count >= 1 ? minp_weight : weight_of_key(best, sel.sm);
    // top-p: the shortest prefix of the kept candidates reaching top_p of the top-k weight.
    if (p.top_p > 0.0f && p.top_p < 1.0f) {
      const ull target = static_cast<ull>(ceil(static_cast<double>(p.top_p) * static_cast<double>(topk_weight)));
      if (target <= kept_weight) {
        const Found f = sel.select(Target{Cut::WeightAtLeast, target});
        if (!f.ok) sel.errors |= kErrNotFound;
        kept = f.count_before + 1;
        kept_weight = f.weight_before + f.weight;
      }
    }
    // The draw: u = ⌊u01 · kept_weight⌋ exactly (53 random bits times the weight, high word).
    const uint64_t bits = sampling_draw_bits(p.seed, p.step);
    const ull draw = __umul64hi(static_cast<ull>(bits) << 11, kept_weight);
    if (threadIdx.x == 0) {
      tr.u01 = static_cast<double>(bits) * 0x1p-53;
      tr.topk_weight = topk_weight;
      tr.kept_weight = kept_weight;
      tr.draw = draw;
      tr.kept = static_cast<int32_t>(kept);
      tr.min_p_count = static_cast<int32_t>(minp_count);
    }
    const Found f = sel.select(Target{Cut::WeightAbove, draw});
    if (f.ok) {
      if (threadIdx.x == 0) tr.token = static_cast<int32_t>(candidate_id(f.key));
    } else {
      sel.errors = kept_weight ? sel.errors | kErrNotFound : (sel.errors & ~kErrFinal) | kErrNoWeight;
    }
    if (threadIdx.x == 0) tr.row_passes = sel.passes;
  }
  if (threadIdx.x == 0) {
    const int32_t token = tr.token;
    tokens[r] = token;
    if (p.slot >= 0 && p.slot < st.slots && token >= 0 && token < vocab) atomicAdd(&st.counts[p.slot * vocab + token], 1);
    if (trace) {
      tr.errors = sel.errors;
      trace[r] = tr;
    }
  }
}

}  // namespace

size_t sampling_workspace_bytes(int64_t max_rows, int64_t vocab) {
  return carve(nullptr, std::max<int64_t>(max_rows, 1), std::max<int64_t>(vocab, 1), nullptr);
}

void sample_tokens(const float* logits, int64_t ld_logits, int64_t rows, int64_t vocab,
                   const SamplingRowParams* params, const SamplingPenaltyState& s, void* workspace,
                   size_t workspace_bytes, int32_t* tokens, SampleTrace* trace, cudaStream_t stream) {
  if (rows <= 0) return;
  if (vocab <= 0 || vocab > (int64_t{1} << 31) - 1 || ld_logits < vocab || rows > 65535)
    throw Error("sample_tokens: bad shape (rows " + std::to_string(rows) + ", vocab " + std::to_string(vocab) +
                ", ld " + std::to_string(ld_logits) + ")");
  if (s.slots > 0 && s.vocab != vocab)
    throw Error("sample_tokens: penalty state for vocab " + std::to_string(s.vocab) + ", logits have " +
                std::to_string(vocab));
  Workspace ws;
  const size_t need = carve(static_cast<char*>(workspace), rows, vocab, &ws);
  if (workspace_bytes < need || !workspace)
    throw Error("sample_tokens: workspace of " + std::to_string(workspace_bytes) + " bytes, " + std::to_string(rows) +
                " rows need " + std::to_string(need) + " (sampling_workspace_bytes)");
  if (reinterpret_cast<uintptr_t>(workspace) % 256)
    throw Error("sample_tokens: workspace must be 256-byte aligned");
  const float w_scale = weight_scale(vocab);
  const dim3 row_grid(static_cast<unsigned>(ws.chunks), static_cast<unsigned>(rows));
  prep_kernel<<<row_grid, kRowThreads, 0, stream>>>(logits, ld_logits, vocab, params, s, sampling_prompt_words(vocab),
                                                    ws);
  FT_CUDA_CHECK_LAUNCH();
  hist_kernel<<<row_grid, kRowThreads, 0, stream>>>(vocab, params, ws, w_scale);
  FT_CUDA_CHECK_LAUNCH();
  select_kernel<<<static_cast<unsigned>(rows), kSelectThreads, 0, stream>>>(vocab, params, s, ws, w_scale, tokens,
                                                                            trace);
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
