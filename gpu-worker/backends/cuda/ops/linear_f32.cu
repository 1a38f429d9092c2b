// linear_f32 (ops/linear.h): fp32 SIMT linears for small `out` (router, mHC mixing logits,
// indexer head weights), W fp32 or bf16 (widened exactly).
//
// Summation order for every (row, output), a function of `in` only:
//   segment s = k ∈ [64 s, 64 s + 64) ∩ [0, in):  p_s = fma chain over k ascending, from 0;
//   block j   = segments [16 j, 16 j + 16):        b_j = 0 + p_16j + p_16j+1 + …;
//   y         = 0 + b_0 + b_1 + …
// Two kernels follow it:
//   * decode (≤ 8 rows): one thread per (output, segment) for all rows, so K is spread over the
//     whole GPU; a block folds its segments into block sums; the blocks of one output group
//     form a thread-block cluster on sm_90 (rank 0 folds the block sums through distributed
//     shared memory), or one block holds all of K elsewhere;
//   * tiled (more rows): 64 rows × 64 outputs per block, 64-wide k tiles (= segments) through
//     shared memory, 4×4 outputs per thread with a chain, a block sum and a total per output.
//     Where the tiles alone leave most SMs idle (few rows, few outputs: the mHC mixing logits
//     are 24 outputs over K = 16,384) and the caller lends a workspace, every 1024-wide block j
//     is its own CTA (the same loop over its 16 segments), b_j goes to the workspace, and a fold
//     kernel adds 0 + b_0 + b_1 + … in order: the same bits, K spread over the GPU.
// Padding k past `in` with zeros never changes a sum (the chains start at +0, so they never
// hold −0), so both kernels give the same bits.
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/programmatic.cuh"
#include "gpu-worker/backends/cuda/ops/linear.h"
#include "gpu-worker/backends/cuda/ops/linear_launch.h"
#include "shared/core/error.h"

namespace ft::cuda {
namespace {

constexpr int kSeg = 64;           // k per segment
constexpr int kSegsPerBlock = 16;  // segments per block sum
constexpr int kDecodeRows = 8;     // rows of the decode kernel
constexpr int kMaxCluster = 8;     // portable cluster size

__device__ __forceinline__ float bf16_to_f32(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

template <bool BF16>
__device__ __forceinline__ float weight_at(const void* w, int64_t i) {
  if constexpr (BF16) return bf16_to_f32(static_cast<const uint16_t*>(w)[i]);
  else return static_cast<const float*>(w)[i];
}

// The stored value of output n: t (+ bias[n]), then (accumulate) y + that — linear_value's order.
__device__ __forceinline__ void store_out(float* y, int64_t n, float t, const float* bias, bool accumulate) {
  if (bias) t = __fadd_rn(t, bias[n]);
  *y = accumulate ? __fadd_rn(*y, t) : t;
}

struct DecodeArgs {
  const void* w;
  const float* bias;
  bool accumulate;
  const float* x;
  int64_t ld_x;
  int rows;
  float* y;
  int64_t ld_y;
  int64_t out, in;
  int segs, blocks;  // S = ⌈in / 64⌉, NB = ⌈S / 16⌉
  int no;            // outputs per CTA
  int bpc;           // blocks (of 16 segments) per CTA
  int cs;            // CTAs per cluster along K
};

// p_s for all rows of one (output n, segment s).
template <bool BF16, bool VEC>
__device__ __forceinline__ void segment_partials(const DecodeArgs& a, int64_t n, int s, float (&acc)[kDecodeRows]) {
#pragma unroll
  for (int r = 0; r < kDecodeRows; ++r) acc[r] = 0.0f;
  const int64_t k0 = static_cast<int64_t>(s) * kSeg;
  const int len = a.in - k0 < kSeg ? static_cast<int>(a.in - k0) : kSeg;
  const float* xs = a.x + k0;
  if (VEC && len == kSeg) {
    float w[kSeg];
    if constexpr (BF16) {
      const uint4* src = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(a.w) + n * a.in + k0);
#pragma unroll
      for (int i = 0; i < kSeg / 8; ++i) {
        const uint4 q = __ldg(src + i);
        const uint32_t v[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          w[8 * i + 2 * j] = __uint_as_float(v[j] << 16);
          w[8 * i + 2 * j + 1] = __uint_as_float(v[j] & 0xffff0000u);
        }
      }
    } else {
      const float4* src = reinterpret_cast<const float4*>(static_cast<const float*>(a.w) + n * a.in + k0);
#pragma unroll
      for (int i = 0; i < kSeg / 4; ++i) {
        const float4 q = __ldg(src + i);
        w[4 * i] = q.x, w[4 * i + 1] = q.y, w[4 * i + 2] = q.z, w[4 * i + 3] = q.w;
      }
    }
#pragma unroll
    for (int r = 0; r < kDecodeRows; ++r) {
      if (r < a.rows) {
        const float4* xr = reinterpret_cast<const float4*>(xs + r * a.ld_x);
#pragma unroll
        for (int i = 0; i < kSeg / 4; ++i) {
          const float4 v = xr[i];
          acc[r] = __fmaf_rn(v.x, w[4 * i], acc[r]);
          acc[r] = __fmaf_rn(v.y, w[4 * i + 1], acc[r]);
          acc[r] = __fmaf_rn(v.z, w[4 * i + 2], acc[r]);
          acc[r] = __fmaf_rn(v.w, w[4 * i + 3], acc[r]);
        }
      }
    }
  } else {
    for (int kk = 0; kk < len; ++kk) {
      const float wv = weight_at<BF16>(a.w, n * a.in + k0 + kk);
#pragma unroll
      for (int r = 0; r < kDecodeRows; ++r)
        if (r < a.rows) acc[r] = __fmaf_rn(xs[r * a.ld_x + kk], wv, acc[r]);
    }
  }
}

// Block (gx, q): outputs [gx·no, +no), K blocks [q·bpc, +bpc). Shared memory: part[no][bpc·16][8]
// (segment partials), then bsum[no][bpc][8] (block sums).
template <bool BF16, bool VEC, bool CLUSTER>
__global__ void __launch_bounds__(256) linear_f32_decode_kernel(const DecodeArgs a) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained or launch_decode
  extern __shared__ float dsm[];
  const int spc = a.bpc * kSegsPerBlock;
  float* part = dsm;
  float* bsum = dsm + static_cast<int64_t>(a.no) * spc * kDecodeRows;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * a.no;
  const int q = blockIdx.y;
  const int s_base = q * spc;

