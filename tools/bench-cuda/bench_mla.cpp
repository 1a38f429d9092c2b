// flashtier-bench-mla: times the sparse-attention kernels at the real model's widths (Rkv 512,
// ID 128, IH 32, NH 64, BT 2048) for decode batches and one prefill chunk, each against its
// bound (bytes at the HBM bandwidth, or FLOPs at the given peak, whichever is larger). Prints a
// markdown table last.
//
//   flashtier-bench-mla [--context T] [--kpool K] [--prefill-rows N] [--hbm-gbs G]
//                       [--fp16-tflops F] [--fp32-tflops F32]
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/device.h"
#include "gpu-worker/backends/cuda/ops/indexer.h"
#include "gpu-worker/backends/cuda/ops/mla.h"

namespace {

using namespace ft::cuda;

struct Opts {
  int64_t context = 32768, prefill_rows = 8192;
  int kpool = 16;
  double hbm_gbs = 4800, fp16_tflops = 660, fp32_tflops = 60;
};

struct Row {
  std::string shape, kernel;
  int64_t rows;
  double us, bytes, flops, bound_us;
};

template <class T>
T* dev_alloc(size_t n) {
  T* p = nullptr;
  FT_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  return p;
}
template <class T>
T* dev_upload(const std::vector<T>& h) {
  T* p = dev_alloc<T>(h.size());
  FT_CUDA_CHECK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

// Mean time of fn over `iters` runs after two warm-ups (µs).
double time_us(const std::function<void()>& fn, int iters = 10) {
  fn();
  fn();
  cudaEvent_t a, b;
  FT_CUDA_CHECK(cudaEventCreate(&a));
  FT_CUDA_CHECK(cudaEventCreate(&b));
  FT_CUDA_CHECK(cudaEventRecord(a));
  for (int i = 0; i < iters; ++i) fn();
  FT_CUDA_CHECK(cudaEventRecord(b));
  FT_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  FT_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  FT_CUDA_CHECK(cudaEventDestroy(a));
  FT_CUDA_CHECK(cudaEventDestroy(b));
  return 1000.0 * ms / iters;
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const double v = std::atof(argv[i + 1]);
    if (k == "--context") o.context = static_cast<int64_t>(v);
    else if (k == "--kpool") o.kpool = static_cast<int>(v);
    else if (k == "--prefill-rows") o.prefill_rows = static_cast<int64_t>(v);
    else if (k == "--hbm-gbs") o.hbm_gbs = v;
    else if (k == "--fp16-tflops") o.fp16_tflops = v;
    else if (k == "--fp32-tflops") o.fp32_tflops = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (device_count() == 0) {
    std::fprintf(stderr, "flashtier-bench-mla: no CUDA device\n");
    return 1;
  }
  std::printf("%s\n", use_device(0).summary().c_str());

  const int64_t Rkv = 512, ID = 128, IH = 32, NH = 64, BT = 2048;
  const int kp = o.kpool;
  const int64_t Bp = BT / kp, T = std::max<int64_t>(o.context, o.prefill_rows);
  const std::vector<int64_t> batches = {1, 8, 64};
  const int64_t slots = batches.back();
  // Every slot holds T tokens; slot s uses blocks [s·nb, (s+1)·nb) in reverse order.
  const int64_t bt = kPoolsPerBlock * static_cast<int64_t>(kp), nb = (T + bt - 1) / bt, n_blocks = slots * nb;
  std::vector<int32_t> table(slots * nb);
  for (int64_t s = 0; s < slots; ++s)
    for (int64_t j = 0; j < nb; ++j) table[s * nb + j] = static_cast<int32_t>(s * nb + (nb - 1 - j));
  const SparseTables tables{dev_upload(table), nb};
  const SparseCacheGeometry g{Rkv, ID, kp, nb};
  SparseCacheLayer cache;
  cache.latent = dev_alloc<__half>(n_blocks * bt * Rkv);
  cache.key = dev_alloc<__half>(n_blocks * bt * ID);
  cache.gate = dev_alloc<__half>(n_blocks * bt * ID);
  cache.pool_keys = dev_alloc<float>(n_blocks * kPoolsPerBlock * ID);
  // Contents only need to be finite: a byte pattern (fp16 1.06, fp32 0.0116).
  FT_CUDA_CHECK(cudaMemset(cache.latent, 0x3C, n_blocks * bt * Rkv * 2));
  FT_CUDA_CHECK(cudaMemset(cache.key, 0x3C, n_blocks * bt * ID * 2));
  FT_CUDA_CHECK(cudaMemset(cache.gate, 0x3C, n_blocks * bt * ID * 2));
  FT_CUDA_CHECK(cudaMemset(cache.pool_keys, 0x3C, n_blocks * kPoolsPerBlock * ID * 4));

  const int64_t max_rows = std::max(slots, o.prefill_rows);
  std::mt19937_64 gen(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> h(max_rows * std::max(NH * Rkv, IH * ID));
  for (float& x : h) x = nd(gen);
  float* q_abs = dev_upload(h);
  float* qI = q_abs;  // any finite values serve as indexer queries too
  std::vector<float> hw(max_rows * IH);
  for (float& x : hw) x = nd(gen);
  float* omega = dev_upload(hw);
  float* ctx = dev_alloc<float>(max_rows * NH * Rkv);
  int32_t* sel = dev_alloc<int32_t>(max_rows * Bp);
  int32_t* cnt = dev_alloc<int32_t>(max_rows);
  const size_t ws_bytes = size_t{1} << 30;
  void* ws = dev_alloc<char>(ws_bytes);

  const IndexerShape ish{IH, ID, kp, Bp, T / kp};
  const MlaAttendShape ash{NH, Rkv, kp, Bp, true, 1.0f / 16.0f};
  std::vector<Row> table_rows;
  auto add = [&](const std::string& shape, const std::string& kernel, int64_t rows, double us, double bytes,
                 double flops, double peak_tflops) {
    const double bound = std::max(bytes / (o.hbm_gbs * 1e3), flops / (peak_tflops * 1e6));
    table_rows.push_back({shape, kernel, rows, us, bytes, flops, bound});
    std::printf("%-28s %-22s rows %6lld  %10.1f us  bound %9.1f us\n", shape.c_str(), kernel.c_str(),
                static_cast<long long>(rows), us, bound);
  };

  auto bench = [&](const std::string& shape, const std::vector<int32_t>& slot_h, const std::vector<int32_t>& pos_h) {
    const int64_t n = static_cast<int64_t>(slot_h.size());
    int32_t* ds = dev_upload(slot_h);
    int32_t* dp = dev_upload(pos_h);
    const SparseRows rows{ds, dp, n};
    double sel_tokens = 0, pools = 0;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t nvis = (pos_h[r] + 1) / kp;
      pools += nvis > Bp ? static_cast<double>(nvis) : 0.0;
      sel_tokens += static_cast<double>(std::min(nvis, Bp) * kp + (pos_h[r] + 1) % kp);
    }
    // Selection: pool keys once per row (shared rows hit L2, counted once per row here) and
    // the fp32 score FLOPs.
    const double us_sel = time_us([&] {
      indexer_select(ish, cache, tables, rows, qI, IH * ID, omega, IH, sel, cnt, ws, ws_bytes, nullptr);
    });
    add(shape, "indexer_select", n, us_sel, pools * ID * 4, pools * 2.0 * IH * ID, o.fp32_tflops);
    for (MlaAttendPath path : {MlaAttendPath::TensorCore, MlaAttendPath::Simt}) {
      const double us = time_us([&] {
        mla_attend(ash, cache, g, tables, rows, sel, cnt, q_abs, ctx, ws, ws_bytes, nullptr, path);
      });
      add(shape, path == MlaAttendPath::TensorCore ? "mla_attend (mma)" : "mla_attend (SIMT)", n, us,
          sel_tokens * Rkv * 2 + 2.0 * n * NH * Rkv * 4, sel_tokens * 4.0 * NH * Rkv,
          path == MlaAttendPath::TensorCore ? o.fp16_tflops : o.fp32_tflops);
    }
    FT_CUDA_CHECK(cudaFree(ds));
    FT_CUDA_CHECK(cudaFree(dp));
  };

  for (int64_t B : batches) {
    std::vector<int32_t> s(B), p(B, static_cast<int32_t>(o.context - 1));
    for (int64_t b = 0; b < B; ++b) s[b] = static_cast<int32_t>(b);
    bench("decode T=" + std::to_string(o.context) + " B=" + std::to_string(B), s, p);
  }
  {
    const int64_t n = o.prefill_rows;
    std::vector<int32_t> s(n, 0), p(n);
    for (int64_t r = 0; r < n; ++r) p[r] = static_cast<int32_t>(T - n + r);
    bench("prefill " + std::to_string(n) + " rows to T=" + std::to_string(T), s, p);
  }

  std::printf("\n| shape | kernel | rows | time (µs) | MB moved | GFLOP | bound (µs) | of bound |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : table_rows)
    std::printf("| %s | %s | %lld | %.1f | %.2f | %.2f | %.1f | %.0f%% |\n", r.shape.c_str(), r.kernel.c_str(),
                static_cast<long long>(r.rows), r.us, r.bytes / 1e6, r.flops / 1e9, r.bound_us,
                100.0 * r.bound_us / r.us);
  return 0;
}
