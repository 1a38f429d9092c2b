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

// Many rows (prefill): each step's 32 vectors are decoded once into an L1 panel, then swept by
// NR-row register blocks that carry their partial sums in z between panels. Every accumulator
// gets the same FMA sequence as in FusedKernel (a ascending, steps in `order`), so a row's bits
// do not depend on the batch it came with.
template <class V, int K, Codebook CB>
struct PanelDecoder {
  using I = typename V::I;
  using F = typename V::F;

  // panel[u] = the decoded weights of step u (natural order) of the (pair, a) step at `step`.
  static void run(const uint32_t* step, F* panel) {
    I W[K], M[K];
    for (int w = 0; w < K; ++w) {
      V::prefetch(step + 16 * K * V::kPrefetchSteps + 16 * w);
      W[w] = V::load(step + 16 * w);
    }
    M[0] = V::mid(V::prev(W[K - 1]), W[0]);
    for (int w = 1; w < K; ++w) M[w] = V::mid(W[w - 1], W[w]);
    decode_all(W, M, panel, std::make_integer_sequence<int, 32>{});
  }

  template <int... U>
  [[gnu::always_inline]] static inline void decode_all(const I* W, const I* M, F* panel,
                                                       std::integer_sequence<int, U...>) {
    ((V::storef(panel + U, V::template decode<CB>(V::template window<Window<K, U>::shift>(
                               Window<K, U>::from_mid ? M[Window<K, U>::word] : W[Window<K, U>::word])))),
     ...);
  }
};

template <class V, int NR>
struct PanelSweep {
  using F = typename V::F;
  static constexpr int order(int i) { return (i & ~7) | ((i & 1) << 2) | ((i >> 1) & 3); }

  // Rows [0, NR) of xh/z over panel steps a0 … a0 + count − 1; z holds the partial sums of
  // the earlier steps unless `first`.
  static void run(const F* panel, int64_t a0, int count, const float* xh, int64_t xs, float* z, int64_t zs,
                  bool first) {
    F acc[NR][2];
    for (int r = 0; r < NR; ++r)
      for (int h = 0; h < 2; ++h) acc[r][h] = first ? V::zero() : V::load_acc(z + r * zs, h);
    for (int i = 0; i < count; ++i)
      steps(panel + 32 * i, xh + (a0 + i) * 16, xs, acc, std::make_integer_sequence<int, 32>{});
    for (int r = 0; r < NR; ++r)
      for (int h = 0; h < 2; ++h) V::store_acc(z + r * zs, h, acc[r][h]);
  }

  template <int... U>
  [[gnu::always_inline]] static inline void steps(const F* p, const float* x, int64_t xs, F (&acc)[NR][2],
                                                  std::integer_sequence<int, U...>) {
    (step<order(U)>(p, x, xs, acc, std::make_integer_sequence<int, NR>{}), ...);
  }

  template <int U, int... R>
  [[gnu::always_inline]] static inline void step(const F* p, const float* x, int64_t xs, F (&acc)[NR][2],
                                                 std::integer_sequence<int, R...>) {
    const F w = V::loadf(p + U);
    constexpr int row = step_row(U), half = step_half(U);
    ((acc[R][half] = V::fmadd(w, V::bcast(x[R * xs + row]), acc[R][half])), ...);
  }
};

// Steps decoded per panel: 8 × 32 vectors (16 KiB of zmm, 8 KiB of ymm) stay in L1.
constexpr int kPanelSteps = 8;

template <class V, int K, Codebook CB, int NRMAX>
void panel_matmul(const uint32_t* base, int64_t A, const float* xh, int64_t xs, int n, float* z, int64_t zs) {
  alignas(64) typename V::F panel[kPanelSteps * 32];
  for (int64_t a0 = 0; a0 < A; a0 += kPanelSteps) {
    const int count = static_cast<int>(A - a0 < kPanelSteps ? A - a0 : kPanelSteps);
    for (int i = 0; i < count; ++i) PanelDecoder<V, K, CB>::run(base + (a0 + i) * 16 * K, panel + 32 * i);
    for (int r = 0; r < n;) {
      const int left = n - r;
      const float* x = xh + r * xs;
      float* zr = z + r * zs;
      if (left >= NRMAX) PanelSweep<V, NRMAX>::run(panel, a0, count, x, xs, zr, zs, a0 == 0), r += NRMAX;
      else if (left >= 4) PanelSweep<V, 4>::run(panel, a0, count, x, xs, zr, zs, a0 == 0), r += 4;
      else if (left >= 2) PanelSweep<V, 2>::run(panel, a0, count, x, xs, zr, zs, a0 == 0), r += 2;
      else PanelSweep<V, 1>::run(panel, a0, count, x, xs, zr, zs, a0 == 0), r += 1;
    }
  }
}

}  // namespace ft::exl3::detail