  for (int task = threadIdx.x; task < a.no * spc; task += blockDim.x) {
    const int nl = task / spc, sl = task % spc;
    const int64_t n = n0 + nl;
    const int s = s_base + sl;
    float acc[kDecodeRows] = {};
    if (n < a.out && s < a.segs) segment_partials<BF16, VEC>(a, n, s, acc);
#pragma unroll
    for (int r = 0; r < kDecodeRows; ++r) part[(static_cast<int64_t>(task)) * kDecodeRows + r] = acc[r];
  }
  __syncthreads();
  for (int task = threadIdx.x; task < a.no * a.bpc * kDecodeRows; task += blockDim.x) {
    const int r = task % kDecodeRows, rest = task / kDecodeRows;
    const int bl = rest % a.bpc, nl = rest / a.bpc;
    float b = 0.0f;
    for (int i = 0; i < kSegsPerBlock; ++i) {
      const int sl = bl * kSegsPerBlock + i;
      if (s_base + sl >= a.segs) break;
      b = __fadd_rn(b, part[(static_cast<int64_t>(nl) * spc + sl) * kDecodeRows + r]);
    }
    bsum[task] = b;  // task = (nl·bpc + bl)·8 + r
  }

  if constexpr (CLUSTER) {
#if __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    if (cluster.block_rank() == 0) {
      for (int task = threadIdx.x; task < a.no * a.rows; task += blockDim.x) {
        const int nl = task / a.rows, r = task % a.rows;
        const int64_t n = n0 + nl;
        if (n >= a.out) continue;
        float t = 0.0f;
        for (int j = 0; j < a.blocks; ++j) {
          const float* src = cluster.map_shared_rank(bsum, j / a.bpc);
          t = __fadd_rn(t, src[(nl * a.bpc + j % a.bpc) * kDecodeRows + r]);
        }
        store_out(a.y + r * a.ld_y + n, n, t, a.bias, a.accumulate);
      }
    }
    cluster.sync();  // the other blocks' shared memory stays alive until rank 0 has read it
#else
    __trap();  // launched only on sm_90+
#endif
  } else {
    __syncthreads();
    for (int task = threadIdx.x; task < a.no * a.rows; task += blockDim.x) {
      const int nl = task / a.rows, r = task % a.rows;
      const int64_t n = n0 + nl;
      if (n >= a.out) continue;
      float t = 0.0f;
      for (int j = 0; j < a.blocks; ++j) t = __fadd_rn(t, bsum[(nl * a.bpc + j) * kDecodeRows + r]);
      store_out(a.y + r * a.ld_y + n, n, t, a.bias, a.accumulate);
    }
  }
}

