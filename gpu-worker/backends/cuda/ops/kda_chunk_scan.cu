// The state-carrying half of the chunked KDA prefill (kda_chunk.cuh). Columns of the state are
// independent in the recurrence (S[:, j] couples only through the key channels), so one block owns
// 32 value columns of one head and walks the chunks in order:
//   V' = U − W·S,   O = Q'·S + P,   S ← D ⊙ S + K̃ᵀ·V'.
// The block keeps its 128×32 slice of S in registers (the update) and in shared memory (the two
// products read it by rows); W, Q' and K̃ of a chunk come through a double buffer filled by
// cp.async one operand ahead. Every sum runs in ascending index order: the bits depend only on the
// chunk's inputs and the incoming state, never on where a call starts or ends.
#include <atomic>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/ops/kda_chunk.cuh"
#include "gpu-worker/backends/cuda/ops/kda_common.cuh"

namespace ft::cuda::kda_detail {

namespace {

template <int DL>
struct ScanCfg {
  static constexpr int JC = DL < 32 ? DL : 32;  // value columns per block
  static constexpr int JQ = JC / 4;
  static constexpr int threads =
      16 * JQ;                         // products: rows tr + 16i (i < 4) × 4 columns; update: DL/16 rows × 4 columns
  static constexpr int NDT = DL / 16;  // state rows per thread in the update
  static constexpr int LDB = DL + 4;   // operand row stride (rows tr…tr+3 of a warp hit distinct banks)
  static constexpr int buf_floats = kChunk * LDB;
  static constexpr size_t smem_bytes = (2 * buf_floats + DL * JC + kChunk * JC) * sizeof(float);
};

// State row of update slot q of thread row tr: groups of four consecutive rows (16-byte loads).
template <int DL>
__device__ __forceinline__ int state_row(int tr, int q) {
  constexpr int G = DL / 16 < 4 ? DL / 16 : 4;
  return (q / 4) * 64 + tr * G + (q % 4);
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Operand k of the walk (chunk k/3; W, Q' or K̃ for k%3 = 0, 1, 2) into buf; rows past the
// chunk are zero.
template <int DL>
__device__ __forceinline__ void fetch_operand(const ChunkArgs& a, int64_t h, int64_t k, float* buf) {
  using Cfg = ScanCfg<DL>;
  int64_t row0;
  int len;
  chunk_rows(a, k / 3, row0, len);
  const int kind = static_cast<int>(k % 3);
  const float* base;
  int64_t ld;
  if (kind == 0) {
    base = a.g + row0 * a.ld_g + h * DL;
    ld = a.ld_g;
  } else {
    base = a.qkv + row0 * a.ld_qkv + (kind == 2 ? a.heads * DL : 0) + h * DL;
    ld = a.ld_qkv;
  }
  for (int idx = threadIdx.x; idx < kChunk * (DL / 4); idx += Cfg::threads) {
    const int r = idx / (DL / 4), c4 = 4 * (idx % (DL / 4));
    float* dst = buf + r * Cfg::LDB + c4;
    if (r < len)
      cp_async16(dst, base + r * ld + c4);
    else
      *reinterpret_cast<float4*>(dst) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  cp_async_commit();
}

// acc[i][c] = Σ_d X[tr + 16i][d] · S[d][4tj + c], d ascending (X = W or Q' in buf).
template <int DL>
__device__ __forceinline__ void rows_times_state(const float* buf, const float* Ssm, int tr, int tj,
                                                 float (&acc)[4][4]) {
  using Cfg = ScanCfg<DL>;
#pragma unroll 4
  for (int d = 0; d < DL; d += 4) {
    float4 x[4], s[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) x[i] = *reinterpret_cast<const float4*>(buf + (tr + 16 * i) * Cfg::LDB + d);
#pragma unroll
    for (int m = 0; m < 4; ++m) s[m] = *reinterpret_cast<const float4*>(Ssm + (d + m) * Cfg::JC + 4 * tj);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float xm[4] = {x[i].x, x[i].y, x[i].z, x[i].w};
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        acc[i][0] = fmaf(xm[m], s[m].x, acc[i][0]);
        acc[i][1] = fmaf(xm[m], s[m].y, acc[i][1]);
        acc[i][2] = fmaf(xm[m], s[m].z, acc[i][2]);
        acc[i][3] = fmaf(xm[m], s[m].w, acc[i][3]);
      }
    }
  }
}

// kt[q] = K̃[r][state_row(tr, q)].
template <int DL>
__device__ __forceinline__ void load_ktilde(const float* row, int tr, float (&kt)[ScanCfg<DL>::NDT]) {
  constexpr int NDT = ScanCfg<DL>::NDT;
  if constexpr (NDT >= 4) {
#pragma unroll
    for (int g4 = 0; g4 < NDT / 4; ++g4) {
      const float4 v = *reinterpret_cast<const float4*>(row + g4 * 64 + 4 * tr);
      kt[4 * g4] = v.x;
      kt[4 * g4 + 1] = v.y;
      kt[4 * g4 + 2] = v.z;
      kt[4 * g4 + 3] = v.w;
    }
  } else if constexpr (NDT == 2) {
    const float2 v = *reinterpret_cast<const float2*>(row + 2 * tr);
    kt[0] = v.x;
    kt[1] = v.y;
  } else {
    kt[0] = row[tr];
  }
}

template <int DL>
__global__ __launch_bounds__(ScanCfg<DL>::threads) void chunk_scan_kernel(ChunkArgs a) {
  using Cfg = ScanCfg<DL>;
  constexpr int JC = Cfg::JC, NDT = Cfg::NDT;
  extern __shared__ float4 smem4[];
  float* const sm = reinterpret_cast<float*>(smem4);
  float* const Ssm = sm + 2 * Cfg::buf_floats;  // [DL][JC]
  float* const Vsm = Ssm + DL * JC;             // [64][JC]: V' of the chunk
  const int64_t h = blockIdx.y;
  const int j0 = blockIdx.x * JC;
  const int tj = threadIdx.x % Cfg::JQ, tr = threadIdx.x / Cfg::JQ;
  const int64_t Q = a.heads * DL;
  auto buffer = [&](int64_t k) { return sm + (k & 1) * Cfg::buf_floats; };

  float* const Sg = a.state + h * DL * DL + j0 + 4 * tj;
  float s[NDT][4];
#pragma unroll
  for (int q = 0; q < NDT; ++q) {
    const int d = state_row<DL>(tr, q);
    const float4 v = *reinterpret_cast<const float4*>(Sg + d * DL);
    s[q][0] = v.x, s[q][1] = v.y, s[q][2] = v.z, s[q][3] = v.w;
    *reinterpret_cast<float4*>(Ssm + d * JC + 4 * tj) = v;
  }
  fetch_operand<DL>(a, h, 0, buffer(0));

  for (int64_t c = 0; c < a.chunks; ++c) {
    int64_t row0;
    int len;
    chunk_rows(a, c, row0, len);
    const int64_t k0 = 3 * c;
    const int64_t col = h * DL + j0 + 4 * tj;

    // V' = U − W·S (W in buffer(k0)).
    cp_async_wait_all();
    __syncthreads();
    fetch_operand<DL>(a, h, k0 + 1, buffer(k0 + 1));
    float4 u[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = tr + 16 * i;
      u[i] = r < len ? *reinterpret_cast<const float4*>(a.qkv + (row0 + r) * a.ld_qkv + 2 * Q + col)
                     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    float acc[4][4] = {};
    rows_times_state<DL>(buffer(k0), Ssm, tr, tj, acc);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      *reinterpret_cast<float4*>(Vsm + (tr + 16 * i) * JC + 4 * tj) =
          make_float4(u[i].x - acc[i][0], u[i].y - acc[i][1], u[i].z - acc[i][2], u[i].w - acc[i][3]);

    // O = Q'·S + P (Q' in buffer(k0 + 1); P in o, overwritten by O).
    cp_async_wait_all();
    __syncthreads();
    fetch_operand<DL>(a, h, k0 + 2, buffer(k0 + 2));
    float4 pv[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = tr + 16 * i;
      pv[i] = r < len ? *reinterpret_cast<const float4*>(a.o + (row0 + r) * a.ld_o + col)
                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    float dec[NDT];
#pragma unroll
    for (int q = 0; q < NDT; ++q) dec[q] = a.decay[(c * a.heads + h) * DL + state_row<DL>(tr, q)];
    float acc2[4][4] = {};
    rows_times_state<DL>(buffer(k0 + 1), Ssm, tr, tj, acc2);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = tr + 16 * i;
      if (r < len)
        *reinterpret_cast<float4*>(a.o + (row0 + r) * a.ld_o + col) =
            make_float4(acc2[i][0] + pv[i].x, acc2[i][1] + pv[i].y, acc2[i][2] + pv[i].z, acc2[i][3] + pv[i].w);
    }

    // S ← D ⊙ S + K̃ᵀ·V' (K̃ in buffer(k0 + 2)). Every thread is past both products.
    cp_async_wait_all();
    __syncthreads();
    if (c + 1 < a.chunks) fetch_operand<DL>(a, h, k0 + 3, buffer(k0 + 3));
#pragma unroll
    for (int q = 0; q < NDT; ++q)
#pragma unroll
      for (int m = 0; m < 4; ++m) s[q][m] *= dec[q];
    const float* const kt_rows = buffer(k0 + 2);
#pragma unroll 4
    for (int r = 0; r < kChunk; ++r) {
      const float4 v = *reinterpret_cast<const float4*>(Vsm + r * JC + 4 * tj);
      float kt[NDT];
      load_ktilde<DL>(kt_rows + r * Cfg::LDB, tr, kt);
#pragma unroll
      for (int q = 0; q < NDT; ++q) {
        s[q][0] = fmaf(kt[q], v.x, s[q][0]);
        s[q][1] = fmaf(kt[q], v.y, s[q][1]);
        s[q][2] = fmaf(kt[q], v.z, s[q][2]);
        s[q][3] = fmaf(kt[q], v.w, s[q][3]);
      }
    }
#pragma unroll
    for (int q = 0; q < NDT; ++q)
      *reinterpret_cast<float4*>(Ssm + state_row<DL>(tr, q) * JC + 4 * tj) =
          make_float4(s[q][0], s[q][1], s[q][2], s[q][3]);
  }

#pragma unroll
  for (int q = 0; q < NDT; ++q)
    *reinterpret_cast<float4*>(Sg + state_row<DL>(tr, q) * DL) = make_float4(s[q][0], s[q][1], s[q][2], s[q][3]);
}

}  // namespace

void launch_chunk_scan(const ChunkArgs& a, int64_t head_dim, cudaStream_t stream) {
  dispatch_head_dim(head_dim, [&](auto dl) {
    constexpr int DL = decltype(dl)::value;
    using Cfg = ScanCfg<DL>;
    // The shared-memory opt-in once per device (not per launch: it is no stream operation and
    // stays out of captured graphs).
    static std::atomic<uint64_t> configured{0};
    int device = 0;
    FT_CUDA_CHECK(cudaGetDevice(&device));
    const uint64_t bit = uint64_t{1} << (device & 63);
    if (!(configured.load() & bit)) {
      FT_CUDA_CHECK(cudaFuncSetAttribute(chunk_scan_kernel<DL>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(Cfg::smem_bytes)));
      configured.fetch_or(bit);
    }
    const dim3 grid(DL / Cfg::JC, static_cast<unsigned>(a.heads));
    chunk_scan_kernel<DL><<<grid, Cfg::threads, Cfg::smem_bytes, stream>>>(a);
  });
  FT_CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda::kda_detail
