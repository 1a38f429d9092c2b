// EXL3 linears (exl3_linear.h): the input transform kernel, the workspace, and the choice of
// skinny-kernel instantiation. The kernels live in gemv_kernel.cuh / transform.cuh.
#include <algorithm>
#include <string>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/exl3/exl3_linear.h"
#include "gpu-worker/backends/cuda/exl3/gemm_kernel.cuh"
#include "gpu-worker/backends/cuda/exl3/gemv_kernel.cuh"
#include "gpu-worker/backends/cuda/exl3/launch_util.h"
#include "gpu-worker/backends/cuda/exl3/transform.cuh"
#include "gpu-worker/backends/cuda/exl3/wgmma_prefill.h"
#include "shared/core/error.h"

namespace ft::cuda {
namespace {

using namespace exl3dev;

__global__ void __launch_bounds__(kTransformMaxThreads)
    linear_input_kernel(const float* x, int64_t ld_x, int64_t in, const __half* suh, int64_t in_p, __half* xh,
                        float* row_scale) {
  grid_dependents_launch();  // the linear kernel may start its trellis copies now
  const int64_t r = blockIdx.x;
  const float* row = x + r * ld_x;
  transform_row([&](int64_t c) { return c < in ? row[c] : 0.0f; }, suh, in_p, xh + r * in_p, row_scale + r);
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// Split K only where the output blocks alone cannot fill the GPU: fewer than this many blocks.
// It also bounds the counters, whose region is therefore the same for every linear and batch:
// a workspace is shared by all the linears of a stream, and a counter that fell on another
// linear's row scales or activations (non-zero) would never see its last chunk — the output
// block would be left unwritten (MLA q_b at the real widths, 128 blocks, after q_a's 12).
constexpr int64_t kSplitMaxItems = 256;

struct WsLayout {
  size_t counters = 0, row_scale = 0, xh = 0, partials = 0, total = 0;
};
WsLayout ws_layout(const Exl3LinearDev& L, int64_t rows) {
  WsLayout w;
  const int64_t chunks = L.in_p / L.k_chunk;
  w.counters = 0;
  w.row_scale = align256(static_cast<size_t>(kSplitMaxItems) * sizeof(int));
  w.xh = w.row_scale + align256(static_cast<size_t>(rows) * sizeof(float));
  w.partials = w.xh + align256(static_cast<size_t>(rows * L.in_p) * sizeof(__half));
  const int64_t split_rows = std::min<int64_t>(rows, 32);
  w.total = w.partials + align256(static_cast<size_t>(chunks * split_rows * L.out_p) * sizeof(float));
  return w;
}

void check_linear(const Exl3LinearDev& L) {
  if (L.K < 1 || L.K > 8 || L.in_p <= 0 || L.out_p <= 0 || L.in_p % 128 || L.out_p % 128 || L.in > L.in_p ||
      L.out > L.out_p || L.k_chunk <= 0 || L.in_p % L.k_chunk || !L.trellis || !L.suh || !L.svh)
    throw Error("exl3_linear: bad linear description (K " + std::to_string(L.K) + ", " + std::to_string(L.in) + "→" +
                std::to_string(L.out) + ", padded " + std::to_string(L.in_p) + "×" + std::to_string(L.out_p) +
                ", KC " + std::to_string(L.k_chunk) + ")");
}

void launch_gemv_k(int K, int cb, const GemvLaunch& l, const LinearArgs& a, cudaStream_t s) {
  exl3dev::dispatch_k(K, [&](auto k) { launch_gemv<decltype(k)::value>(cb, l, a, s); });
}

}  // namespace

void exl3_set_programmatic_launch(Exl3Programmatic policy) { exl3dev::set_programmatic_launch(static_cast<int>(policy)); }
Exl3Programmatic exl3_programmatic_launch() {
  return static_cast<Exl3Programmatic>(exl3dev::programmatic_launch_policy());
}
void exl3_set_wide_prefill(Exl3Wide policy) { exl3dev::set_wide_prefill(static_cast<int>(policy)); }
Exl3Wide exl3_wide_prefill() { return static_cast<Exl3Wide>(exl3dev::wide_prefill_policy()); }
bool exl3_wide_prefill_pays(int64_t out_p, int64_t rows, int sms) {
  // Both shapes take 128 rows per CTA; a wide CTA covers two 128-column blocks and is one per SM
  // like a narrow one. Time ∝ waves × work per CTA: wide 2/1.08 per wave, narrow 1.
  const int64_t row_blocks = (rows + 127) / 128, blocks = (out_p + 127) / 128;
  const int64_t narrow = blocks * row_blocks, wide = (blocks + 1) / 2 * row_blocks;
  const int64_t s = sms > 0 ? sms : 1;
  return 200 * ((wide + s - 1) / s) < 108 * ((narrow + s - 1) / s);
}
bool exl3_wide_prefill_fits(int K) {
  return exl3dev::dispatch_k(K, [](auto k) { return exl3dev::gemm_wide_fits<decltype(k)::value>(); });
}
uint64_t exl3_wide_prefill_launches() { return exl3dev::wide_launches(); }
void exl3_set_wgmma_prefill(Exl3Wgmma policy) { exl3dev::set_wgmma_prefill(static_cast<int>(policy)); }
Exl3Wgmma exl3_wgmma_policy() { return static_cast<Exl3Wgmma>(exl3dev::wgmma_prefill_policy()); }
bool exl3_wgmma_prefill() { return exl3dev::wgmma_prefill(); }
uint64_t exl3_wgmma_prefill_launches() { return exl3dev::wgmma_prefill_launches(); }

int exl3_k_chunk(int64_t in_p, int64_t out_p) {
  if (in_p <= 0 || out_p <= 0 || in_p % 128 || out_p % 128)
    throw Error("exl3_k_chunk: padded sizes " + std::to_string(in_p) + "×" + std::to_string(out_p) +
                " are not positive multiples of 128");
  const int64_t nblk = out_p / 128;
  int64_t kc = 128;
  while (in_p % (2 * kc) == 0 && nblk * (in_p / (2 * kc)) >= 256) kc *= 2;
  return static_cast<int>(kc);
}

Exl3LinearDev exl3_linear_view(int K, ft::exl3::Codebook cb, int64_t in, int64_t out, const uint32_t* trellis,
                               const __half* suh, const __half* svh, const float* bias) {
  Exl3LinearDev d;
  d.K = K;
  d.codebook = cb;
  d.in = in;
  d.out = out;
  d.in_p = ft::exl3::pad128(in);
  d.out_p = ft::exl3::pad128(out);
  d.trellis = trellis;
  d.suh = suh;
  d.svh = svh;
  d.bias = bias;
  d.k_chunk = exl3_k_chunk(d.in_p, d.out_p);
  check_linear(d);
  return d;
}

Exl3LinearWorkspaceLayout exl3_linear_workspace_layout(const Exl3LinearDev& L, int64_t rows) {
  check_linear(L);
  const WsLayout w = ws_layout(L, std::max<int64_t>(rows, 1));
  return {w.row_scale, w.row_scale, w.xh, w.partials, w.total};
}

size_t exl3_linear_workspace_bytes(const Exl3LinearDev& L, int64_t max_rows) {
  check_linear(L);
  return ws_layout(L, std::max<int64_t>(max_rows, 1)).total;
}

void exl3_linear_workspace_init(void* workspace, size_t bytes, cudaStream_t stream) {
  FT_CUDA_CHECK(cudaMemsetAsync(workspace, 0, bytes, stream));
}

void exl3_input_transform(const float* x, int64_t ld_x, int64_t rows, int64_t in, const __half* suh, int64_t in_p,
                          __half* xh, float* row_scale, cudaStream_t stream) {
  if (rows <= 0) return;
  if (in > in_p || in_p % 128 || rows > 0x7fffffff) throw Error("exl3_input_transform: bad sizes");
  linear_input_kernel<<<static_cast<unsigned>(rows), transform_threads(in_p), 0, stream>>>(x, ld_x, in, suh, in_p,
                                                                                         xh, row_scale);
  FT_CUDA_CHECK_LAUNCH();
}

void exl3_matmul_transformed(const Exl3LinearDev& L, const __half* xh, const float* row_scale, int64_t rows,
                             float* y, int64_t ld_y, void* workspace, cudaStream_t stream, LinearStore store) {
  check_linear(L);
  if (rows <= 0) return;
  const WsLayout w = ws_layout(L, rows);
  LinearArgs a;
  a.trellis = L.trellis;
  a.svh = L.svh;
  a.bias = L.bias;
  a.in_p = L.in_p;
  a.out_p = L.out_p;
  a.out = L.out;
  a.kc_steps = L.k_chunk / 16;
  a.chunks = static_cast<int>(L.in_p / L.k_chunk);
  a.nblk = static_cast<int>(L.out_p / 128);
  a.xh = xh;
  a.row_scale = row_scale;
  a.rows = rows;
  a.y = y;
  a.ld_y = ld_y;
  a.accumulate = store == LinearStore::Accumulate;
  auto* base = static_cast<unsigned char*>(workspace);
  a.counters = reinterpret_cast<int*>(base + w.counters);
  a.partials = reinterpret_cast<float*>(base + w.partials);

  GemvLaunch l;
  l.gemm = rows > 32;  // prefill: each decoded tile serves 128 rows
  l.ngmax = rows <= 8 ? 1 : 4;
  a.nrb = static_cast<int>((rows + 8 * l.ngmax - 1) / (8 * l.ngmax));
  // Split K over CTAs only where the blocks alone cannot fill the GPU (never changes the bits).
  l.split = rows <= 32 && a.chunks > 1 && a.nblk * a.nrb < kSplitMaxItems;
  const int64_t items = static_cast<int64_t>(a.nrb) * a.nblk * (l.split ? a.chunks : 1);
  l.grid = static_cast<int>(std::min<int64_t>(items, 32 * static_cast<int64_t>(exl3dev::sm_count())));
  // Where the device holds it (launch_gemm_one).
  l.wide = l.gemm && exl3dev::wide_requested(exl3_wide_prefill_pays(L.out_p, rows, exl3dev::sm_count()));
  l.programmatic = !l.gemm && exl3dev::programmatic_launch(rows);
  launch_gemv_k(L.K, static_cast<int>(L.codebook), l, a, stream);
}

void exl3_linear(const Exl3LinearDev& L, const float* x, int64_t ld_x, int64_t rows, float* y, int64_t ld_y,
                 void* workspace, cudaStream_t stream, LinearStore store) {
  check_linear(L);
  if (rows <= 0) return;
  const WsLayout w = ws_layout(L, rows);
  auto* base = static_cast<unsigned char*>(workspace);
  auto* xh = reinterpret_cast<__half*>(base + w.xh);
  auto* rs = reinterpret_cast<float*>(base + w.row_scale);
  exl3_input_transform(x, ld_x, rows, L.in, L.suh, L.in_p, xh, rs, stream);
  exl3_matmul_transformed(L, xh, rs, rows, y, ld_y, workspace, stream, store);
}

}  // namespace ft::cuda