// Tiled: block (gx, gy) computes rows [64 gy, +64) × outputs [64 gx, +64); thread (tr, tn) =
// (tid / 16, tid % 16) owns rows 4 tr…, outputs 4 tn…. Tiles are stored k-major (xs[k][row],
// ws[k][out]) so each k step is two float4 shared loads for 16 FMAs.
constexpr int kTile = 64;
constexpr int kTilePad = kTile + 4;  // keeps float4 alignment of xs[k][4 tr]

struct TiledArgs {
  const void* w;
  const float* bias;
  bool accumulate;
  const float* x;
  int64_t ld_x, rows;
  float* y;
  int64_t ld_y;
  int64_t out, in;
  int segs;
  float* part;  // split over K: block sums [blocks][rows][out] (blockIdx.z = block); else null
};

template <bool BF16, bool VEC>
__global__ void __launch_bounds__(256) linear_f32_tiled_kernel(const TiledArgs a) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained or launch_decode
  __shared__ __align__(16) float xs[kSeg][kTilePad];
  __shared__ __align__(16) float ws[kSeg][kTilePad];
  const int tid = threadIdx.x, tr = tid >> 4, tn = tid & 15;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile, n0 = static_cast<int64_t>(blockIdx.x) * kTile;
  // Loader: row (or output) tid % 64, k quad (tid / 64) + 4 i.
  const int lr = tid & 63, lq = tid >> 6;
  const bool xrow_ok = r0 + lr < a.rows, wrow_ok = n0 + lr < a.out;
  const float* xrow = a.x + (xrow_ok ? (r0 + lr) * a.ld_x : 0);
  const int64_t wrow = (wrow_ok ? n0 + lr : 0) * a.in;

  float xv[4][4], wv[4][4];
  auto fetch = [&](int s) {
    const int64_t k0 = static_cast<int64_t>(s) * kSeg;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t k = k0 + 4 * (lq + 4 * i);
      if (VEC && k + 4 <= a.in) {
        if (xrow_ok) {
          const float4 v = *reinterpret_cast<const float4*>(xrow + k);
          xv[i][0] = v.x, xv[i][1] = v.y, xv[i][2] = v.z, xv[i][3] = v.w;
        } else {
          xv[i][0] = xv[i][1] = xv[i][2] = xv[i][3] = 0.0f;
        }
        if (wrow_ok) {
          if constexpr (BF16) {
            const uint2 v = __ldg(reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(a.w) + wrow + k));
            wv[i][0] = __uint_as_float(v.x << 16), wv[i][1] = __uint_as_float(v.x & 0xffff0000u);
            wv[i][2] = __uint_as_float(v.y << 16), wv[i][3] = __uint_as_float(v.y & 0xffff0000u);
          } else {
            const float4 v = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(a.w) + wrow + k));
            wv[i][0] = v.x, wv[i][1] = v.y, wv[i][2] = v.z, wv[i][3] = v.w;
          }
        } else {
          wv[i][0] = wv[i][1] = wv[i][2] = wv[i][3] = 0.0f;
        }
      } else {
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const bool in_k = k + t < a.in;
          xv[i][t] = xrow_ok && in_k ? xrow[k + t] : 0.0f;
          wv[i][t] = wrow_ok && in_k ? weight_at<BF16>(a.w, wrow + k + t) : 0.0f;
        }
      }
    }
  };

  float chain[4][4], blk[4][4], total[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) chain[i][j] = blk[i][j] = total[i][j] = 0.0f;

  // Segments of this CTA: all, or (split) those of block blockIdx.z.
  const int s_begin = a.part ? static_cast<int>(blockIdx.z) * kSegsPerBlock : 0;
  const int s_end = a.part ? min(s_begin + kSegsPerBlock, a.segs) : a.segs;
  fetch(s_begin);
  for (int s = s_begin; s < s_end; ++s) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        xs[4 * (lq + 4 * i) + t][lr] = xv[i][t];
        ws[4 * (lq + 4 * i) + t][lr] = wv[i][t];
      }
    __syncthreads();
    if (s + 1 < s_end) fetch(s + 1);  // in flight during this segment's FMAs
