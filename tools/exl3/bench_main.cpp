// exl3-bench: expert GEMV throughput of the cpu-expert-worker kernels, in weight bytes read per
// second, against the memory read bandwidth the same program measures on the same threads.
//
// Each call is a decode step's layer: 8 different experts (GLM-5.3-Flash widths, MUL1, random
// trellis bits) on `batch` rows each, so every weight byte is read once per call; the experts
// cycle through a pool far larger than the last-level cache.
#include <sys/mman.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "shared/core/error.h"
#include "shared/core/half.h"
#include "shared/exl3/expert_block.h"
#include "shared/exl3/expert_forward.h"
#include "shared/exl3/packed.h"
#include "tools/exl3/bench_memory.h"

namespace {

using namespace ft::exl3;

struct Options {
  int threads = 0;  // 0: one per physical core
  std::vector<int> ks = {2, 3, 4};
  std::vector<int> batches = {1, 2, 4, 8};
  std::vector<SimdPath> paths;
  double pool_gb = 4.0, mem_gb = 4.0, seconds = 2.0;
  int experts_per_call = 8;
  int64_t hidden = 4096, inter = 2048;
  bool kernel = false;  // --kernel: matmul_pairs alone on one core, weights in L2
  int windows = 5;
};

std::vector<int> int_list(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');) v.push_back(std::stoi(t));
  return v;
}

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

uint64_t xorshift(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

// A pool of packed experts with random trellis bits. Packing permutes bits, so random packed
// words are exactly random trellises; only header and scales need building.
struct ExpertPool {
  uint8_t* mem = nullptr;
  uint64_t block_bytes = 0, trellis_bytes = 0;
  int count = 0;
  ExpertPool(ThreadPool& pool, const Options& o, int K) {
    ExpertGeometry g;
    g.hidden = o.hidden;
    g.inter = o.inter;
    for (int p = 0; p < 3; ++p) g.K[p] = K, g.codebook[p] = Codebook::Mul1;
    const ExpertBlockHeader h = plan_expert_block(g);
    block_bytes = h.block_bytes;
    for (const ProjHeader& ph : h.proj) trellis_bytes += ph.in_p * ph.out_p * ph.K / 8;
    count = std::max(2 * o.experts_per_call, static_cast<int>(o.pool_gb * 1e9 / block_bytes));
    // 2 MiB aligned and advised for transparent huge pages, as a shared-memory segment on
    // hugetlbfs would be: with 4 KiB pages every 4 KiB of weights costs a page walk.
    const size_t bytes = (block_bytes * count + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    mem = static_cast<uint8_t*>(std::aligned_alloc(2u << 20, bytes));
    if (!mem) throw ft::Error("exl3-bench: cannot allocate the expert pool");
    madvise(mem, bytes, MADV_HUGEPAGE);
    pool.parallel_for(count, [&](int e, int) {
      uint8_t* b = mem + block_bytes * e;
      std::memset(b, 0, block_bytes);
      std::memcpy(b, &h, sizeof h);
      uint64_t s = 0x9E3779B97F4A7C15ull * (e + 1) + K;
      for (const ProjHeader& ph : h.proj) {
        uint64_t* t = reinterpret_cast<uint64_t*>(b + ph.trellis_offset);
        for (uint64_t i = 0; i < ph.in_p * ph.out_p * ph.K / 64; ++i) t[i] = xorshift(s);
        uint16_t* suh = reinterpret_cast<uint16_t*>(b + ph.suh_offset);
        uint16_t* svh = reinterpret_cast<uint16_t*>(b + ph.svh_offset);
        for (uint64_t i = 0; i < ph.in_p; ++i) suh[i] = ft::f32_to_f16((xorshift(s) & 1) ? 1.0f : -1.0f);
        const float sv = 1.0f / (1.2437f * std::sqrt(static_cast<float>(ph.in_p)));
        for (uint64_t i = 0; i < ph.out_p; ++i) svh[i] = ft::f32_to_f16((xorshift(s) & 1) ? sv : -sv);
      }
    });
  }
  ~ExpertPool() { std::free(mem); }
  const uint8_t* block(int e) const { return mem + block_bytes * (e % count); }
};

// --kernel: the decode + matmul rate of one core, without memory traffic: matmul_pairs over one
// MUL1 projection of 2048 x 1024 (at most 1 MiB of trellis, L2-resident) on the calling thread.
int kernel_bench(const Options& o) {
  const int64_t in = 2048, out = 1024;
  std::cout << "# exl3-bench --kernel: " << cpu_name() << ", one thread, MUL1 " << in << " x " << out
            << ", best of " << o.windows << " windows\n";
  std::cout << "| path | K | batch | Gweights/s | G row-weights/s | ns per 16 weights |\n|---|---|---|---|---|---|\n";
  for (int K : o.ks) {
    PackedProj w;
    w.K = K;
    w.codebook = Codebook::Mul1;
    w.in_p = in;
    w.out_p = out;
    std::vector<uint32_t> words(static_cast<size_t>(w.bytes() / 4) + 16);
    uint32_t* data = words.data() + (16 - reinterpret_cast<uintptr_t>(words.data()) % 64 / 4) % 16;
    uint64_t st = 0x243F6A8885A308D3ull + K;
    for (int64_t i = 0; i < w.bytes() / 4; ++i) data[i] = static_cast<uint32_t>(xorshift(st));
    w.data = data;
    for (SimdPath path : o.paths) {
      if (!simd_supported(path)) continue;
      for (int batch : o.batches) {
        std::mt19937 rng(3);
        std::normal_distribution<float> nd;
        std::vector<float> x(static_cast<size_t>(batch * in)), z(static_cast<size_t>(batch * out));
        for (float& v : x) v = nd(rng);
        auto call = [&] { matmul_pairs(path, w, 0, w.pairs(), x.data(), in, batch, z.data(), out); };
        call();
        double best = 0;
        for (int win = 0; win < o.windows; ++win) {
          int calls = 0;
          double el = 0;
          const auto t0 = std::chrono::steady_clock::now();
          while (el < o.seconds / o.windows) {
            call();
            ++calls;
            el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          }
          if (best == 0 || el / calls < best) best = el / calls;
        }
        const double weights = static_cast<double>(in * out);
        char line[256];
        std::snprintf(line, sizeof line, "| %s | %d | %d | %.2f | %.2f | %.2f |\n", simd_name(path), K, batch,
                      weights / best / 1e9, weights * batch / best / 1e9, 16e9 * best / weights);
        std::cout << line << std::flush;
      }
    }
  }
  return 0;
}

int usage() {
  std::cerr << "usage: exl3-bench [--threads N] [--k 2,3,4] [--batch 1,2,4,8] [--path avx2,avx512|scalar]\n"
               "                  [--pool-gb G] [--mem-gb G] [--seconds S] [--experts-per-call E]\n"
               "       exl3-bench --kernel [--k ...] [--batch ...] [--path ...] [--seconds S] [--windows N]\n"
               "  --kernel: matmul_pairs alone on one core with the weights in L2 (decode rate, no memory traffic)\n"
               "  paths: avx512fp16, avx512, avx2, scalar\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw ft::Error("exl3-bench: " + a + " needs a value");
        return argv[++i];
      };
      if (a == "--threads") o.threads = std::stoi(next());
      else if (a == "--k") o.ks = int_list(next());
      else if (a == "--batch") o.batches = int_list(next());
      else if (a == "--pool-gb") o.pool_gb = std::stod(next());
      else if (a == "--mem-gb") o.mem_gb = std::stod(next());
      else if (a == "--seconds") o.seconds = std::stod(next());
      else if (a == "--experts-per-call") o.experts_per_call = std::stoi(next());
      else if (a == "--kernel") o.kernel = true;
      else if (a == "--windows") o.windows = std::max(1, std::stoi(next()));
      else if (a == "--path") {
        std::stringstream ss(next());
        for (std::string t; std::getline(ss, t, ',');)
          o.paths.push_back(t == "avx512fp16" ? SimdPath::Avx512Fp16
                            : t == "avx512"   ? SimdPath::Avx512
                            : t == "avx2"     ? SimdPath::Avx2
                                              : SimdPath::Scalar);
      } else if (a == "-h" || a == "--help") {
        usage();
        return 0;
      } else {
        std::cerr << "exl3-bench: unknown argument " << a << "\n";
        return usage();
      }
    }
    if (o.paths.empty()) {
      for (SimdPath p : {SimdPath::Avx512Fp16, SimdPath::Avx512, SimdPath::Avx2})
        if (simd_supported(p)) o.paths.push_back(p);
    }
    if (o.kernel) return kernel_bench(o);
    if (!simd_supported(SimdPath::Avx2)) throw ft::Error("exl3-bench: needs AVX2");
    const int threads = o.threads > 0 ? o.threads : physical_cores();
    ThreadPool pool(threads);
    std::cout << "# exl3-bench: " << cpu_name() << ", " << threads << " threads (" << physical_cores()
              << " physical cores usable)\n";
    const double bw = read_bandwidth(pool, static_cast<size_t>(o.mem_gb * 1e9), o.seconds);
    std::cout << "# memory read bandwidth, " << threads << " threads: " << bw / 1e9 << " GB/s\n";
    std::cout << "# experts: hidden " << o.hidden << ", moe_intermediate " << o.inter << ", MUL1, "
              << o.experts_per_call << " experts per call, each on `batch` rows\n";
    std::cout << "| path | K | batch | weight GB/s | % of read bw | Gweights/s | us per call |\n";
    std::cout << "|---|---|---|---|---|---|---|\n";
    for (int K : o.ks) {
      ExpertPool experts(pool, o, K);
      for (SimdPath path : o.paths) {
        if (!simd_supported(path)) continue;
        ExpertRunner runner(pool, 10.0f, path);
        for (int batch : o.batches) {
          std::mt19937 rng(5);
          std::normal_distribution<float> nd;
          std::vector<float> x(static_cast<size_t>(batch * o.hidden)), out(x.size());
          for (float& v : x) v = nd(rng);
          std::vector<int32_t> rows(batch);
          std::vector<float> w(batch, 1.0f / o.experts_per_call);
          for (int r = 0; r < batch; ++r) rows[r] = r;
          std::vector<ExpertTask> tasks(o.experts_per_call);
          int next_expert = 0;
          auto call = [&] {
            for (auto& t : tasks) t = {experts.block(next_expert++), rows.data(), w.data(), batch};
            runner.forward(tasks.data(), o.experts_per_call, x.data(), batch, out.data());
          };
          for (int i = 0; i < 2; ++i) call();
          // Best of five windows: on a shared host the best window is the machine's capability,
          // the others measure the neighbours.
          double best = 0;  // seconds per call
          for (int win = 0; win < 5; ++win) {
            int calls = 0;
            double el = 0;
            const auto t0 = std::chrono::steady_clock::now();
            while (el < o.seconds / 5) {
              call();
              ++calls;
              el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            }
            if (best == 0 || el / calls < best) best = el / calls;
          }
          const double bytes = static_cast<double>(experts.trellis_bytes) * o.experts_per_call;
          const double weights = bytes * 8 / K;
          char line[256];
          std::snprintf(line, sizeof line, "| %s | %d | %d | %.1f | %.0f%% | %.1f | %.0f |\n", simd_name(path), K, batch,
                        bytes / best / 1e9, 100.0 * bytes / best / bw, weights / best / 1e9, 1e6 * best);
          std::cout << line << std::flush;
        }
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
