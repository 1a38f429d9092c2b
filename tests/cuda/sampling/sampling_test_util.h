#pragma once
// What the GPU sampling tests share: random logits of several shapes (ties, masks, extremes),
// random sampling configs and penalty histories, a host mirror of the GPU penalty state, and one
// call of sample_tokens with its outputs downloaded.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gpu-worker/backends/cuda/sampling/sampler.h"
#include "shared/sampling/sampler.h"
#include "tests/cuda/support/gpu_test.h"

namespace ft::test::sampling {

constexpr int64_t kRealVocab = 154880;

enum class LogitShape : int { Normal, Wide, Ties, Constant, Spiky, Masked, Offset, kCount };
inline const char* shape_name(LogitShape s) {
  static const char* n[] = {"normal", "wide", "ties", "constant", "spiky", "masked", "offset"};
  return n[static_cast<int>(s)];
}

// One row of logits of the given shape.
inline std::vector<float> random_logits(int64_t V, LogitShape shape, std::mt19937_64& g) {
  std::normal_distribution<float> N(0.0f, 1.0f);
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  std::vector<float> x(V);
  const float sd = std::vector<float>{0.5f, 2.0f, 5.0f}[g() % 3];
  switch (shape) {
    case LogitShape::Normal:
      for (float& v : x) v = sd * N(g);
      break;
    case LogitShape::Wide:  // most of the row far below the best: zero weights, the overflow bin
      for (float& v : x) v = 30.0f * N(g);
      break;
    case LogitShape::Ties: {  // a handful of distinct values
      const int levels = 1 + static_cast<int>(g() % 6);
      for (float& v : x) v = static_cast<float>(g() % levels) * 0.5f;
      break;
    }
    case LogitShape::Constant:
      std::fill(x.begin(), x.end(), 1.25f);
      break;
    case LogitShape::Spiky:
      for (float& v : x) v = N(g);
      for (int i = 0; i < 3; ++i) x[g() % V] = 12.0f + static_cast<float>(g() % 3);
      break;
    case LogitShape::Masked:
      for (float& v : x) v = U(g) < 0.7f ? -INFINITY : sd * N(g);
      x[g() % V] = 1.0f;  // at least one finite logit
      break;
    case LogitShape::Offset:  // large logits: y − y_max is where precision is lost
      for (float& v : x) v = 3000.0f + sd * N(g);
      break;
    default:
      break;
  }
  return x;
}

// A random sampling config (greedy sometimes). combo ∈ [0, 8) forces which of top-k (bit 0),
// top-p (bit 1) and min-p (bit 2) are on; −1 leaves each to chance.
inline SamplingConfig random_config(int64_t V, std::mt19937_64& g, int combo = -1) {
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  SamplingConfig c;
  const float pt = U(g);
  c.temperature = pt < 0.12f ? 0.0f : pt < 0.35f ? 0.05f + 0.25f * U(g) : pt < 0.8f ? 0.3f + 1.2f * U(g) : 1.5f + 2.5f * U(g);
  const bool k_on = combo < 0 ? U(g) < 0.55f : (combo & 1) != 0;
  const bool p_on = combo < 0 ? U(g) < 0.6f : (combo & 2) != 0;
  const bool m_on = combo < 0 ? U(g) < 0.45f : (combo & 4) != 0;
  if (k_on) {
    const int64_t ks[] = {1, 2, 3, 10, 50, static_cast<int64_t>(1 + g() % V), V - 1, V, V + 5};
    c.top_k = static_cast<int32_t>(ks[g() % 9]);
  } else {
    c.top_k = (g() % 2) ? 0 : -1;
  }
  if (p_on) {
    const float ps[] = {0.5f, 0.9f, 0.95f, 0.01f + 0.989f * U(g), 0.01f + 0.989f * U(g)};
    c.top_p = ps[g() % 5];
  } else {
    c.top_p = std::vector<float>{1.0f, 0.0f, 1.5f}[g() % 3];
  }
  if (m_on) {
    const float ms[] = {0.001f + 0.6f * U(g), 0.05f, 0.2f * U(g), 1.0f, 1.5f};
    c.min_p = ms[g() % 5];
  }
  if (U(g) < 0.5f) {
    c.repetition_penalty = U(g) < 0.2f ? 1.0f : 0.5f + 1.5f * U(g);
    c.presence_penalty = U(g) < 0.3f ? 0.0f : 2.0f * U(g) - 1.0f;
    c.frequency_penalty = U(g) < 0.3f ? 0.0f : 1.5f * U(g) - 0.5f;
  }
  return c;
}

// Host mirror of the GPU penalty state: per slot the prompt tokens and the generated counts.
struct HostPenalties {
  int64_t slots = 0, vocab = 0;
  std::vector<std::vector<int32_t>> prompt;  // as fed (duplicates, out-of-range ids included)
  std::vector<std::vector<int32_t>> counts;  // [slot][V]