#pragma unroll 16
    for (int k = 0; k < kSeg; ++k) {
      const float4 xa = *reinterpret_cast<const float4*>(&xs[k][4 * tr]);
      const float4 wb = *reinterpret_cast<const float4*>(&ws[k][4 * tn]);
      const float xr[4] = {xa.x, xa.y, xa.z, xa.w}, wc[4] = {wb.x, wb.y, wb.z, wb.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) chain[i][j] = __fmaf_rn(xr[i], wc[j], chain[i][j]);
    }
    __syncthreads();
    const bool block_end = (s + 1) % kSegsPerBlock == 0 || s + 1 == a.segs;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        blk[i][j] = __fadd_rn(blk[i][j], chain[i][j]);
        chain[i][j] = 0.0f;
        if (block_end) {
          total[i][j] = __fadd_rn(total[i][j], blk[i][j]);
          blk[i][j] = 0.0f;
        }
      }
  }
  float* const part = a.part ? a.part + static_cast<int64_t>(blockIdx.z) * a.rows * a.out : nullptr;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t r = r0 + 4 * tr + i;
    if (r >= a.rows) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t n = n0 + 4 * tn + j;
      if (n >= a.out) continue;
      if (part) part[r * a.out + n] = total[i][j];  // 0 + b_j: b_j itself (a chain from +0 is never −0)
      else store_out(a.y + r * a.ld_y + n, n, total[i][j], a.bias, a.accumulate);
    }
  }
}

// The split's fold: y = 0 + b_0 + b_1 + … per (row, output), the tiled kernel's total.
__global__ void __launch_bounds__(256) linear_f32_fold_kernel(const TiledArgs a, int blocks) {
  chain_start();  // core/programmatic.cuh: launched by launch_chained or launch_decode
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.rows * a.out) return;
  const int64_t r = i / a.out, n = i - r * a.out;
  const int64_t stride = a.rows * a.out;
  float t = 0.0f;
  for (int j = 0; j < blocks; ++j) t = __fadd_rn(t, a.part[j * stride + i]);
  store_out(a.y + r * a.ld_y + n, n, t, a.bias, a.accumulate);
}

bool aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

template <bool BF16, bool VEC, bool CLUSTER>
cudaError_t launch_decode(const DecodeArgs& a, int threads, size_t smem, bool early, cudaStream_t stream) {
  auto kernel = linear_f32_decode_kernel<BF16, VEC, CLUSTER>;
  lin::prepare_kernel(reinterpret_cast<const void*>(kernel), threads, smem);
  const dim3 grid(static_cast<unsigned>((a.out + a.no - 1) / a.no), static_cast<unsigned>(a.cs));
  if constexpr (!CLUSTER) {
    if (!early) {
      kernel<<<grid, threads, smem, stream>>>(a);
      return cudaGetLastError();
    }
    cudaLaunchAttribute attr{};
    const cudaLaunchConfig_t cfg = programmatic_config(grid, dim3(static_cast<unsigned>(threads)), smem, stream, &attr);
    return cudaLaunchKernelEx(&cfg, kernel, a);
  } else {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(static_cast<unsigned>(threads));
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = static_cast<unsigned>(a.cs);
    attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = early ? 2 : 1;
    return cudaLaunchKernelEx(&cfg, kernel, a);
  }
}

// early: started early (chain_programmatic, and no stream memory operation ahead: the caller
// takes that mark once, so the cluster fallback below launches the same way).
template <bool BF16, bool VEC>
void run_decode(DecodeArgs a, bool early, cudaStream_t stream) {
  const lin::DeviceLimits& dev = lin::current_device_limits();
  static thread_local bool cluster_failed = false;  // a device that refused a cluster launch once
  const bool cluster = dev.cc_major >= 9 && a.blocks > 1 && !cluster_failed;
  a.cs = cluster ? std::min(kMaxCluster, a.blocks) : 1;
  a.bpc = (a.blocks + a.cs - 1) / a.cs;
  const int spc = a.bpc * kSegsPerBlock;
  // Outputs per block: enough blocks for ~2 per SM, at most 256 (output, segment) tasks.
  const int64_t by_par = std::max<int64_t>(1, a.out * a.cs / (2 * static_cast<int64_t>(dev.sm_count)));
  const int64_t by_tasks = std::max<int64_t>(1, 256 / spc);
  a.no = static_cast<int>(std::min({by_par, by_tasks, a.out}));
  const int threads = static_cast<int>(std::min<int64_t>(256, (static_cast<int64_t>(a.no) * spc + 31) / 32 * 32));
  const size_t smem = static_cast<size_t>(a.no) * (spc + a.bpc) * kDecodeRows * sizeof(float);
  if (a.cs > 1) {
    const cudaError_t e = launch_decode<BF16, VEC, true>(a, threads, smem, early, stream);
    if (e == cudaSuccess) return;
    // A cluster configuration the device cannot schedule: fall back to one block per output
    // group (same order of operations, so the same bits).
    (void)cudaGetLastError();
    cluster_failed = true;
    run_decode<BF16, VEC>(a, early, stream);
    return;
  }
  FT_CUDA_CHECK((launch_decode<BF16, VEC, false>(a, threads, smem, early, stream)));
}

}  // namespace

