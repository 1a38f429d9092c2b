// flashtier-bench-kda: times the KDA kernels (gpu-worker/backends/cuda/ops/kda.h) at the real
// model's widths (64 heads × 128, conv K = 4) — the decode step for B rows and the chunked prefill
// of one sequence, plus the per-token ops around them — each against its bound: bytes at the HBM
// bandwidth (measured in this run where the probe is linked, else --hbm-gbs) or fp32 FMA work at
// --fp32-tflops, whichever is larger. Prints a markdown table last.
//
//   flashtier-bench-kda [--heads H] [--head-dim DL] [--hbm-gbs G] [--fp32-tflops F] [--iters N]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/device.h"
#include "gpu-worker/backends/cuda/ops/kda.h"
#ifdef FT_HAVE_HBM_PROBE
#include "tools/bench-cuda/hbm_probe.h"
#endif

namespace {

using namespace ft::cuda;

struct Opts {
  int64_t heads = 64, head_dim = 128, conv = 4;
  double hbm_gbs = 0, fp32_tflops = 60;
  int iters = 20;
};

struct Row {
  std::string op, shape;
  double us, bytes, fmas, bound_us;
};

float* dev_random(size_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> h(n);
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (float& x : h) x = d(g);
  float* p = nullptr;
  FT_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float)));
  FT_CUDA_CHECK(cudaMemcpy(p, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  return p;
}
float* dev_zero(size_t n) {
  float* p = nullptr;
  FT_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float)));
  FT_CUDA_CHECK(cudaMemset(p, 0, n * sizeof(float)));
  return p;
}

