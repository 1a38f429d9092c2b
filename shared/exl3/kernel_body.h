#pragma once
// The fused decode + matmul loop, written once against a lane wrapper V and compiled by
// kernel_avx2.cpp, kernel_avx512.cpp and kernel_avx512fp16.cpp with their own ISA flags.
// Internal header.
//
// Per (pair, a) step a lane holds the K words that encode weights t = 32i … 32i+31 of its tile
// (packed.h). Weight t = 32i + u sits at row r(u), column i + 8·h(u) (exl3-format §4.7), so for
// a fixed u every lane wants the same shift to extract its state and the same input row: the
// state extraction is two immediate ops, x is a broadcast, and each lane accumulates one column.
#include <cstdint>
#include <utility>

#include "shared/exl3/codebook.h"

namespace ft::exl3::detail {

// Run-time parameters as template constants, so each ISA file states its kernel once:
// f.template operator()<K>() for K = 1…8, f.template operator()<CB>() per codebook.
template <class F>
void with_k(int K, F&& f) {
  [&]<int... Ks>(std::integer_sequence<int, Ks...>) {
    (void)((K == Ks + 1 && (f.template operator()<Ks + 1>(), true)) || ...);
  }(std::make_integer_sequence<int, 8>{});
}

template <class F>
void with_codebook(Codebook cb, F&& f) {
  switch (cb) {
    case Codebook::Inst3: return f.template operator()<Codebook::Inst3>();
    case Codebook::Mcg: return f.template operator()<Codebook::Mcg>();
    case Codebook::Mul1: return f.template operator()<Codebook::Mul1>();
  }
}

// Rows in blocks of 4, then 2, then 1 (the accumulator counts the fused kernels are built for):
// f.template operator()<NR>(first_row).
template <class F>
void for_row_blocks(int n, F&& f) {
  for (int r = 0; r < n;) {
    const int left = n - r;
    if (left >= 4) f.template operator()<4>(r), r += 4;
    else if (left >= 2) f.template operator()<2>(r), r += 2;
    else f.template operator()<1>(r), r += 1;
  }
}

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

// Dec::run(step, panel) decodes one (pair, a) step into 32 vectors in natural step order.
template <class V, class Dec, int K, int NRMAX>
void panel_matmul_with(const uint32_t* base, int64_t A, const float* xh, int64_t xs, int n, float* z, int64_t zs) {
  alignas(64) typename V::F panel[kPanelSteps * 32];
  for (int64_t a0 = 0; a0 < A; a0 += kPanelSteps) {
    const int count = static_cast<int>(A - a0 < kPanelSteps ? A - a0 : kPanelSteps);
    for (int i = 0; i < count; ++i) Dec::run(base + (a0 + i) * 16 * K, panel + 32 * i);
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

template <class V, int K, Codebook CB, int NRMAX>
void panel_matmul(const uint32_t* base, int64_t A, const float* xh, int64_t xs, int n, float* z, int64_t zs) {
  panel_matmul_with<V, PanelDecoder<V, K, CB>, K, NRMAX>(base, A, xh, xs, n, z, zs);
}

// ---- Paired steps (word-lane decoders) ----
//
// A decoder working on 16-bit lanes handles two steps per vector: steps 2k and 2k+1 take the low
// and the high word of each dword. Both of their 16-bit windows must then lie in one 32-bit
// source word per lane: the lane's bit stream from bit b on, b ∈ [s(2k+1) − 16, s(2k)] (an
// interval, since the two windows are K bits apart). A source at a multiple of 32 is a loaded
// word; any other is one funnel shift of two words (the word before word 0 is the previous
// lane's last one, as in Window). The picks below reuse sources where they can.
template <int K>
constexpr int pair_window(int u) {
  return (u + 1) * K - 16;
}
template <int K>
constexpr bool pair_fits(int c, int k) {
  return c >= pair_window<K>(2 * k + 1) - 16 && c <= pair_window<K>(2 * k) && c >= -32 && c <= 32 * (K - 1);
}
struct PairPicks {
  int b[16];
};
template <int K>
constexpr PairPicks make_pair_picks() {
  PairPicks p{};
  for (int k = 0; k < 16; ++k) {
    int pick = -1000;
    for (int c = 0; c <= 32 * (K - 1) && pick == -1000; c += 32)
      if (pair_fits<K>(c, k)) pick = c;
    for (int j = 0; j < k && pick == -1000; ++j)
      if (pair_fits<K>(p.b[j], k)) pick = p.b[j];
    for (int step : {16, 8, 1})
      for (int c = -32; c <= 32 * (K - 1) && pick == -1000; c += step)
        if (pair_fits<K>(c, k)) pick = c;
    p.b[k] = pick;
  }
  return p;
}
template <int K>
inline constexpr PairPicks kPairPicks = make_pair_picks<K>();

template <int K>
struct PairPlan {
  static constexpr int source(int k) { return kPairPicks<K>.b[k]; }
  // Right shift of step u's window inside its pair's source word.
  static constexpr int shift(int u) { return 16 - (pair_window<K>(u) - source(u / 2)); }
};

template <int K>
constexpr bool pair_plan_ok() {
  for (int u = 0; u < 32; ++u)
    if (PairPlan<K>::shift(u) < 0 || PairPlan<K>::shift(u) > 16) return false;
  return true;
}
static_assert(pair_plan_ok<1>() && pair_plan_ok<2>() && pair_plan_ok<3>() && pair_plan_ok<4>() && pair_plan_ok<5>() &&
              pair_plan_ok<6>() && pair_plan_ok<7>() && pair_plan_ok<8>());

// The lane's 32-bit stream word starting at bit B (−32 ≤ B ≤ 32(K − 1)); P = previous lane's last word.
template <class V, int B>
[[gnu::always_inline]] inline typename V::I pair_source(const typename V::I* W, typename V::I P) {
  if constexpr (B >= 0 && B % 32 == 0) {
    return W[B / 32];
  } else {
    constexpr int j = B < 0 ? -1 : B / 32, r = B - 32 * j;
    return V::template funnel<r>(j < 0 ? P : W[j], W[j + 1]);
  }
}

template <class V, int K, int NR>
struct PairFusedKernel {
  using I = typename V::I;
  using F = typename V::F;
  using Plan = PairPlan<K>;

  // As FusedKernel::run; every accumulator gets its steps in ascending order, the same FMA
  // sequence as FusedKernel's, so the sums have the same bits (V's weights may carry a power-of-two
  // scale that store() takes out).
  template <class Store>
  static void run(const uint32_t* base, int64_t A, const float* xh, int64_t xs, Store&& store) {
    F acc[NR][2];
    for (int r = 0; r < NR; ++r) acc[r][0] = acc[r][1] = V::zero();
    for (int64_t a = 0; a < A; ++a) {
      const uint32_t* step = base + a * 16 * K;
      I W[K];
      for (int w = 0; w < K; ++w) {
        V::prefetch(step + 16 * K * V::kPrefetchSteps + 16 * w);
        W[w] = V::load(step + 16 * w);
      }
      const I P = V::prev(W[K - 1]);
      pairs(W, P, xh + a * 16, xs, acc, std::make_integer_sequence<int, 16>{});
    }
    for (int r = 0; r < NR; ++r) {
      store(r, 0, acc[r][0]);
      store(r, 1, acc[r][1]);
    }
  }

  // Pairs k and k + 2 (steps 4j + {0, 1} and 4j + {4, 5}, or + {2, 3} and + {6, 7}) use the same two
  // input rows and fill different column halves, so they run back to back: each broadcast input
  // is used at once instead of being kept live. Per accumulator the steps stay in ascending order.
  static constexpr int pair_order(int i) { return (i & ~3) | ((i & 1) << 1) | ((i >> 1) & 1); }

  template <int... Pk>
  [[gnu::always_inline]] static inline void pairs(const I* W, I P, const float* x, int64_t xs, F (&acc)[NR][2],
                                                  std::integer_sequence<int, Pk...>) {
    (pair<pair_order(Pk)>(W, P, x, xs, acc, std::make_integer_sequence<int, NR>{}), ...);
  }

  template <int Pk, int... R>
  [[gnu::always_inline]] static inline void pair(const I* W, I P, const float* x, int64_t xs, F (&acc)[NR][2],
                                                 std::integer_sequence<int, R...>) {
    constexpr int u0 = 2 * Pk, u1 = 2 * Pk + 1;
    const I st = V::template window2<Plan::shift(u0), Plan::shift(u1)>(pair_source<V, Plan::source(Pk)>(W, P));
    F w0, w1;
    V::decode_pair(st, w0, w1);
    constexpr int row0 = step_row(u0), row1 = step_row(u1), half = step_half(u0);
    static_assert(step_half(u1) == half);
    ((acc[R][half] = V::fmadd(w0, V::bcast(x[R * xs + row0]), acc[R][half])), ...);
    ((acc[R][half] = V::fmadd(w1, V::bcast(x[R * xs + row1]), acc[R][half])), ...);
  }
};

template <class V, int K>
struct PairPanelDecoder {
  using I = typename V::I;
  using F = typename V::F;
  using Plan = PairPlan<K>;

  static void run(const uint32_t* step, F* panel) {
    I W[K];
    for (int w = 0; w < K; ++w) {
      V::prefetch(step + 16 * K * V::kPrefetchSteps + 16 * w);
      W[w] = V::load(step + 16 * w);
    }
    const I P = V::prev(W[K - 1]);
    decode_all(W, P, panel, std::make_integer_sequence<int, 16>{});
  }

  template <int... Pk>
  [[gnu::always_inline]] static inline void decode_all(const I* W, I P, F* panel, std::integer_sequence<int, Pk...>) {
    (decode<Pk>(W, P, panel), ...);
  }

  template <int Pk>
  [[gnu::always_inline]] static inline void decode(const I* W, I P, F* panel) {
    const I st = V::template window2<Plan::shift(2 * Pk), Plan::shift(2 * Pk + 1)>(
        pair_source<V, Plan::source(Pk)>(W, P));
    F w0, w1;
    V::decode_pair(st, w0, w1);
    V::storef(panel + 2 * Pk, w0);
    V::storef(panel + 2 * Pk + 1, w1);
  }
};

}  // namespace ft::exl3::detail