size_t linear_f32_workspace_floats(const LinearF32& L, int64_t rows) {
  if (rows <= kDecodeRows || L.in <= kSeg * kSegsPerBlock) return 0;
  const int64_t blocks = (L.in + kSeg * kSegsPerBlock - 1) / (kSeg * kSegsPerBlock);
  return static_cast<size_t>(blocks * rows * L.out);
}

void linear_f32(const LinearF32& L, const float* x, int64_t ld_x, int64_t rows, float* y, int64_t ld_y,
                cudaStream_t stream, LinearStore store, float* workspace, size_t workspace_floats) {
  const bool accumulate = store == LinearStore::Accumulate;
  if (L.out <= 0 || L.in <= 0 || !L.w || rows < 0 || (rows > 1 && (ld_x < L.in || ld_y < L.out)))
    throw Error("linear_f32: bad shape (" + std::to_string(L.out) + "×" + std::to_string(L.in) + ", rows " +
                std::to_string(rows) + ", ld_x " + std::to_string(ld_x) + ", ld_y " + std::to_string(ld_y) + ")");
  if (rows == 0) return;
  const int segs = static_cast<int>((L.in + kSeg - 1) / kSeg);
  const bool x_vec = ld_x % 4 == 0 && aligned(x, 16);
  const bool w_vec = L.in % 4 == 0 && aligned(L.w, L.w_bf16 ? 8 : 16);
  if (rows <= kDecodeRows) {
    DecodeArgs a{};
    a.w = L.w;
    a.bias = L.bias;
    a.accumulate = accumulate;
    a.x = x;
    a.ld_x = ld_x;
    a.rows = static_cast<int>(rows);
    a.y = y;
    a.ld_y = ld_y;
    a.out = L.out;
    a.in = L.in;
    a.segs = segs;
    a.blocks = (segs + kSegsPerBlock - 1) / kSegsPerBlock;
    // The 16-byte weight loads of a full segment also need 16-byte aligned bf16 rows.
    const bool vec = x_vec && w_vec && (!L.w_bf16 || (L.in % 8 == 0 && aligned(L.w, 16)));
    const bool early = may_start_early(stream, chain_programmatic());
    if (L.w_bf16) vec ? run_decode<true, true>(a, early, stream) : run_decode<true, false>(a, early, stream);
    else vec ? run_decode<false, true>(a, early, stream) : run_decode<false, false>(a, early, stream);
    return;
  }
  TiledArgs a{L.w, L.bias, accumulate, x, ld_x, rows, y, ld_y, L.out, L.in, segs, nullptr};
  const int64_t gy = (rows + kTile - 1) / kTile;
  if (gy > 65535) throw Error("linear_f32: too many rows (" + std::to_string(rows) + ")");
  const int64_t gx = (L.out + kTile - 1) / kTile;
  const int blocks = (segs + kSegsPerBlock - 1) / kSegsPerBlock;
  // Split K where the tiles would leave most SMs idle and the caller lent room for the block sums.
  const bool split = blocks > 1 && workspace && workspace_floats >= linear_f32_workspace_floats(L, rows) &&
                     gx * gy < 2 * static_cast<int64_t>(lin::current_device_limits().sm_count);
  if (split) a.part = workspace;
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy), split ? static_cast<unsigned>(blocks) : 1u);
  const bool vec = x_vec && w_vec;
  if (L.w_bf16) {
    if (vec) launch_chained(linear_f32_tiled_kernel<true, true>, grid, 256, 0, stream, a);
    else launch_chained(linear_f32_tiled_kernel<true, false>, grid, 256, 0, stream, a);
  } else {
    if (vec) launch_chained(linear_f32_tiled_kernel<false, true>, grid, 256, 0, stream, a);
    else launch_chained(linear_f32_tiled_kernel<false, false>, grid, 256, 0, stream, a);
  }
  FT_CUDA_CHECK_LAUNCH();
  if (split) {
    launch_chained(linear_f32_fold_kernel, static_cast<unsigned>((rows * L.out + 255) / 256), 256, 0, stream, a, blocks);
    FT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace ft::cuda
