// flashtier-bench-exl3: the EXL3 GPU kernels against bounds measured in the same run.
//
//   * bounds: HBM read and PCIe read of mapped host memory with the kernels' own load pattern
//     (exl3_read_gbs), SM clock under load, and the instruction-issue bound
//     SMs × 4 schedulers × 32 lanes × clock / (SASS instructions per weight), the instructions
//     counted in the main loop of the kernel itself (cuobjdump -sass on this binary when
//     cuobjdump is on PATH or in /usr/local/cuda/bin; the design count otherwise, marked "est.");
//   * GEMV (exl3_linear, input transform included) at the routed expert's and the attention
//     shapes, K = 2, 3, 4 (MUL1) × batch 1, 2, 4, 8: Gweights/s, trellis GB/s, % of each bound;
//     weights cycle through copies filling a 1 GB pool (≫ L2) so every call reads HBM;
//   * zero-copy MoE: exl3_moe_experts with every expert in mapped host memory (and, for
//     comparison, in VRAM): trellis GB/s against the measured PCIe read bandwidth; with
//     --moe-memory, for each host backing (heap, THP, 4 KB, hugetlb, /dev/shm file: host_backing.h)
//     also the PCIe probe with its pieces scattered in runs of 2 KB … 2 MB (page locality);
//   * grouped MoE at prefill sizes (512…8192 tokens, top-8 of 128 experts, VRAM and zero-copy):
//     every expert in 32-row batches against the default (crowded experts in the prefill form);
//   * prefill: exl3_linear at 512…8192 rows, TFLOP/s against cuBLASLt bf16 on the dense shape.
// Tables in markdown at the end. --quick: fewer shapes and repetitions (≈ 1 minute);
// --only gemv,moe,moeprefill,prefill: those sections alone; --gemv-shape S, --gemv-k 3: the GEMV
// shapes whose name contains S, those K (what tools/gpu/profile-gemm.sh's gemv entry profiles).
// Memory: ≤ 7 GB on the GPU (the MoE prefill section's 8192-token workspace), ≤ 1.5 GB pinned
// host memory.
#include <cuda_runtime.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/device.h"
#include "gpu-worker/backends/cuda/exl3/exl3_linear.h"
#include "gpu-worker/backends/cuda/exl3/moe.h"
#include "gpu-worker/backends/cuda/exl3/read_probe.h"
#include "shared/core/half.h"
#include "shared/exl3/expert_block.h"
#include "tools/bench-cuda/bench_util.h"
#include "tools/bench-cuda/graph_timer.h"
#include "tools/bench-cuda/host_backing.h"
#ifdef FT_HAVE_CUBLAS_REF
#include "tools/bench-cuda/cublas_ref.h"
#endif

namespace {

using namespace ft::cuda;
using ft::exl3::Codebook;
using ft::cuda::bench::split_list;

struct Opts {
  bool quick = false;
  std::vector<std::string> sections = {"gemv", "moe", "moeprefill", "prefill"};
  std::vector<std::string> moe_memory = {"malloc"};
  std::string gemv_shape;  // --gemv-shape S: only the GEMV shapes whose name contains S
  std::vector<int> gemv_k = {2, 3, 4};
  bool wants(const std::string& s) const { return std::find(sections.begin(), sections.end(), s) != sections.end(); }
};


template <class T>
T* dev_alloc(size_t n) {
  void* p = nullptr;
  FT_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  return static_cast<T*>(p);
}

// ---------------------------------------------------------------------------------------------
// SASS instructions per weight of the skinny kernel's main loop (one stage: 8 k16 steps × 2
// tiles × 8 weights = 128 weights per lane).
struct SassCount {
  double ipw = 0;
  bool measured = false;
};

std::string find_cuobjdump() {
  for (const char* c : {"cuobjdump", "/usr/local/cuda/bin/cuobjdump"}) {
    const std::string cmd = std::string("command -v ") + c + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return c;
  }
  return "";
}

// The file the EXL3 kernels were loaded from: the shared library of their area when this
// build links one (its path from /proc/self/maps), else this executable.
std::string kernel_file() {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t at = line.find('/');
    if (at != std::string::npos && line.find("libft_cuda_exl3", at) != std::string::npos) return line.substr(at);
  }
  return "/proc/self/exe";
}

// Main-loop instruction count of each function whose mangled name contains `key`: the largest
// backward-branch region that holds no other region of ≥ 64 instructions.
std::map<std::string, int> loop_counts(const std::string& tool, int arch) {
  std::map<std::string, int> out;
  if (tool.empty()) return out;
  const std::string cmd = tool + " -sass -arch sm_" + std::to_string(arch) + " '" + kernel_file() + "' 2>/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return out;
  std::string fn;
  std::vector<std::pair<long, long>> loops;  // (target, branch address)
  long last_addr = 0;
  auto flush = [&]() {
    if (fn.empty()) return;
    int best = 0;
    for (auto [t, a] : loops) {
      const int n = static_cast<int>((a - t) / 16 + 1);
      bool inner = true;
      for (auto [t2, a2] : loops)
        if ((t2 != t || a2 != a) && t2 >= t && a2 <= a && (a2 - t2) / 16 + 1 >= 64) inner = false;
      if (inner) best = std::max(best, n);
    }
    out[fn] = best;
  };
  // Branch targets appear either as addresses ("BRA 0x1a0") or as labels ("BRA `(.L_x_3)" with
  // ".L_x_3:" lines before the labelled instruction), depending on the tool version.
  std::map<std::string, long> labels;
  std::string pending_label;
  char line[4096];
  while (std::fgets(line, sizeof line, f)) {
    const char* fpos = std::strstr(line, "Function : ");
    if (fpos) {
      flush();
      fn = fpos + 11;
      while (!fn.empty() && (fn.back() == '\n' || fn.back() == ' ' || fn.back() == '\r')) fn.pop_back();
      loops.clear();
      labels.clear();
      continue;
    }
    const char* lab = std::strstr(line, ".L_x_");
    const char* c = std::strstr(line, "/*");
    if (lab && !c) {
      std::string l(lab);
      const size_t colon = l.find(':');
      if (colon != std::string::npos) pending_label = l.substr(0, colon);
      continue;
    }
    if (!c) continue;
    char* end = nullptr;
    const long addr = std::strtol(c + 2, &end, 16);
    if (!end || *end != '*') continue;
    if (!pending_label.empty()) labels[pending_label] = addr, pending_label.clear();
    last_addr = addr;
    const char* bra = std::strstr(line, "BRA ");
    if (!bra) continue;
    long target = -1;
    if (const char* tl = std::strstr(bra, ".L_x_")) {
      std::string l(tl);
      const size_t close = l.find(')');
      const auto it = labels.find(l.substr(0, close));
      if (it != labels.end()) target = it->second;
    } else if (const char* hex = std::strstr(bra, "0x")) {
      target = std::strtol(hex, nullptr, 16);
    }
    if (target >= 0 && target < addr) loops.push_back({target, addr});
  }
  (void)last_addr;
  flush();
  pclose(f);
  return out;
}

