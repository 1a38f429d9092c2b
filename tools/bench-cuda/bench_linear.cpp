// flashtier-bench-linear: speed of the dense fp16 linears (ops/linear.h) and of the dense MoE
// layer (ops/moe.h) against what the card can do, measured in the same run:
//   * HBM read bandwidth: a read-only kernel over 4 GiB of rotating 512 MiB buffers (16-byte
//     loads that do not allocate in L1), and a device-to-device copy;
//   * cuBLASLt bf16 GEMM (tools/bench-cuda/cublas_ref.h, "n/a" where it cannot be loaded);
//   * per shape × rows: median time per call (CUDA graph replays of several calls, weights
//     rotated over enough copies that decode-shaped calls never read them from L2), GB/s and
//     % of HBM read bandwidth for small rows, TFLOP/s and % of cuBLAS at the same shape for
//     large rows;
//   * the dense MoE layer (8 experts × top-8, D 4096, I 2048: dispatch + experts + combine) at
//     1, 2, 4, 8 tokens against its HBM bound (all 8 experts' 384 MB read once).
// Flags: --quick (fewer shapes and rows). Uses < 20 GB of device memory. Compiled as CUDA.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/ops/linear.h"
#include "gpu-worker/backends/cuda/ops/linear_f16_wgmma.h"
#include "gpu-worker/backends/cuda/ops/moe.h"
#include "tools/bench-cuda/cublas_ref.h"
#include "tools/bench-cuda/graph_timer.h"

namespace {

using namespace ft::cuda;

__global__ void fill_half(__half* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2half_rn(static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
  }
}
__global__ void fill_float(float* p, size_t n, float v) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = v;
}

// Reads n16 16-byte vectors once (four independent loads in flight per thread and step).
__global__ void __launch_bounds__(1024) read_kernel(const uint4* p, size_t n16, uint32_t* sink) {
  uint32_t acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint32_t v[16];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(v[4 * k]), "=r"(v[4 * k + 1]), "=r"(v[4 * k + 2]), "=r"(v[4 * k + 3])
                   : "l"(p + i + k * stride));
#pragma unroll
    for (int k = 0; k < 16; ++k) acc ^= v[k];
  }
  for (; i < n16; i += stride) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // keeps the loads alive
}

void fill(__half* p, size_t n, uint32_t seed) {
  fill_half<<<1024, 256>>>(p, n, seed);
  FT_CUDA_CHECK_LAUNCH();
}
void fill(float* p, size_t n, float v) {
  fill_float<<<1024, 256>>>(p, n, v);
  FT_CUDA_CHECK_LAUNCH();
}

template <class T>
T* dalloc(size_t n) {
  void* p = nullptr;
  FT_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  return static_cast<T*>(p);
}

// Calls per graph so one replay takes ~3 ms (≥ 1, ≤ 64), from one eager timed call.
int calls_per_graph(const std::function<void(int, cudaStream_t)>& call, int n_distinct, cudaStream_t s) {
  for (int i = 0; i < n_distinct; ++i) call(i, s);  // first calls: kernel attributes, caches
  cudaEvent_t e0, e1;
  FT_CUDA_CHECK(cudaEventCreate(&e0));
  FT_CUDA_CHECK(cudaEventCreate(&e1));
  FT_CUDA_CHECK(cudaEventRecord(e0, s));
  call(0, s);
  FT_CUDA_CHECK(cudaEventRecord(e1, s));
  FT_CUDA_CHECK(cudaEventSynchronize(e1));
  float t = 0;
  FT_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return std::clamp(static_cast<int>(3.0 / std::max(t, 1e-3f)), 1, 64);
}

struct Bandwidth {
  double read_gbs = 0, copy_gbs = 0;
};
Bandwidth measure_hbm(cudaStream_t s) {
  constexpr int kBufs = 8;
  constexpr size_t kBytes = size_t{512} << 20;
  std::vector<uint4*> buf(kBufs);
  for (auto& b : buf) {
    b = dalloc<uint4>(kBytes / 16);
    FT_CUDA_CHECK(cudaMemsetAsync(b, 1, kBytes, s));
  }
  uint32_t* sink = dalloc<uint32_t>(1);
  int sms = 0, dev = 0;
  FT_CUDA_CHECK(cudaGetDevice(&dev));
  FT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  auto read = [&](int i, cudaStream_t st) {
    read_kernel<<<2 * sms, 1024, 0, st>>>(buf[i % kBufs], kBytes / 16, sink);
    FT_CUDA_CHECK_LAUNCH();
  };
  read(0, s);
  Bandwidth bw;
  bw.read_gbs = kBytes / (bench::graph_ms_per_call(read, kBufs, 5, s) * 1e-3) / 1e9;
  auto copy = [&](int i, cudaStream_t st) {
    FT_CUDA_CHECK(cudaMemcpyAsync(buf[(i + 1) % kBufs], buf[i % kBufs], kBytes, cudaMemcpyDeviceToDevice, st));
  };
  copy(0, s);
  bw.copy_gbs = 2.0 * kBytes / (bench::graph_ms_per_call(copy, kBufs - 1, 5, s) * 1e-3) / 1e9;
  for (auto b : buf) cudaFree(b);
  cudaFree(sink);
  return bw;
}

