// AVX2 + FMA + F16C path, the baseline (EPYC hosts without AVX-512): one ymm covers one tile,
// so a pair is two passes over the same (then cached) step data; up to 4 batch rows keep their
// accumulators in the 16 registers.
#include <immintrin.h>

#include "shared/exl3/kernel_body.h"
#include "shared/exl3/kernels.h"

namespace ft::exl3::detail {

namespace {

struct V256 {
  using I = __m256i;
  using F = __m256;
  static constexpr int kPrefetchSteps = 16;  // ~3 KB ahead at K = 3: covers DRAM latency with every core streaming

  static I load(const uint32_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
  static void prefetch(const uint32_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }
  static I prev(I w) { return _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(7, 0, 1, 2, 3, 4, 5, 6)); }
  static I mid(I a, I b) { return _mm256_or_si256(_mm256_slli_epi32(a, 16), _mm256_srli_epi32(b, 16)); }
  template <int S>
  static I window(I v) {
    if constexpr (S == 0) return _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF));
    else return _mm256_and_si256(_mm256_srli_epi32(v, S), _mm256_set1_epi32(0xFFFF));
  }

  // fp32 → nearest fp16 value, as fp32 (Veltkamp split, see kernel_avx512.cpp).
  static F round_f16(F v) {
    const F c = _mm256_mul_ps(v, _mm256_set1_ps(8193.0f));
    return _mm256_sub_ps(c, _mm256_sub_ps(c, v));
  }

  template <Codebook CB>
  static F decode(I st) {
    if constexpr (CB == Codebook::Mul1) {
      const I p = _mm256_mullo_epi32(st, _mm256_set1_epi32(static_cast<int>(kMul1Mult)));
      const I pairs = _mm256_maddubs_epi16(p, _mm256_set1_epi8(1));     // byte pairs, ≤ 510
      const I s = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));       // byte sum, ≤ 1020
      const I sm = _mm256_add_epi32(s, _mm256_set1_epi32(0x4B000000));  // float 2^23 + s
      const F v = _mm256_fmadd_ps(_mm256_castsi256_ps(sm), _mm256_set1_ps(1774.0f * 0x1p-18f),
                                  _mm256_set1_ps(-(905216.0f + 1774.0f * 0x1p23f) * 0x1p-18f));
      return round_f16(v);
    } else {
      I x = _mm256_mullo_epi32(st, _mm256_set1_epi32(static_cast<int>(CB == Codebook::Mcg ? kMcgMult : kInst3Mult)));
      if constexpr (CB == Codebook::Inst3) x = _mm256_add_epi32(x, _mm256_set1_epi32(static_cast<int>(kInst3Add)));
      return two_halves(x);
    }
  }

  static F two_halves(I x) {
    const I mant = _mm256_set1_epi32(0x07FFE000), expo = _mm256_set1_epi32(0x38000000);
    const I sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
    x = _mm256_xor_si256(_mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0x8FFF8FFFu))),
                         _mm256_set1_epi32(0x3B603B60));
    const I lo = _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(_mm256_slli_epi32(x, 13), mant), expo),
                                 _mm256_and_si256(_mm256_slli_epi32(x, 16), sign));
    const I hi = _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(x, 3), mant), expo),
                                 _mm256_and_si256(x, sign));
    return round_f16(_mm256_add_ps(_mm256_castsi256_ps(lo), _mm256_castsi256_ps(hi)));
  }

  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F bcast(float x) { return _mm256_set1_ps(x); }
  static F zero() { return _mm256_setzero_ps(); }
  static F loadf(const F* p) { return _mm256_load_ps(reinterpret_cast<const float*>(p)); }
  static void storef(F* p, F v) { _mm256_store_ps(reinterpret_cast<float*>(p), v); }
  // Accumulator lanes are columns h·8 … h·8+7 of one tile.
  static F load_acc(const float* z, int h) { return _mm256_loadu_ps(z + h * 8); }
  static void store_acc(float* z, int h, F acc) { _mm256_storeu_ps(z + h * 8, acc); }
};

template <int K, Codebook CB, int NR>
void tile_block(const uint32_t* base, int64_t A, const float* xh, int64_t xs, float* z, int64_t zs) {
  FusedKernel<V256, K, CB, NR>::run(base, A, xh, xs,
                                    [&](int r, int h, __m256 acc) { _mm256_storeu_ps(z + r * zs + h * 8, acc); });
}

template <int K, Codebook CB>
void run_pairs(const PackedProj& w, int64_t p0, int64_t npairs, const float* xh, int64_t xs, int n, float* z,
               int64_t zs) {
  const int64_t A = w.tile_rows();
  for (int64_t p = p0; p < p0 + npairs; ++p)
    for (int t = 0; t < 2; ++t) {
      const uint32_t* base = w.pair(p) + 8 * t;
      float* zt = z + (p - p0) * 32 + 16 * t;
      if (n > 4) {  // more rows than accumulators: decode once per step, sweep the rows
        panel_matmul<V256, K, CB, 4>(base, A, xh, xs, n, zt, zs);
        continue;
      }
      for_row_blocks(n, [&]<int NR>(int r) { tile_block<K, CB, NR>(base, A, xh + r * xs, xs, zt + r * zs, zs); });
    }
}

}  // namespace

void matmul_pairs_avx2(const PackedProj& w, int64_t p0, int64_t npairs, const float* xh, int64_t xs, int n, float* z,
                       int64_t zs) {
  with_k(w.K, [&]<int K>() {
    with_codebook(w.codebook, [&]<Codebook CB>() { run_pairs<K, CB>(w, p0, npairs, xh, xs, n, z, zs); });
  });
}

void codebook_values_avx2(Codebook cb, const uint32_t* states, int64_t n, float* out) {
  alignas(32) uint32_t in[8];
  alignas(32) float res[8];
  for (int64_t i = 0; i < n; i += 8) {
    const int64_t m = n - i < 8 ? n - i : 8;
    for (int j = 0; j < 8; ++j) in[j] = j < m ? states[i + j] & 0xFFFFu : 0;
    const __m256i st = _mm256_load_si256(reinterpret_cast<const __m256i*>(in));
    with_codebook(cb, [&]<Codebook CB>() { _mm256_store_ps(res, V256::decode<CB>(st)); });
    for (int j = 0; j < m; ++j) out[i + j] = res[j];
  }
}

}  // namespace ft::exl3::detail