// Mean time (µs) of `fn` over iters runs after two warm-ups; `reset` (not timed) runs before each.
double time_us(const std::function<void()>& fn, int iters, const std::function<void()>& reset = {}) {
  cudaEvent_t a, b;
  FT_CUDA_CHECK(cudaEventCreate(&a));
  FT_CUDA_CHECK(cudaEventCreate(&b));
  double total_ms = 0;
  for (int i = -2; i < iters; ++i) {
    if (reset) reset();
    FT_CUDA_CHECK(cudaEventRecord(a));
    fn();
    FT_CUDA_CHECK(cudaEventRecord(b));
    FT_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    FT_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 0) total_ms += ms;
  }
  FT_CUDA_CHECK(cudaEventDestroy(a));
  FT_CUDA_CHECK(cudaEventDestroy(b));
  return 1000.0 * total_ms / iters;
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const double v = std::atof(argv[i + 1]);
    if (k == "--heads")
      o.heads = static_cast<int64_t>(v);
    else if (k == "--head-dim")
      o.head_dim = static_cast<int64_t>(v);
    else if (k == "--hbm-gbs")
      o.hbm_gbs = v;
    else if (k == "--fp32-tflops")
      o.fp32_tflops = v;
    else if (k == "--iters")
      o.iters = static_cast<int>(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  try {
    const DeviceInfo dev = use_device(0);
    std::printf("device: %s\n", dev.summary().c_str());
    if (o.hbm_gbs <= 0) {
#ifdef FT_HAVE_HBM_PROBE
      o.hbm_gbs = bench::hbm_read_gbs();
      std::printf("HBM read bandwidth (measured): %.0f GB/s\n", o.hbm_gbs);
#else
      o.hbm_gbs = 4800;
      std::printf("HBM read bandwidth (assumed): %.0f GB/s\n", o.hbm_gbs);
#endif
    }
    const KdaShape shape{o.heads, o.head_dim};
    const int64_t H = o.heads, dl = o.head_dim, Q = shape.width(), C = 3 * Q, K = o.conv, W = K - 1;
    const double state_bytes = static_cast<double>(H * dl * dl) * 4;
    std::vector<Row> rows;
    auto bound = [&](double bytes, double fmas) {
      return std::max(bytes / (o.hbm_gbs * 1e3), 2.0 * fmas / (o.fp32_tflops * 1e6));
    };
    auto add = [&](const std::string& op, const std::string& shp, double us, double bytes, double fmas) {
      rows.push_back({op, shp, us, bytes, fmas, bound(bytes, fmas)});
      std::printf("%-22s %-26s %10.1f us  (bound %8.1f us)\n", op.c_str(), shp.c_str(), us, rows.back().bound_us);
    };

    // ---- decode: B rows, one token each, slots 0…B−1 of an 8-slot pool.
    {
      const int64_t slots = 8;
      float* pool = dev_random(static_cast<size_t>(slots * H * dl * dl), 1, -0.5f, 0.5f);
      float* win_pool = dev_random(static_cast<size_t>(slots * W * C), 2, -1, 1);
      float* qkv = dev_random(static_cast<size_t>(slots * C), 3, -0.1f, 0.1f);
      float* z = dev_random(static_cast<size_t>(slots * C), 4, -1, 1);
      float* conv_w = dev_random(static_cast<size_t>(C * K), 5, -0.5f, 0.5f);
      float* g = dev_random(static_cast<size_t>(slots * Q), 6, -0.5f, 0);
      float* r = dev_random(static_cast<size_t>(slots * Q), 7, -3, 3);
      float* beta = dev_random(static_cast<size_t>(slots * H), 8, 0, 1);
      float* dt = dev_random(static_cast<size_t>(Q), 9, -1, 1);
      float* alog = dev_random(static_cast<size_t>(H), 10, 0, 2.7f);
      float* normw = dev_random(static_cast<size_t>(dl), 11, 0.5f, 1.5f);
      float* gate = dev_random(static_cast<size_t>(slots * Q), 12, -2, 2);
      float* out = dev_zero(static_cast<size_t>(slots * Q));
      float* y = dev_zero(static_cast<size_t>(slots * Q));
      std::vector<int32_t> hs(static_cast<size_t>(slots));
      for (int i = 0; i < slots; ++i) hs[i] = i;
      int32_t* sl = nullptr;
      FT_CUDA_CHECK(cudaMalloc(&sl, hs.size() * sizeof(int32_t)));
      FT_CUDA_CHECK(cudaMemcpy(sl, hs.data(), hs.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
      for (int64_t B : {1, 2, 4, 8}) {
        const std::string shp = "B=" + std::to_string(B);
        add("decode step", shp,
            time_us([&] { kda_decode_step(pool, sl, qkv, C, g, Q, beta, H, B, shape, out, Q, nullptr); }, o.iters),
            B * (2 * state_bytes + 5.0 * Q * 4), B * 3.0 * H * dl * dl);
      }
      const int64_t B = 8;
      add("conv decode", "B=8",
          time_us([&] { kda_conv_decode(win_pool, sl, z, C, B, conv_w, C, K, qkv, C, nullptr); }, o.iters),
          B * (2.0 * W * C + 2.0 * C) * 4 + C * K * 4.0, B * C * K * 1.0);
      add("prepare", "B=8",
          time_us([&] { kda_prepare(qkv, C, r, Q, beta, H, B, dt, alog, -5.0f, shape, g, Q, beta, H, nullptr); },
                  o.iters),
          B * 6.0 * Q * 4, B * 4.0 * Q);
      add("gated norm", "B=8",
          time_us([&] { kda_gated_norm(out, Q, gate, Q, normw, B, shape, 1e-5f, y, Q, nullptr); }, o.iters),
          B * 3.0 * Q * 4, B * 3.0 * Q);
      for (float* p : {pool, win_pool, qkv, z, conv_w, g, r, beta, dt, alog, normw, gate, out, y})
        FT_CUDA_CHECK(cudaFree(p));
      FT_CUDA_CHECK(cudaFree(sl));
    }

    // ---- prefill of one sequence from position 0.
    for (int64_t n : {512, 2048, 8192}) {
      const std::string shp = "n=" + std::to_string(n);
      float* qkv0 = dev_random(static_cast<size_t>(n * C), 20, -0.1f, 0.1f);
      float* g0 = dev_random(static_cast<size_t>(n * Q), 21, -0.5f, 0);
      float* qkv = dev_zero(static_cast<size_t>(n * C));
      float* g = dev_zero(static_cast<size_t>(n * Q));
      float* beta = dev_random(static_cast<size_t>(n * H), 22, 0, 1);
      float* state = dev_zero(static_cast<size_t>(H * dl * dl));
      float* out = dev_zero(static_cast<size_t>(n * Q));
      float* ws = nullptr;
      FT_CUDA_CHECK(cudaMalloc(&ws, kda_chunked_prefill_workspace_bytes(0, n, shape)));
      auto reset = [&] {
        FT_CUDA_CHECK(cudaMemcpy(qkv, qkv0, static_cast<size_t>(n * C) * 4, cudaMemcpyDeviceToDevice));
        FT_CUDA_CHECK(cudaMemcpy(g, g0, static_cast<size_t>(n * Q) * 4, cudaMemcpyDeviceToDevice));
        FT_CUDA_CHECK(cudaMemset(state, 0, static_cast<size_t>(H * dl * dl) * 4));
      };
      const double chunks = static_cast<double>((n + 63) / 64) * H;
      // FMAs per chunk-head: A, M (off-diagonal and diagonal sub-blocks), the two solves, M·W and
      // M·U, then the scan's W·S, Q'·S and K̃ᵀ·V'. Bytes: the intra kernel reads q, k, v, g and writes
      // Q', K̃, U, W, P (plus Qγ, Kγ it re-reads), the scan reads five of them and writes O.
      const double fmas = chunks * (2.0 * (1536 + 544) * dl + 4.0 * 2048 * dl + 3.0 * 64 * dl * dl);
      const double bytes = static_cast<double>(n) * Q * 4 * 18 + 2 * state_bytes;
      add("chunked prefill", shp,
          time_us([&] { kda_chunked_prefill(state, 0, n, qkv, C, g, Q, beta, H, shape, out, Q, ws, nullptr); },
                  std::max(3, o.iters / 4), reset),
          bytes, fmas);
      if (n == 8192) {
        float* z = dev_random(static_cast<size_t>(n * C), 23, -1, 1);
        float* win = dev_zero(static_cast<size_t>(W * C));
        float* conv_w = dev_random(static_cast<size_t>(C * K), 24, -0.5f, 0.5f);
        float* r = dev_random(static_cast<size_t>(n * Q), 25, -3, 3);
        float* dt = dev_random(static_cast<size_t>(Q), 26, -1, 1);
        float* alog = dev_random(static_cast<size_t>(H), 27, 0, 2.7f);
        float* normw = dev_random(static_cast<size_t>(dl), 28, 0.5f, 1.5f);
        add("conv prefill", shp,
            time_us([&] { kda_conv_prefill(win, z, C, n, conv_w, C, K, qkv, C, nullptr); }, o.iters), 2.0 * n * C * 4,
            static_cast<double>(n) * C * K);
        add("prepare", shp,
            time_us([&] { kda_prepare(qkv, C, r, Q, beta, H, n, dt, alog, -5.0f, shape, g, Q, beta, H, nullptr); },
                    o.iters),
            6.0 * n * Q * 4, 4.0 * n * Q);
        add("gated norm", shp,
            time_us([&] { kda_gated_norm(out, Q, r, Q, normw, n, shape, 1e-5f, out, Q, nullptr); }, o.iters),
            3.0 * n * Q * 4, 3.0 * n * Q);
        for (float* p : {z, win, conv_w, r, dt, alog, normw}) FT_CUDA_CHECK(cudaFree(p));
      }
      for (float* p : {qkv0, g0, qkv, g, beta, state, out, ws}) FT_CUDA_CHECK(cudaFree(p));
    }

    std::printf("\nKDA kernels, %lld heads × %lld, K = %lld; bound = max(bytes / %.0f GB/s, 2·FMAs / %.0f TFLOP/s)\n\n",
                static_cast<long long>(H), static_cast<long long>(dl), static_cast<long long>(K), o.hbm_gbs,
                o.fp32_tflops);
    std::printf(
        "| op | shape | time µs | bound µs | of bound | GB/s | fp32 TFLOP/s |\n|---|---|---|---|---|---|---|\n");
    for (const Row& r : rows)
      std::printf("| %s | %s | %.1f | %.1f | %.0f%% | %.0f | %.1f |\n", r.op.c_str(), r.shape.c_str(), r.us, r.bound_us,
                  100.0 * r.bound_us / r.us, r.bytes / (r.us * 1e3), 2.0 * r.fmas / (r.us * 1e6));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashtier-bench-kda: %s\n", e.what());
    return 1;
  }
  return 0;
}