struct Row {
  std::string what;
  int64_t rows = 0;
  double us = 0, gbs = 0, hbm_pct = 0, tflops = 0, cublas_pct = -1;
  std::string note;
};

void bench_shape(int64_t out, int64_t in, const std::vector<int64_t>& row_counts, const Bandwidth& bw, cudaStream_t s,
                 std::vector<Row>& table) {
  const int64_t in8 = (in + 7) / 8 * 8;
  const size_t wbytes = static_cast<size_t>(out * in8) * 2;
  const int sets = static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / wbytes + 1, 1, 8));
  std::vector<__half*> w(sets);
  for (int i = 0; i < sets; ++i) {
    w[i] = dalloc<__half>(out * in8);
    fill(w[i], out * in8, 17 + i);
  }
  const int64_t max_rows = bench::max_or(row_counts, 1);
  __half* xh = dalloc<__half>(max_rows * in8);
  fill(xh, max_rows * in8, 5);
  float* rs = dalloc<float>(max_rows);
  fill(rs, max_rows, 1.0f);
  int64_t y_rows = 0;  // the most rows whose output fits in 4 GiB
  for (int64_t r : row_counts)
    if (r * out * 4 <= (int64_t{4} << 30)) y_rows = std::max(y_rows, r);
  float* y = dalloc<float>(y_rows * out);
  LinearF16 L;
  L.out = out;
  L.in = in;
  L.w_scale = 1.0f;
  L.k_chunk = linear_k_chunk(in, out);
  const std::string shape = std::to_string(out) + "x" + std::to_string(in);
  for (int64_t rows : row_counts) {
    Row row;
    row.what = shape;
    row.rows = rows;
    if (rows > y_rows) {
      row.note = "skipped: output > 4 GiB";
      table.push_back(row);
      std::printf("%-12s rows %5lld  skipped (output > 4 GiB)\n", shape.c_str(), static_cast<long long>(rows));
      continue;
    }
    auto call = [&](int i, cudaStream_t st) {
      LinearF16 Li = L;
      Li.w = w[i % sets];
      linear_f16(Li, xh, in8, rs, rows, y, out, st);
    };
    const int per = calls_per_graph(call, sets, s);
    const double ms = bench::graph_ms_per_call(call, std::max(per, sets), rows >= 2048 ? 5 : 11, s);
    const double bytes = static_cast<double>(wbytes) + rows * in8 * 2.0 + rows * out * 4.0;
    row.us = ms * 1e3;
    row.gbs = bytes / (ms * 1e-3) / 1e9;
    row.hbm_pct = 100.0 * row.gbs / bw.read_gbs;
    row.tflops = 2.0 * rows * out * in / (ms * 1e-3) / 1e12;
    if (rows >= 512) {
      const double ref = ft::bench::cublaslt_gemm_ms(rows, out, in, rows >= 2048 ? 5 : 11);
      if (ref > 0) row.cublas_pct = 100.0 * ref / ms;
    }
    std::printf("%-12s rows %5lld  %10.2f us  %8.1f GB/s (%5.1f%% HBM)  %7.1f TFLOP/s", shape.c_str(),
                static_cast<long long>(rows), row.us, row.gbs, row.hbm_pct, row.tflops);
    if (row.cublas_pct >= 0) std::printf("  (%5.1f%% of cuBLAS)", row.cublas_pct);
    std::printf("\n");
    std::fflush(stdout);
    table.push_back(row);
  }
  for (auto p : w) cudaFree(p);
  cudaFree(xh);
  cudaFree(rs);
  cudaFree(y);
}