  HostPenalties(int64_t s, int64_t v) : slots(s), vocab(v), prompt(s), counts(s, std::vector<int32_t>(v, 0)) {}

  void randomise(int64_t slot, std::mt19937_64& g) {
    prompt[slot].clear();
    std::fill(counts[slot].begin(), counts[slot].end(), 0);
    const int np = static_cast<int>(g() % 40), ng = static_cast<int>(g() % 30);
    for (int i = 0; i < np; ++i) prompt[slot].push_back(g() % 16 == 0 ? static_cast<int32_t>(vocab + g() % 7)
                                                                      : static_cast<int32_t>(g() % vocab));
    for (int i = 0; i < ng; ++i) counts[slot][g() % vocab] += 1 + static_cast<int32_t>(g() % 4);
    // Some tokens both in the prompt and generated.
    if (!prompt[slot].empty() && prompt[slot][0] < vocab) counts[slot][prompt[slot][0]] += 1;
  }
  TokenHistory history(int64_t slot) const {
    TokenHistory h;
    if (slot < 0) return h;
    h.add_prompt(prompt[slot]);
    for (int64_t t = 0; t < vocab; ++t)
      if (counts[slot][t] > 0) h.generated[static_cast<int32_t>(t)] = counts[slot][t];
    return h;
  }
};

// The GPU penalty state of a HostPenalties (device buffers owned here).
struct DevPenalties {
  DevBuf<int32_t> counts;
  DevBuf<uint32_t> bits;
  cuda::SamplingPenaltyState state;

  explicit DevPenalties(const HostPenalties& h)
      : counts(static_cast<size_t>(std::max<int64_t>(h.slots, 1) * h.vocab)),
        bits(static_cast<size_t>(std::max<int64_t>(h.slots, 1) * cuda::sampling_prompt_words(h.vocab))) {
    state = {counts.get(), bits.get(), h.slots, h.vocab};
    load(h);
  }
  // Resets every slot, marks every prompt (one batched call) and uploads the counts.
  void load(const HostPenalties& h) {
    std::vector<int32_t> tokens, token_slots, flat;
    for (int64_t s = 0; s < h.slots; ++s) {
      cuda::sampling_reset_slot(state, static_cast<int32_t>(s), nullptr);
      tokens.insert(tokens.end(), h.prompt[s].begin(), h.prompt[s].end());
      token_slots.insert(token_slots.end(), h.prompt[s].size(), static_cast<int32_t>(s));
      flat.insert(flat.end(), h.counts[s].begin(), h.counts[s].end());
    }
    if (!tokens.empty()) {
      DevBuf<int32_t> t(tokens), ts(token_slots);
      cuda::sampling_mark_prompt(state, t.get(), ts.get(), static_cast<int64_t>(tokens.size()), nullptr);
      FT_CUDA_CHECK(cudaDeviceSynchronize());
    }
    if (!flat.empty())
      FT_CUDA_CHECK(cudaMemcpy(counts.get(), flat.data(), flat.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    FT_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

struct SampleRun {
  std::vector<int32_t> tokens;
  std::vector<cuda::SampleTrace> trace;
};

// One sample_tokens call on rows × V logits (ld = V + pad), outputs downloaded.
inline SampleRun run_sampler(const std::vector<float>& logits, int64_t rows, int64_t V,
                             const std::vector<cuda::SamplingRowParams>& params, const cuda::SamplingPenaltyState& st,
                             int64_t pad = 0) {
  const int64_t ld = V + pad;
  std::vector<float> padded(static_cast<size_t>(rows * ld), NAN);
  for (int64_t r = 0; r < rows; ++r) std::copy_n(logits.begin() + r * V, V, padded.begin() + r * ld);
  DevBuf<float> d_logits(padded);
  DevBuf<cuda::SamplingRowParams> d_params(params);
  const size_t ws_bytes = cuda::sampling_workspace_bytes(rows, V);
  DevBuf<char> ws(ws_bytes);
  DevBuf<int32_t> tokens(static_cast<size_t>(rows));
  DevBuf<cuda::SampleTrace> trace(static_cast<size_t>(rows));
  cuda::sample_tokens(d_logits.get(), ld, rows, V, d_params.get(), st, ws.get(), ws_bytes, tokens.get(), trace.get(),
                      nullptr);
  FT_CUDA_CHECK(cudaDeviceSynchronize());
  return {tokens.download(), trace.download()};
}

inline std::string describe(const SamplingConfig& c) {
  char b[256];
  std::snprintf(b, sizeof b, "T=%.9g top_k=%d top_p=%.9g min_p=%.9g rep=%.9g pres=%.9g freq=%.9g",
                static_cast<double>(c.temperature), c.top_k, static_cast<double>(c.top_p),
                static_cast<double>(c.min_p), static_cast<double>(c.repetition_penalty),
                static_cast<double>(c.presence_penalty), static_cast<double>(c.frequency_penalty));
  return b;
}

}  // namespace ft::test::sampling
