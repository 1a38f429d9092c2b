// Memory read bandwidth on all threads of the pool: the yardstick for the expert kernels.
// Compiled with -mavx2; main() only calls it on CPUs that have AVX2.
#include "tools/exl3/bench_memory.h"

#include <immintrin.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

namespace ft::exl3 {

namespace {

// Sums 64-byte lines with four independent vector adds; the result is returned so the loads
// cannot be dropped.
uint64_t read_chunk(const uint8_t* p, size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i < n; i += 128) {
    a = _mm256_add_epi64(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_add_epi64(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    c = _mm256_add_epi64(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    d = _mm256_add_epi64(d, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
  return static_cast<uint64_t>(_mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 1) + _mm256_extract_epi64(s, 2) +
                               _mm256_extract_epi64(s, 3));
}

}  // namespace

double read_bandwidth(ThreadPool& pool, size_t bytes, double seconds) {
  constexpr size_t kChunk = 1 << 20;  // work item: the same dynamic hand-out as the kernels
  bytes = bytes / kChunk * kChunk;
  uint8_t* buf = static_cast<uint8_t*>(std::aligned_alloc(2u << 20, (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20)));
  madvise(buf, bytes, MADV_HUGEPAGE);  // same page size as the expert pool
  const int items = static_cast<int>(bytes / kChunk);
  pool.parallel_for(items, [&](int i, int) { std::memset(buf + i * kChunk, i & 0xFF, kChunk); });
  std::vector<uint64_t> sink(static_cast<size_t>(pool.size()) * 8, 0);  // one cache line per worker
  double best = 0, total = 0;
  for (int rep = 0; rep < 3 || total < seconds; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(items, [&](int i, int w) { sink[w * 8] += read_chunk(buf + i * kChunk, kChunk); });
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total += dt;
    if (rep > 0) best = std::max(best, bytes / dt);  // the first pass warms TLBs and page tables
  }
  std::free(buf);
  uint64_t s = 0;
  for (uint64_t v : sink) s += v;
  return s == 1 ? 0 : best;  // (s is data-dependent; the test keeps it alive)
}

}  // namespace ft::exl3