// 8 experts × top-8 at D 4096, I 2048: every token routes to every expert (all active, as in
// the bf16 benchmark model's decode), two copies of the experts rotated. Prefill-sized rows run
// the sorted-row form where this device has it (FLASHTIER_MOE_SORTED=off: the gathered form).
void bench_moe(const std::vector<int64_t>& tokens, const Bandwidth& bw, cudaStream_t s, std::vector<Row>& table) {
  constexpr int E = 8, top_k = 8;
  constexpr int64_t D = 4096, I = 2048;
  constexpr int sets = 2;
  const int64_t max_n = bench::max_or(tokens, 1);
  std::vector<DenseExpert*> experts(sets);
  std::vector<DenseExpertMaps*> maps(sets, nullptr);
  std::vector<__half*> wmem(sets);
  const size_t per_expert = 3 * static_cast<size_t>(I * D);
  for (int si = 0; si < sets; ++si) {
    wmem[si] = dalloc<__half>(E * per_expert);
    fill(wmem[si], E * per_expert, 100 + si);
    std::vector<DenseExpert> host(E);
    for (int e = 0; e < E; ++e) {
      __half* base = wmem[si] + e * per_expert;
      auto lin = [&](const __half* p, int64_t out, int64_t in) {
        LinearF16 L;
        L.out = out;
        L.in = in;
        L.w = p;
        L.w_scale = 1.0f / 64;
        L.k_chunk = linear_k_chunk(in, out);
        return L;
      };
      host[e] = DenseExpert{lin(base, I, D), lin(base + I * D, I, D), lin(base + 2 * I * D, D, I)};
    }
    experts[si] = dalloc<DenseExpert>(E);
    FT_CUDA_CHECK(cudaMemcpy(experts[si], host.data(), sizeof(DenseExpert) * E, cudaMemcpyHostToDevice));
    std::vector<DenseExpertMaps> hm(E);
    bool ok = lin::grouped_sorted_wgmma();
    for (int e = 0; ok && e < E; ++e) ok = moe_dense_expert_maps(host[e], hm[e]);
    if (ok) {
      maps[si] = dalloc<DenseExpertMaps>(E);
      FT_CUDA_CHECK(cudaMemcpy(maps[si], hm.data(), sizeof(DenseExpertMaps) * E, cudaMemcpyHostToDevice));
    }
  }
  std::vector<int32_t> hexp(max_n * top_k);
  std::vector<float> hw(max_n * top_k, 1.0f / top_k);
  for (int64_t p = 0; p < max_n * top_k; ++p) hexp[p] = static_cast<int32_t>(p % top_k);
  int32_t* dexp = dalloc<int32_t>(hexp.size());
  float* dw = dalloc<float>(hw.size());
  FT_CUDA_CHECK(cudaMemcpy(dexp, hexp.data(), hexp.size() * 4, cudaMemcpyHostToDevice));
  FT_CUDA_CHECK(cudaMemcpy(dw, hw.data(), hw.size() * 4, cudaMemcpyHostToDevice));
  const MoeDispatchSizes sz = moe_dispatch_sizes(max_n, top_k, E);
  MoeDispatch d{dalloc<int32_t>(sz.offsets), dalloc<int32_t>(sz.sorted_pick), dalloc<int32_t>(sz.active),
                dalloc<int32_t>(sz.n_active)};
  float* x = dalloc<float>(max_n * D);
  fill(x, max_n * D, 0.5f);
  float* Y = dalloc<float>(max_n * top_k * D);
  float* out = dalloc<float>(max_n * D);
  void* ws = dalloc<uint8_t>(moe_dense_workspace_bytes(max_n, top_k, D, I, maps[0] != nullptr));
  const double bound_bytes = static_cast<double>(E) * per_expert * 2;
  for (int64_t n : tokens) {
    const MoeRoutes r{dexp, dw, n, top_k};
    auto call = [&](int i, cudaStream_t st) {
      moe_dispatch(r, E, d, st);
      moe_dense_experts(experts[i % sets], r, d, x, D, D, I, 10.0f, Y, ws, st, maps[i % sets]);
      moe_combine(Y, dw, n, top_k, D, out, D, LinearStore::Overwrite, st);
    };
    const int per = calls_per_graph(call, sets, s);
    const double ms = bench::graph_ms_per_call(call, std::max(per, sets), 11, s);
    Row row;
    row.what = "MoE 8x(3x2048x4096)";
    row.rows = n;
    row.us = ms * 1e3;
    row.gbs = bound_bytes / (ms * 1e-3) / 1e9;
    row.hbm_pct = 100.0 * row.gbs / bw.read_gbs;
    row.tflops = 2.0 * n * top_k * 3.0 * I * D / (ms * 1e-3) / 1e12;
    row.note = "bound " + std::to_string(static_cast<int>(bound_bytes / (bw.read_gbs * 1e9) * 1e6)) + " us";
    std::printf("%-20s tokens %4lld  %9.2f us  %8.1f GB/s (%5.1f%% HBM; %s)  %7.1f TFLOP/s\n", row.what.c_str(),
                static_cast<long long>(n), row.us, row.gbs, row.hbm_pct, row.note.c_str(), row.tflops);
    std::fflush(stdout);
    table.push_back(row);
  }
  for (int si = 0; si < sets; ++si) {
    cudaFree(wmem[si]);
    cudaFree(experts[si]);
    cudaFree(maps[si]);
  }
  cudaFree(dexp);
  cudaFree(dw);
  cudaFree(d.offsets);
  cudaFree(d.sorted_pick);
  cudaFree(d.active);
  cudaFree(d.n_active);
  cudaFree(x);
  cudaFree(Y);
  cudaFree(out);
  cudaFree(ws);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
      return 2;
    }
  }
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::fprintf(stderr, "flashtier-bench-linear: no CUDA device\n");
    return 1;
  }
  try {
    cudaDeviceProp prop{};
    FT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s (sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB)\n", prop.name, prop.major, prop.minor,
                prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0, prop.l2CacheSize >> 20);
    cudaStream_t s;
    FT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const Bandwidth bw = measure_hbm(s);
    std::printf("HBM read %.1f GB/s, device-to-device copy %.1f GB/s (read + write)\n", bw.read_gbs, bw.copy_gbs);
    std::string why;
    const bool have_cublas = ft::bench::cublaslt_available(&why);
    double cublas_tflops = -1;
    if (have_cublas) {
      const double ms = ft::bench::cublaslt_gemm_ms(8192, 8192, 8192, 7);
      if (ms > 0) cublas_tflops = 2.0 * 8192.0 * 8192.0 * 8192.0 / (ms * 1e-3) / 1e12;
    }
    if (cublas_tflops > 0) std::printf("cuBLASLt bf16 8192^3: %.1f TFLOP/s\n", cublas_tflops);
    else std::printf("cuBLASLt bf16: n/a (%s)\n", have_cublas ? "GEMM failed" : why.c_str());

    struct Shape {
      int64_t out, in;
    };
    std::vector<Shape> shapes = {{4096, 4096}, {12288, 4096}, {4096, 12288}, {2048, 4096},
                                 {4096, 2048}, {8192, 4096},  {4096, 8192},  {154880, 4096}};
    std::vector<int64_t> rows = {1, 2, 4, 8, 16, 32, 512, 2048, 8192};
    if (quick) {
      shapes = {{4096, 4096}, {12288, 4096}, {154880, 4096}};
      rows = {1, 8, 32, 2048};
    }
    std::vector<Row> table;
    for (const Shape& sh : shapes) bench_shape(sh.out, sh.in, rows, bw, s, table);
    bench_moe(quick ? std::vector<int64_t>{1, 8} : std::vector<int64_t>{1, 2, 4, 8, 2048}, bw, s, table);

    std::printf("\n| shape | rows | µs | GB/s | %% HBM read | TFLOP/s | %% cuBLAS bf16 | note |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|---|\n");
    for (const Row& r : table) {
      if (r.us == 0) {
        std::printf("| %s | %lld | | | | | | %s |\n", r.what.c_str(), static_cast<long long>(r.rows), r.note.c_str());
        continue;
      }
      char cub[32] = "";
      if (r.cublas_pct >= 0) std::snprintf(cub, sizeof cub, "%.1f", r.cublas_pct);
      else if (r.rows >= 512 && r.what.rfind("MoE", 0) != 0) std::snprintf(cub, sizeof cub, "n/a");
      std::printf("| %s | %lld | %.2f | %.1f | %.1f | %.1f | %s | %s |\n", r.what.c_str(),
                  static_cast<long long>(r.rows), r.us, r.gbs, r.hbm_pct, r.tflops, cub, r.note.c_str());
    }
    std::printf("\nHBM read %.1f GB/s (copy %.1f GB/s); cuBLASLt bf16 8192^3 %s\n", bw.read_gbs, bw.copy_gbs,
                cublas_tflops > 0 ? (std::to_string(static_cast<int>(cublas_tflops)) + " TFLOP/s").c_str() : "n/a");
    cudaStreamDestroy(s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashtier-bench-linear: %s\n", e.what());
    return 1;
  }
  return 0;
}