// Design-time estimate (device.cuh: MUL1, 2 ALU ops per state, IMAD + IDP per weight, one pack
// and one HFMA2 per pair, 2 LDS and one HMMA per tile-lane, loop overhead ~6 %).
double design_ipw(int K) { return K == 2 ? 5.2 : K == 3 ? 5.6 : 5.0; }

SassCount sass_ipw(const std::map<std::string, int>& counts, int K, bool split) {
  // _ZN2ft4cuda7exl3dev16exl3_gemv_kernelILi<K>ELi2ELi1ELb<split>EEEvNS1_10LinearArgsE
  const std::string key = "exl3_gemv_kernelILi" + std::to_string(K) + "ELi2ELi1ELb" + (split ? "1" : "0");
  for (const auto& [name, n] : counts)
    if (name.find(key) != std::string::npos && n > 0) return {n / 128.0, true};
  return {design_ipw(K), false};
}

// ---------------------------------------------------------------------------------------------
struct Bounds {
  double hbm = 0, pcie = 0, clock_mhz = 0;
  int sms = 0, arch = 0;
  std::map<std::string, int> sass;
};

struct Timer {
  cudaEvent_t a, b;
  Timer() {
    FT_CUDA_CHECK(cudaEventCreate(&a));
    FT_CUDA_CHECK(cudaEventCreate(&b));
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  template <class F>
  double once(F&& f) {
    FT_CUDA_CHECK(cudaEventRecord(a));
    f();
    FT_CUDA_CHECK(cudaEventRecord(b));
    FT_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    FT_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    return 1e3 * ms;
  }
  template <class F>
  double us_per_call(int calls, F&& f) {  // best of 3 windows
    for (int i = 0; i < 3; ++i) f(i);
    double best = 1e30;
    for (int w = 0; w < 3; ++w) {
      FT_CUDA_CHECK(cudaEventRecord(a));
      for (int i = 0; i < calls; ++i) f(i);
      FT_CUDA_CHECK(cudaEventRecord(b));
      FT_CUDA_CHECK(cudaEventSynchronize(b));
      float ms = 0;
      FT_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      best = std::min(best, 1e3 * ms / calls);
    }
    return best;
  }
};

std::vector<float> randn(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// ---------------------------------------------------------------------------------------------
struct GemvRow {
  std::string shape;
  int K, batch;
  double us, gws, gbs, pct_hbm, issue_gws, pct_issue;
  double graph_us = 0, pdl_us = 0, pdl_graph_us = 0;  // replayed from a CUDA graph; programmatic launch
  bool sass_measured;
};

std::vector<GemvRow> bench_gemv(const Opts& o, const Bounds& B) {
  struct Shape {
    const char* name;
    int64_t in, out;
  };
  std::vector<Shape> shapes = {{"expert gate/up 4096→2048", 4096, 2048}, {"expert down 2048→4096", 2048, 4096},
                               {"MLA q_a 4096→1536", 4096, 1536},        {"MLA q_b 1536→16384", 1536, 16384},
                               {"MLA kv_a 4096→512", 4096, 512},         {"MLA kv_b 512→32768", 512, 32768},
                               {"MLA o 16384→4096", 16384, 4096},        {"KDA q/k/v 4096→8192", 4096, 8192},
                               {"KDA o 8192→4096", 8192, 4096}};
  if (o.quick) shapes = {shapes[0], shapes[1], shapes[6]};
  if (!o.gemv_shape.empty())
    std::erase_if(shapes, [&](const Shape& s) { return std::string(s.name).find(o.gemv_shape) == std::string::npos; });
  const size_t pool_bytes = size_t{1} << 30;
  auto* pool = dev_alloc<unsigned char>(pool_bytes);
  FT_CUDA_CHECK(cudaMemset(pool, 0x5A, pool_bytes));
  const int64_t maxw = 32768;
  std::vector<uint16_t> scales(2 * maxw);
  for (int64_t i = 0; i < maxw; ++i) scales[i] = ft::f32_to_f16(i % 2 ? 0.01f : -0.01f), scales[maxw + i] = 0x3C00;
  auto* sc = dev_alloc<__half>(scales.size());
  FT_CUDA_CHECK(cudaMemcpy(sc, scales.data(), scales.size() * 2, cudaMemcpyHostToDevice));
  const std::vector<float> xh = randn(8 * 16384, 1);
  auto* x = dev_alloc<float>(xh.size());
  FT_CUDA_CHECK(cudaMemcpy(x, xh.data(), xh.size() * 4, cudaMemcpyHostToDevice));
  auto* y = dev_alloc<float>(8 * 32768);
  Timer tm;
  cudaStream_t cs;  // blocking: ordered with the legacy stream the buffers were filled on
  FT_CUDA_CHECK(cudaStreamCreate(&cs));
  // µs per call with `calls` calls captured in one CUDA graph (as decode steps run).
  auto graph_us = [&](int calls, const std::function<void(int, cudaStream_t)>& call) {
    return 1e3 * bench::graph_ms_per_call(call, calls, 3, cs);
  };
  const bool pdl_here = B.arch >= 90;
  // The plain columns without programmatic launch, the programmatic ones with it at every row
  // count (the engine's default, Auto, is the programmatic column up to four rows, the plain above).
  const Exl3Programmatic was = exl3_programmatic_launch();
  exl3_set_programmatic_launch(Exl3Programmatic::Off);
  std::vector<GemvRow> rows;
  for (const Shape& s : shapes)
    for (int K : o.gemv_k) {
      const int64_t bytes = s.in * s.out * K / 8;
      const int64_t stride = (bytes + 255) / 256 * 256;
      const int copies = static_cast<int>(std::max<int64_t>(2, std::min<int64_t>(4096, pool_bytes / stride)));
      std::vector<Exl3LinearDev> L;
      for (int c = 0; c < copies; ++c)
        L.push_back(exl3_linear_view(K, Codebook::Mul1, s.in, s.out, reinterpret_cast<const uint32_t*>(pool + c * stride),
                                     sc, sc + maxw));
      const size_t wsb = exl3_linear_workspace_bytes(L[0], 8);
      auto* ws = dev_alloc<unsigned char>(wsb);
      exl3_linear_workspace_init(ws, wsb, nullptr);
      for (int batch : {1, 2, 4, 8}) {
        const int calls = o.quick ? 60 : 200;
        const double us = tm.us_per_call(calls, [&](int i) {
          exl3_linear(L[i % copies], x, s.in, batch, y, s.out, ws, nullptr);
        });
        auto on = [&](int i, cudaStream_t st) { exl3_linear(L[i % copies], x, s.in, batch, y, s.out, ws, st); };
        const double g_us = graph_us(calls, on);
        double p_us = 0, pg_us = 0;
        if (pdl_here) {
          exl3_set_programmatic_launch(Exl3Programmatic::On);
          p_us = tm.us_per_call(calls, [&](int i) { exl3_linear(L[i % copies], x, s.in, batch, y, s.out, ws, nullptr); });
          pg_us = graph_us(calls, on);
          exl3_set_programmatic_launch(Exl3Programmatic::Off);
        }
        const SassCount sc_ipw = sass_ipw(B.sass, K, L[0].in_p / L[0].k_chunk > 1 && L[0].out_p / 128 < 256);
        GemvRow r;
        r.shape = s.name, r.K = K, r.batch = batch, r.us = us;
        r.gws = static_cast<double>(s.in * s.out) / (us * 1e3);
        r.gbs = static_cast<double>(bytes) / (us * 1e3);
        r.pct_hbm = 100 * r.gbs / B.hbm;
        r.issue_gws = B.sms * 4.0 * 32.0 * B.clock_mhz * 1e-3 / sc_ipw.ipw;
        r.pct_issue = 100 * r.gws / r.issue_gws;
        r.sass_measured = sc_ipw.measured;
        r.graph_us = g_us, r.pdl_us = p_us, r.pdl_graph_us = pg_us;
        rows.push_back(r);
        std::printf("gemv %-26s K=%d batch %d: %8.2f us  %7.1f Gw/s  %7.1f GB/s  %5.1f%% HBM  %5.1f%% issue%s | graph "
                    "%.2f us, programmatic %.2f us, both %.2f us\n",
                    s.name, K, batch, us, r.gws, r.gbs, r.pct_hbm, r.pct_issue, r.sass_measured ? "" : " (est.)", g_us,
                    p_us, pg_us);
        std::fflush(stdout);
      }
      FT_CUDA_CHECK(cudaFree(ws));
    }
  exl3_set_programmatic_launch(was);
  FT_CUDA_CHECK(cudaStreamDestroy(cs));
  FT_CUDA_CHECK(cudaFree(pool));
  FT_CUDA_CHECK(cudaFree(sc));
  FT_CUDA_CHECK(cudaFree(x));
  FT_CUDA_CHECK(cudaFree(y));
  return rows;
}

// ---------------------------------------------------------------------------------------------
// Uniform routes: each of n tokens picks top_k distinct experts of E at random (ascending), with
// their dispatch as ops/moe.h lays it out (offsets, picks sorted by expert, active experts).
struct HostRoutes {
  std::vector<int32_t> expert, offsets, sorted, active;
};
HostRoutes uniform_routes(int n, int E, int top_k, std::mt19937_64& rng) {
  HostRoutes h;
  for (int t = 0; t < n; ++t) {
    std::vector<int32_t> all(E);
    for (int e = 0; e < E; ++e) all[e] = e;
    std::shuffle(all.begin(), all.end(), rng);
    std::sort(all.begin(), all.begin() + top_k);
    h.expert.insert(h.expert.end(), all.begin(), all.begin() + top_k);
  }
  h.offsets.assign(E + 1, 0);
  for (int32_t e : h.expert) ++h.offsets[e + 1];
  for (int e = 0; e < E; ++e) h.offsets[e + 1] += h.offsets[e];
  std::vector<int32_t> fill(h.offsets.begin(), h.offsets.end() - 1);
  h.sorted.resize(h.expert.size());
  for (size_t p = 0; p < h.expert.size(); ++p) h.sorted[fill[h.expert[p]]++] = static_cast<int32_t>(p);
  for (int e = 0; e < E; ++e)
    if (h.offsets[e + 1] > h.offsets[e]) h.active.push_back(e);
  return h;
}

// Device buffers for the routes of up to max_n tokens (weights left as allocated: the benchmarks
// time the matmuls, not the combine).
struct DeviceRoutes {
  int32_t *expert, *offsets, *sorted, *active, *n_active;
  float* weight;
  DeviceRoutes(int max_n, int top_k, int E)
      : expert(dev_alloc<int32_t>(static_cast<size_t>(max_n) * top_k)),
        offsets(dev_alloc<int32_t>(E + 1)),
        sorted(dev_alloc<int32_t>(static_cast<size_t>(max_n) * top_k)),
        active(dev_alloc<int32_t>(E)),
        n_active(dev_alloc<int32_t>(1)),
        weight(dev_alloc<float>(static_cast<size_t>(max_n) * top_k)) {}
  ~DeviceRoutes() {
    for (void* p : {static_cast<void*>(expert), static_cast<void*>(offsets), static_cast<void*>(sorted),
                    static_cast<void*>(active), static_cast<void*>(n_active), static_cast<void*>(weight)})
      cudaFree(p);
  }
  DeviceRoutes(const DeviceRoutes&) = delete;
  DeviceRoutes& operator=(const DeviceRoutes&) = delete;
  void upload(const HostRoutes& h) const {
    const int32_t na = static_cast<int32_t>(h.active.size());
    FT_CUDA_CHECK(cudaMemcpy(expert, h.expert.data(), h.expert.size() * 4, cudaMemcpyHostToDevice));
    FT_CUDA_CHECK(cudaMemcpy(offsets, h.offsets.data(), h.offsets.size() * 4, cudaMemcpyHostToDevice));
    FT_CUDA_CHECK(cudaMemcpy(sorted, h.sorted.data(), h.sorted.size() * 4, cudaMemcpyHostToDevice));
    FT_CUDA_CHECK(cudaMemcpy(active, h.active.data(), h.active.size() * 4, cudaMemcpyHostToDevice));
    FT_CUDA_CHECK(cudaMemcpy(n_active, &na, 4, cudaMemcpyHostToDevice));
  }
  MoeRoutes routes(int n, int top_k) const {
    MoeRoutes r;
    r.expert = expert, r.weight = weight, r.n = n, r.top_k = top_k;
    return r;
  }
  MoeDispatch dispatch() const {
    MoeDispatch d;
    d.offsets = offsets, d.sorted_pick = sorted, d.active = active, d.n_active = n_active;
    return d;
  }
};

struct MoeRow {
  std::string where;
  int n, experts;
  double us, gbs, pct;
  bool host = true;
};

// A block with a valid header, fp16 scales of a sane size and arbitrary trellis bits.
void fill_block(uint8_t* dst, const ft::exl3::ExpertBlockHeader& h, uint64_t seed) {
  std::memset(dst, 0, h.block_bytes);
  std::memcpy(dst, &h, sizeof h);
  std::mt19937_64 g(seed);
  for (int p = 0; p < 3; ++p) {
    const auto& ph = h.proj[p];
    auto* t = reinterpret_cast<uint64_t*>(dst + ph.trellis_offset);
    for (uint64_t i = 0; i < ph.in_p * ph.out_p * ph.K / 64; ++i) t[i] = g();
    auto* suh = reinterpret_cast<uint16_t*>(dst + ph.suh_offset);
    auto* svh = reinterpret_cast<uint16_t*>(dst + ph.svh_offset);
    for (uint64_t i = 0; i < ph.in_p; ++i) suh[i] = ft::f32_to_f16((g() & 1 ? 1.0f : -1.0f) / 64.0f);
    for (uint64_t i = 0; i < ph.out_p; ++i) svh[i] = 0x3C00;
  }
}

// The routed expert's block at K = 3 MUL1 for all three projections (the real model's layout).
ft::exl3::ExpertBlockHeader k3_expert_block(int64_t D, int64_t I) {
  ft::exl3::ExpertGeometry g;
  g.hidden = D, g.inter = I;
  for (int p = 0; p < 3; ++p) g.K[p] = 3, g.codebook[p] = Codebook::Mul1;
  return ft::exl3::plan_expert_block(g);
}

std::vector<MoeRow> bench_moe(const Opts& o, const Bounds& B, const std::string& backing, bool with_vram,
                              double* pcie_out) {
  const int64_t D = 4096, I = 2048;
  const int E = o.quick ? 24 : 64, top_k = 8;
  const ft::exl3::ExpertBlockHeader h = k3_expert_block(D, I);
  const size_t bytes = h.block_bytes * E;
  ft::bench::HostBacking mem(backing, bytes, [&](unsigned char* p, size_t) {
    for (int e = 0; e < E; ++e) fill_block(p + e * h.block_bytes, h, 100 + e);
  });
  const uint8_t* host = mem.data();
  void* mapped = exl3_map_host_experts(mem.data(), bytes);
  *pcie_out = exl3_read_gbs(mapped, bytes, o.quick ? 2 : 4);
  // Also at the grouped kernel's residency (2 CTAs per SM at its register count): tells whether
  // its in-flight depth or its access pattern is what keeps it below this rate.
  std::printf("[%s] host pages: %s\n", backing.c_str(), mem.pages().c_str());
  std::printf("[%s] PCIe read of mapped host memory: %.1f GB/s at 8 CTAs per SM, %.1f GB/s at 2\n", backing.c_str(),
              *pcie_out, exl3_read_gbs(mapped, bytes, o.quick ? 2 : 4, 2));
  if (o.moe_memory.size() > 1 || backing != "malloc") {
    std::printf("[%s] PCIe read, pieces scattered in runs of", backing.c_str());
    for (size_t run : {size_t{2} << 10, size_t{4} << 10, size_t{64} << 10, size_t{2} << 20})
      std::printf("  %zu KB: %.1f GB/s", run >> 10, exl3_read_scattered_gbs(mapped, bytes, run, o.quick ? 2 : 4));
    std::printf("\n");
  }
  std::fflush(stdout);
  auto* vram = dev_alloc<unsigned char>(with_vram ? bytes : 1);
  if (with_vram) FT_CUDA_CHECK(cudaMemcpy(vram, host, bytes, cudaMemcpyHostToDevice));
  Exl3MoeLayer geo = exl3_moe_geometry(host, E);
  std::vector<Exl3ExpertPtrs> th(E), tv(E), ts(E);
  for (int e = 0; e < E; ++e) {
    th[e] = exl3_expert_ptrs(host + e * h.block_bytes, static_cast<unsigned char*>(mapped) + e * h.block_bytes);
    tv[e] = exl3_expert_ptrs(host + e * h.block_bytes, with_vram ? vram + e * h.block_bytes : vram);
    // Trellis over PCIe, the small suh/svh vectors from VRAM: do their latency-bound host reads
    // (input transforms, each block's output transform) hold the kernel back?
    ts[e] = th[e];
    for (int p = 0; p < 3; ++p) ts[e].suh[p] = tv[e].suh[p], ts[e].svh[p] = tv[e].svh[p];
  }
  auto* dth = dev_alloc<Exl3ExpertPtrs>(E);
  auto* dtv = dev_alloc<Exl3ExpertPtrs>(E);
  auto* dts = dev_alloc<Exl3ExpertPtrs>(E);
  FT_CUDA_CHECK(cudaMemcpy(dth, th.data(), E * sizeof(Exl3ExpertPtrs), cudaMemcpyHostToDevice));
  FT_CUDA_CHECK(cudaMemcpy(dtv, tv.data(), E * sizeof(Exl3ExpertPtrs), cudaMemcpyHostToDevice));
  FT_CUDA_CHECK(cudaMemcpy(dts, ts.data(), E * sizeof(Exl3ExpertPtrs), cudaMemcpyHostToDevice));
  // The committed configuration first, then (first backing only) variants that each change one
  // thing: where the scales live, and whole-input items instead of split-K ones.
  struct Variant {
    std::string name;
    const Exl3ExpertPtrs* table;
    int split_picks;
    bool host;
  };
  std::vector<Variant> variants = {{"mapped host (zero-copy, " + backing + ")", dth, -1, true}};
  if (with_vram) {
    variants.push_back({"VRAM", dtv, -1, false});
    variants.push_back({"zero-copy, scales in VRAM", dts, -1, true});
    variants.push_back({"zero-copy, whole-input items", dth, 0, true});
    variants.push_back({"zero-copy, scales VRAM + whole-input", dts, 0, true});
    variants.push_back({"VRAM, whole-input items", dtv, 0, false});
  }
  const int64_t trellis_per_expert = 3 * D * I * 3 / 8;
  Timer tm;
  std::vector<MoeRow> rows;
  const int max_n = 8;
  auto* x = dev_alloc<float>(max_n * D);
  const std::vector<float> xh = randn(max_n * D, 5);
  FT_CUDA_CHECK(cudaMemcpy(x, xh.data(), xh.size() * 4, cudaMemcpyHostToDevice));
  auto* Y = dev_alloc<float>(max_n * top_k * D);
  const size_t wsb = exl3_moe_workspace_bytes(geo, max_n, top_k);
  auto* ws = dev_alloc<unsigned char>(wsb);
  exl3_moe_workspace_init(ws, wsb, nullptr);
  const DeviceRoutes dr(max_n, top_k, E);
  std::mt19937_64 rng(9);
  for (int n : {1, 2, 4, 8}) {
    // Picks spread over the experts so consecutive calls read different ones (the host pool is
    // far beyond the L2).
    const int calls = o.quick ? 6 : 16;
    std::vector<HostRoutes> hr;
    for (int c = 0; c < calls; ++c) hr.push_back(uniform_routes(n, E, top_k, rng));
    double distinct = 0;
    for (int c = 0; c < calls; ++c) distinct += static_cast<double>(hr[c].active.size());
    distinct /= calls;
    for (const Variant& v : variants) {
      geo.table = v.table;
      geo.split_picks = v.split_picks;
      const MoeRoutes r = dr.routes(n, top_k);
      const MoeDispatch d = dr.dispatch();
      // Each call is timed alone (its routes uploaded before it) and reads other experts than the
      // call before it; the first pass over the calls is a warm-up.
      double total_us = 0;
      for (int rep = 0; rep < 2; ++rep) {
        total_us = 0;
        for (int c = 0; c < calls; ++c) {
          dr.upload(hr[c]);
          total_us += tm.once([&] { exl3_moe_experts(geo, r, d, x, D, 10.0f, Y, ws, nullptr); });
        }
      }
      MoeRow row;
      row.where = v.name;
      row.host = v.host;
      row.n = n;
      row.experts = static_cast<int>(std::lround(distinct));
      row.us = total_us / calls;
      row.gbs = distinct * trellis_per_expert / (row.us * 1e3);
      row.pct = 100 * row.gbs / (v.host ? *pcie_out : B.hbm);
      rows.push_back(row);
      std::printf("moe %-38s n=%d (%.1f experts): %9.1f us  %7.1f GB/s  %5.1f%% of %s\n", row.where.c_str(), n,
                  distinct, row.us, row.gbs, row.pct, v.host ? "PCIe" : "HBM");
      std::fflush(stdout);
    }
  }
  for (void* p : {static_cast<void*>(vram), static_cast<void*>(dth), static_cast<void*>(dtv), static_cast<void*>(dts),
                  static_cast<void*>(x), static_cast<void*>(Y), static_cast<void*>(ws)})
    FT_CUDA_CHECK(cudaFree(p));
  exl3_unmap_host_experts(mem.data());
  return rows;
}

// ---------------------------------------------------------------------------------------------
// The grouped MoE at prefill sizes: the same calls with every expert in 32-row batches and with
// experts of more than 32 picks in 128-row tiles (the prefill form).
struct MoePrefillRow {
  std::string where;
  int tokens;
  double picks_per_expert, batched_ms, default_ms, batched_tflops, default_tflops;
};

std::vector<MoePrefillRow> bench_moe_prefill(const Opts& o) {
  const int64_t D = 4096, I = 2048;
  const int E = o.quick ? 64 : 128, top_k = 8;
  const ft::exl3::ExpertBlockHeader h = k3_expert_block(D, I);
  const size_t bytes = h.block_bytes * E;
  ft::bench::HostBacking mem("malloc", bytes, [&](unsigned char* p, size_t) {
    for (int e = 0; e < E; ++e) fill_block(p + e * h.block_bytes, h, 300 + e);
  });
  const uint8_t* host = mem.data();
  void* mapped = exl3_map_host_experts(mem.data(), bytes);
  auto* vram = dev_alloc<unsigned char>(bytes);
  FT_CUDA_CHECK(cudaMemcpy(vram, host, bytes, cudaMemcpyHostToDevice));
  Exl3MoeLayer geo = exl3_moe_geometry(host, E);
  std::vector<Exl3ExpertPtrs> th(E), tv(E);
  for (int e = 0; e < E; ++e) {
    th[e] = exl3_expert_ptrs(host + e * h.block_bytes, static_cast<unsigned char*>(mapped) + e * h.block_bytes);
    tv[e] = exl3_expert_ptrs(host + e * h.block_bytes, vram + e * h.block_bytes);
  }
  auto* dth = dev_alloc<Exl3ExpertPtrs>(E);
  auto* dtv = dev_alloc<Exl3ExpertPtrs>(E);
  FT_CUDA_CHECK(cudaMemcpy(dth, th.data(), E * sizeof(Exl3ExpertPtrs), cudaMemcpyHostToDevice));
  FT_CUDA_CHECK(cudaMemcpy(dtv, tv.data(), E * sizeof(Exl3ExpertPtrs), cudaMemcpyHostToDevice));
  const std::vector<int> token_counts = o.quick ? std::vector<int>{512, 2048} : std::vector<int>{512, 2048, 8192};
  const int max_n = token_counts.back();
  auto* x = dev_alloc<float>(static_cast<size_t>(max_n) * D);
  {
    const std::vector<float> xh = randn(static_cast<size_t>(max_n) * D, 7);
    FT_CUDA_CHECK(cudaMemcpy(x, xh.data(), xh.size() * 4, cudaMemcpyHostToDevice));
  }
  auto* Y = dev_alloc<float>(static_cast<size_t>(max_n) * top_k * D);
  const size_t wsb = exl3_moe_workspace_bytes(geo, max_n, top_k);
  auto* ws = dev_alloc<unsigned char>(wsb);
  exl3_moe_workspace_init(ws, wsb, nullptr);
  const DeviceRoutes dr(max_n, top_k, E);
  std::mt19937_64 rng(11);
  Timer tm;
  std::vector<MoePrefillRow> rows;
  for (int n : token_counts) {
    const HostRoutes hr = uniform_routes(n, E, top_k, rng);
    const int na = static_cast<int>(hr.active.size());
    dr.upload(hr);
    const MoeRoutes r = dr.routes(n, top_k);
    const MoeDispatch d = dr.dispatch();
    const double flop = 2.0 * n * top_k * 3.0 * static_cast<double>(D * I);
    for (int host_side = 0; host_side < 2; ++host_side) {
      MoePrefillRow row;
      row.where = host_side ? "mapped host (zero-copy)" : "VRAM";
      row.tokens = n;
      row.picks_per_expert = static_cast<double>(n) * top_k / std::max(1, na);
      geo.table = host_side ? dth : dtv;
      const int calls = n >= 8192 ? 2 : 4;
      for (int form = 0; form < 2; ++form) {
        geo.gemm_min_picks = form == 0 ? std::numeric_limits<int>::max() : 33;  // 33: more than one batch
        const double us = tm.us_per_call(calls, [&](int) { exl3_moe_experts(geo, r, d, x, D, 10.0f, Y, ws, nullptr); });
        (form == 0 ? row.batched_ms : row.default_ms) = us * 1e-3;
        (form == 0 ? row.batched_tflops : row.default_tflops) = flop / (us * 1e6);
      }
      rows.push_back(row);
      std::printf("moe prefill %-24s %5d tokens (%.0f picks/expert): 32-row batches %8.2f ms %6.1f TFLOP/s, "
                  "with the prefill form %8.2f ms %6.1f TFLOP/s (%.2fx)\n",
                  row.where.c_str(), n, row.picks_per_expert, row.batched_ms, row.batched_tflops, row.default_ms,
                  row.default_tflops, row.batched_ms / row.default_ms);
      std::fflush(stdout);
    }
  }
  for (void* p : {static_cast<void*>(vram), static_cast<void*>(dth), static_cast<void*>(dtv), static_cast<void*>(x),
                  static_cast<void*>(Y), static_cast<void*>(ws)})
    FT_CUDA_CHECK(cudaFree(p));
  exl3_unmap_host_experts(mem.data());
  return rows;
}

// ---------------------------------------------------------------------------------------------
struct PrefillRow {
  std::string shape;
  int K;
  int64_t rows;
  double us, tflops, cublas_tflops, pct;
};

std::vector<PrefillRow> bench_prefill(const Opts& o) {
  struct Shape {
    const char* name;
    int64_t in, out;
  };
  std::vector<Shape> shapes = {{"4096→4096", 4096, 4096}, {"4096→8192", 4096, 8192}};
  std::vector<int64_t> row_counts = {512, 2048, 8192};
  if (o.quick) shapes.resize(1), row_counts = {512, 2048};
  bool have_cublas = false;
  std::string why = "built without tools/bench-cuda/cublas_ref.h";
#ifdef FT_HAVE_CUBLAS_REF
  have_cublas = ft::bench::cublaslt_available(&why);
#endif
  if (!have_cublas) std::printf("cuBLASLt reference unavailable: %s\n", why.c_str());
  const Exl3Wide wide = exl3_wide_prefill();
  std::printf("prefill kernel shape: %s (FLASHTIER_EXL3_WIDE=off|auto|on; the wide one fits this device at K=3: %s)\n",
              !exl3_wide_prefill_fits(3) || wide == Exl3Wide::Off ? "narrow, 8 warps x 128 columns"
              : wide == Exl3Wide::On ? "wide, 16 warps x 256 columns"
                                     : "auto (a linear wide where its waves pay, the MoE form wide)",
              exl3_wide_prefill_fits(3) ? "yes" : "no");
  const int64_t max_rows = row_counts.back();
  auto* x = dev_alloc<float>(max_rows * 4096);
  {
    const std::vector<float> xh = randn(static_cast<size_t>(max_rows * 4096), 3);
    FT_CUDA_CHECK(cudaMemcpy(x, xh.data(), xh.size() * 4, cudaMemcpyHostToDevice));
  }
  auto* y = dev_alloc<float>(max_rows * 8192);
  Timer tm;
  std::vector<PrefillRow> out;
  for (const Shape& s : shapes) {
    const int K = 3;
    auto* w = dev_alloc<unsigned char>(s.in * s.out * K / 8);
    FT_CUDA_CHECK(cudaMemset(w, 0x5A, s.in * s.out * K / 8));
    std::vector<uint16_t> sc(s.in + s.out, 0x2000);
    auto* scd = dev_alloc<__half>(sc.size());
    FT_CUDA_CHECK(cudaMemcpy(scd, sc.data(), sc.size() * 2, cudaMemcpyHostToDevice));
    const Exl3LinearDev L =
        exl3_linear_view(K, Codebook::Mul1, s.in, s.out, reinterpret_cast<const uint32_t*>(w), scd, scd + s.in);
    const size_t wsb = exl3_linear_workspace_bytes(L, max_rows);
    auto* ws = dev_alloc<unsigned char>(wsb);
    exl3_linear_workspace_init(ws, wsb, nullptr);
    for (int64_t rows : row_counts) {
      const double us = tm.us_per_call(o.quick ? 3 : 5, [&](int) { exl3_linear(L, x, s.in, rows, y, s.out, ws, nullptr); });
      PrefillRow r;
      r.shape = s.name, r.K = K, r.rows = rows, r.us = us;
      r.tflops = 2.0 * rows * s.in * s.out / (us * 1e6);
      r.cublas_tflops = 0;
#ifdef FT_HAVE_CUBLAS_REF
      if (have_cublas) {
        const double ms = ft::bench::cublaslt_gemm_ms(rows, s.out, s.in, o.quick ? 5 : 10);
        r.cublas_tflops = ms > 0 ? 2.0 * rows * s.in * s.out / (ms * 1e9) : 0;
      }
#endif
      r.pct = r.cublas_tflops > 0 ? 100 * r.tflops / r.cublas_tflops : 0;
      out.push_back(r);
      std::printf("prefill %-10s K=%d rows %5lld: %9.1f us  %6.1f TFLOP/s  cuBLAS bf16 %6.1f  (%5.1f%%)\n", s.name, K,
                  static_cast<long long>(rows), us, r.tflops, r.cublas_tflops, r.pct);
      std::fflush(stdout);
    }
    FT_CUDA_CHECK(cudaFree(ws));
    FT_CUDA_CHECK(cudaFree(w));
    FT_CUDA_CHECK(cudaFree(scd));
  }
  FT_CUDA_CHECK(cudaFree(x));
  FT_CUDA_CHECK(cudaFree(y));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") o.quick = true;
    else if (a == "--only" && i + 1 < argc) o.sections = split_list(argv[++i]);
    else if (a == "--moe-memory" && i + 1 < argc) o.moe_memory = split_list(argv[++i]);
    else if (a == "--gemv-shape" && i + 1 < argc) o.gemv_shape = argv[++i];
    else if (a == "--gemv-k" && i + 1 < argc) {
      o.gemv_k.clear();
      for (const std::string& k : split_list(argv[++i])) o.gemv_k.push_back(std::stoi(k));
    } else {
      std::fprintf(stderr,
                   "usage: flashtier-bench-exl3 [--quick] [--only gemv,moe,moeprefill,prefill] "
                   "[--moe-memory malloc,thp,4k,hugetlb,shm] [--gemv-shape NAME_PART] [--gemv-k 2,3,4]\n");
      return 2;
    }
  }
  try {
    if (device_count() == 0) {
      std::fprintf(stderr, "flashtier-bench-exl3: no CUDA device\n");
      return 1;
    }
    const DeviceInfo dev = use_device(0);
    std::printf("device: %s\n", dev.summary().c_str());
    Bounds B;
    B.sms = dev.sm_count;
    B.arch = 10 * dev.cc_major + dev.cc_minor;
    {
      const size_t n = o.quick ? (size_t{1} << 30) : (size_t{2} << 30);
      auto* buf = dev_alloc<unsigned char>(n);
      FT_CUDA_CHECK(cudaMemset(buf, 1, n));
      B.hbm = exl3_read_gbs(buf, n);
      FT_CUDA_CHECK(cudaFree(buf));
    }
    B.clock_mhz = exl3_sm_clock_mhz();
    const std::string tool = find_cuobjdump();
    B.sass = loop_counts(tool, B.arch);
    std::printf("bounds: HBM read %.0f GB/s, SM clock %.0f MHz under load, %d SMs; cuobjdump: %s on %s (%zu kernels)\n",
                B.hbm, B.clock_mhz, B.sms,
                tool.empty() ? "not found (instruction counts are design estimates)" : tool.c_str(),
                kernel_file().c_str(), B.sass.size());
    for (int K : {2, 3, 4})
      for (bool split : {true, false}) {
        const SassCount s = sass_ipw(B.sass, K, split);
        std::printf("  main loop K=%d MUL1 batch<=8 %s: %.2f SASS instructions per weight%s\n", K,
                    split ? "split-K" : "full-K", s.ipw, s.measured ? "" : " (est.)");
      }
    const std::vector<GemvRow> gemv = o.wants("gemv") ? bench_gemv(o, B) : std::vector<GemvRow>{};
    double pcie = 0;
    std::vector<MoeRow> moe;
    if (o.wants("moe"))
      for (size_t m = 0; m < o.moe_memory.size(); ++m) {
        try {
          double p = 0;
          const std::vector<MoeRow> r = bench_moe(o, B, o.moe_memory[m], m == 0, &p);
          moe.insert(moe.end(), r.begin(), r.end());
          if (m == 0) pcie = p;
        } catch (const std::runtime_error& e) {
          std::printf("[%s] skipped: %s\n", o.moe_memory[m].c_str(), e.what());
        }
      }
    const std::vector<MoePrefillRow> moe_pre =
        o.wants("moeprefill") ? bench_moe_prefill(o) : std::vector<MoePrefillRow>{};
    const std::vector<PrefillRow> pre = o.wants("prefill") ? bench_prefill(o) : std::vector<PrefillRow>{};

    std::printf("\n## EXL3 GPU benchmark (%s)\n\n", dev.name.c_str());
    std::printf("Bounds measured in this run: HBM read **%.0f GB/s**, PCIe read of mapped host memory **%.1f GB/s**, "
                "SM clock %.0f MHz, %d SMs. Issue bound = SMs × 4 × 32 × clock / (SASS instructions per weight)%s.\n\n",
                B.hbm, pcie, B.clock_mhz, B.sms, tool.empty() ? " (design estimates: no cuobjdump)" : "");
    std::printf("### GEMV (exl3_linear, MUL1, input transform included)\n\n");
    std::printf("Calls launched one after another on a stream; the last three columns: the same calls replayed from "
                "one CUDA graph (as decode steps run), with programmatic dependent launch (sm_90+), and both.\n\n");
    std::printf("| shape | K | batch | µs | Gweights/s | trellis GB/s | %% of HBM | issue bound Gw/s | %% of issue | graph µs "
                "| programmatic µs | graph + programmatic µs |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const GemvRow& r : gemv)
      std::printf("| %s | %d | %d | %.2f | %.0f | %.0f | %.1f%% | %.0f%s | %.1f%% | %.2f | %s | %s |\n", r.shape.c_str(),
                  r.K, r.batch, r.us, r.gws, r.gbs, r.pct_hbm, r.issue_gws, r.sass_measured ? "" : " (est.)",
                  r.pct_issue, r.graph_us, r.pdl_us > 0 ? std::to_string(r.pdl_us).substr(0, 5).c_str() : "-",
                  r.pdl_graph_us > 0 ? std::to_string(r.pdl_graph_us).substr(0, 5).c_str() : "-");
    std::printf("\n### Grouped MoE (D 4096, I 2048, K 3 MUL1, top-8; trellis bytes of the distinct experts)\n\n");
    std::printf("| experts in | tokens | distinct experts | µs per layer | trellis GB/s | %% of bound |\n");
    std::printf("|---|---|---|---|---|---|\n");
    for (const MoeRow& r : moe)
      std::printf("| %s | %d | %d | %.1f | %.1f | %.1f%% of %s |\n", r.where.c_str(), r.n, r.experts, r.us, r.gbs,
                  r.pct, r.host ? "PCIe" : "HBM");
    std::printf("\n### Grouped MoE at prefill (D 4096, I 2048, K 3 MUL1, top-8 of %d experts, uniform picks)\n\n",
                o.quick ? 64 : 128);
    std::printf("| experts in | tokens | picks per expert | 32-row batches ms | TFLOP/s | with the prefill form ms | "
                "TFLOP/s | speed-up |\n|---|---|---|---|---|---|---|---|\n");
    for (const MoePrefillRow& r : moe_pre)
      std::printf("| %s | %d | %.0f | %.2f | %.1f | %.2f | %.1f | %.2fx |\n", r.where.c_str(), r.tokens,
                  r.picks_per_expert, r.batched_ms, r.batched_tflops, r.default_ms, r.default_tflops,
                  r.batched_ms / r.default_ms);
    std::printf("\n### Prefill (exl3_linear, K 3 MUL1) vs cuBLASLt bf16 on the dense shape\n\n");
    std::printf("| shape | rows | µs | TFLOP/s | cuBLASLt bf16 TFLOP/s | %% |\n|---|---|---|---|---|---|\n");
    for (const PrefillRow& r : pre)
      std::printf("| %s | %lld | %.1f | %.1f | %s | %s |\n", r.shape.c_str(), static_cast<long long>(r.rows), r.us,
                  r.tflops, r.cublas_tflops > 0 ? std::to_string(r.cublas_tflops).substr(0, 6).c_str() : "n/a",
                  r.pct > 0 ? (std::to_string(r.pct).substr(0, 5) + "%").c_str() : "n/a");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashtier-bench-exl3: %s\n", e.what());
    return 1;
  }
}
