#pragma once
// The fused decode + matmul loop, written once against a lane wrapper V and compiled by
// kernel_avx2.cpp and kernel_avx512.cpp with their own ISA flags. Internal header.
//
// Per (pair, a) step a lane holds the K words that encode weights t = 32i … 32i+31 of its tile
// (packed.h). Weight t = 32i + u sits at row r(u), column i + 8·h(u) (exl3-format §4.7), so for
// a fixed u every lane wants the same shift to extract its state and the same input row: the
// state extraction is two immediate ops, x is a broadcast, and each lane accumulates one column.
#include <cstdint>
#include <utility>

#include "shared/exl3/codebook.h"

namespace ft::exl3::detail {

// Where step u's 16-bit state lies in a lane: the window [s, s+16) of the lane's bit stream, in
// one word W[word], or across a word boundary, taken from the middle word
// M[word] = (W[word−1] << 16) | (W[word] >> 16) (W[−1] = the previous lane's last word: the
// tile's stream is circular, spec §4.4).
template <int K, int U>
struct Window {
  static constexpr int s = (U + 1) * K - 16;
  static constexpr bool from_mid = s < 0 || (s % 32) > 16;
  static constexpr int word = s < 0 ? 0 : (from_mid ? s / 32 + 1 : s / 32);
  static constexpr int shift = from_mid ? 32 * word - s : 16 - s % 32;
  static_assert(word < K && shift >= 0 && shift <= 16);
};

constexpr int step_row(int u) { return 2 * (u >> 3) + (u & 1) + 8 * ((u >> 1) & 1); }
constexpr int step_half(int u) { return (u >> 2) & 1; }

template <class V, int K, Codebook CB, int NR>
struct FusedKernel {
  using I = typename V::I;
  using F = typename V::F;

  // Σ_a over the tile rows of step a into acc[r][h] (row r, column half h), then store(r, h, acc).
  // `base` points at the first step's word 0 of this lane group; steps are 16K dwords apart,
  // words 16 dwords apart. Every index below is a compile-time constant after expansion, which
  // keeps the 2·NR accumulators in registers.
  template <class Store>
  static void run(const uint32_t* base, int64_t A, const float* xh, int64_t xs, Store&& store) {
    F acc[NR][2];
    for (int r = 0; r < NR; ++r) acc[r][0] = acc[r][1] = V::zero();
    for (int64_t a = 0; a < A; ++a) {
      const uint32_t* step = base + a * 16 * K;
      I W[K], M[K];
      for (int w = 0; w < K; ++w) {
        V::prefetch(step + 16 * K * V::kPrefetchSteps + 16 * w);
        W[w] = V::load(step + 16 * w);
      }
      M[0] = V::mid(V::prev(W[K - 1]), W[0]);
      for (int w = 1; w < K; ++w) M[w] = V::mid(W[w - 1], W[w]);
      steps(W, M, xh + a * 16, xs, acc, std::make_integer_sequence<int, 32>{});
    }
    for (int r = 0; r < NR; ++r) {
      store(r, 0, acc[r][0]);
      store(r, 1, acc[r][1]);
    }
  }

  // Steps u and u + 4 share their input row (and differ in column half), so they run back to
  // back: each broadcast input is used twice at once instead of being kept live across steps.
  static constexpr int order(int i) { return (i & ~7) | ((i & 1) << 2) | ((i >> 1) & 3); }

  template <int... U>
  [[gnu::always_inline]] static inline void steps(const I* W, const I* M, const float* x, int64_t xs,
                                                  F (&acc)[NR][2], std::integer_sequence<int, U...>) {
    (step<order(U)>(W, M, x, xs, acc, std::make_integer_sequence<int, NR>{}), ...);
  }

  template <int U, int... R>
  [[gnu::always_inline]] static inline void step(const I* W, const I* M, const float* x, int64_t xs,
                                                 F (&acc)[NR][2], std::integer_sequence<int, R...>) {
    using Win = Window<K, U>;
    const I st = V::template window<Win::shift>(Win::from_mid ? M[Win::word] : W[Win::word]);
    const F w = V::template decode<CB>(st);
    constexpr int row = step_row(U), half = step_half(U);
    ((acc[R][half] = V::fmadd(w, V::bcast(x[R * xs + row]), acc[R][half])), ...);
  }
};

}  // namespace ft::exl3::detail
