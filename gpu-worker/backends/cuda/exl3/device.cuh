#pragma once
// Device building blocks every EXL3 kernel here shares (internal header, nvcc only): the codebooks
// (exl3-format §5, the GPU formulas the spec calls canonical), where a lane finds the bits of its
// eight weights in a staged packed step (shared/exl3/packed.h), the 128-point Hadamard on four
// values per lane in hadamard.cpp's butterfly order, the fp16 activation rule of to_f16_rows, the
// permuted activation layout and the mma/cp.async wrappers. Keeping them in one place is what lets
// the skinny, tiled and grouped kernels produce the same bits.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu-worker/backends/cuda/core/programmatic.cuh"

namespace ft::cuda::exl3dev {

constexpr float kHadScale = 0.08838834764831845f;  // 1/sqrt(128), as shared/exl3/hadamard.h

// ---------------------------------------------------------------------------------------------
// Codebooks. Codebook ids as ft::exl3::Codebook: 0 = 3INST, 1 = MCG, 2 = MUL1.

// Two codebook values (states s0, s1, low 16 bits significant) as one half2 (s0 in the low half).
template <int CB>
__device__ __forceinline__ uint32_t decode_pair(uint32_t s0, uint32_t s1) {
  if constexpr (CB == 2) {
    // s = byte sum of s·mult; fp16 bits 0x6400 + s are exactly 1024 + s, and one fp16 fma with
    // 0x1EEE, 0xC931 rounds (1774·s − 905216)/2^18 once (spec §5.3).
    const uint32_t d0 = __dp4a(s0 * 0x83DCD12Du, 0x01010101u, 0x6400u);
    const uint32_t d1 = __dp4a(s1 * 0x83DCD12Du, 0x01010101u, 0x6400u);
    const uint32_t h = __byte_perm(d0, d1, 0x5410);
    const __half2 r = __hfma2(*reinterpret_cast<const __half2*>(&h), __half2half2(__ushort_as_half(0x1EEE)),
                              __half2half2(__ushort_as_half(0xC931)));
    return *reinterpret_cast<const uint32_t*>(&r);
  } else {
    uint32_t x0, x1;
    if constexpr (CB == 0) {
      x0 = s0 * 89226354u + 64248484u;
      x1 = s1 * 89226354u + 64248484u;
    } else {
      x0 = s0 * 0xCBAC1FEDu;
      x1 = s1 * 0xCBAC1FEDu;
    }
    // Both halves are normal fp16 in [0.125, 2): their sum rounded once (__hadd) is the value.
    x0 = (x0 & 0x8FFF8FFFu) ^ 0x3B603B60u;
    x1 = (x1 & 0x8FFF8FFFu) ^ 0x3B603B60u;
    const __half2 h0 = *reinterpret_cast<const __half2*>(&x0);
    const __half2 h1 = *reinterpret_cast<const __half2*>(&x1);
    const __half2 r = __hadd2(__lows2half2(h0, h1), __highs2half2(h0, h1));
    return *reinterpret_cast<const uint32_t*>(&r);
  }
}

// ---------------------------------------------------------------------------------------------
// Where a lane's bits are. Lane l of a warp decodes weights t = 8l … 8l+7 of a 16×16 tile, which
// are its mma.m16n8k16 operand fragment (spec §4.7). Those weights' states are the 16-bit windows
// ending at stream bits (t+1)K − 1: 7K + 16 bits in all. They are split into groups of G weights
// whose bits lie in two consecutive 32-bit words (hi = U[j0], lo = U[j0+1]); N = (hi:lo) >> s_last
// puts the group's last state at bits 0…15 of N, the others K, 2K, … bits higher, so after one
// lane-dependent funnel shift every extraction uses compile-time shifts.
template <int K>
struct LaneBits {
  static constexpr int G = K <= 4 ? 8 : (K == 7 ? 2 : 4);  // widest group that fits two words for every lane
  static constexpr int NGR = 8 / G;
  static constexpr bool WIDE = (G - 1) * K + 16 > 32;  // the group needs bits above N's low word
  static constexpr int kStepDwords = 16 * K;            // one (pair, tile-row) step of the packed form
};

// Dword offset, inside a step of the packed form (packed.h), of word j of tile h of the pair.
// Stages in shared memory are byte copies of it. A bank-conflict swizzle of the staged copy was
// tried and removed: a cp.async whose 16-byte chunks do not keep their order and offset between a
// global 128-byte line and shared memory is split into short L2 requests (Nsight Compute on the
// grouped MoE kernel: 1.5 sectors per system-memory request against the read probe's 4), and
// over PCIe short reads cost a third of the link; the conflicts it removed cost nothing
// measurable (docs/perf.md "Zero-copy: where the PCIe bandwidth goes").
template <int K>
__host__ __device__ constexpr int packed_word(int j, int h) {
  return (j % K) * 16 + h * 8 + j / K;
}

// Per-lane constants of the extraction (computed once per kernel).
template <int K>
struct LaneGeom {
  using B = LaneBits<K>;
  uint32_t off[2][B::NGR][2];  // [tile h][group][hi, lo]: dword offsets inside a step
  uint32_t shift[B::NGR];      // s_last per group

  __device__ __forceinline__ void init(int lane) {
#pragma unroll
    for (int g = 0; g < B::NGR; ++g) {
      const int end = (8 * lane + g * B::G + B::G) * K;  // one past the group's last bit
      const int jl = (end - 1) >> 5;                      // word holding that bit
      const int j0 = (jl + 8 * K - 1) % (8 * K);          // the word before it (wraps: tail-biting)
      shift[g] = static_cast<uint32_t>(32 * (jl + 1) - end);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        off[h][g][0] = static_cast<uint32_t>(packed_word<K>(j0, h));
        off[h][g][1] = static_cast<uint32_t>(packed_word<K>(jl, h));
      }
    }
  }
};

// The lane's eight states of tile h from a staged step (dwords), in order u = 0…7.
template <int K>
__device__ __forceinline__ void lane_states(const uint32_t* step, const LaneGeom<K>& geo, int h, uint32_t (&s)[8]) {
  using B = LaneBits<K>;
#pragma unroll
  for (int g = 0; g < B::NGR; ++g) {
    const uint32_t hi = step[geo.off[h][g][0]];
    const uint32_t lo = step[geo.off[h][g][1]];
    const uint32_t n_lo = __funnelshift_r(lo, hi, geo.shift[g]);
    const uint32_t n_hi = B::WIDE ? (hi >> geo.shift[g]) : 0u;
#pragma unroll
    for (int v = 0; v < B::G; ++v) {
      const int o = (B::G - 1 - v) * K;
      uint32_t st;
      if (o == 0) st = n_lo;
      else if (o < 32) st = __funnelshift_r(n_lo, n_hi, o);
      else st = n_hi >> (o - 32);
      s[g * B::G + v] = st & 0xFFFFu;
    }
  }
}

// The lane's A fragment (mma.m16n8k16, A row-major = output columns × inputs) of tile h: weights
// u = 0,1 → a0a1 (column l/4, inputs 2(l%4)+{0,1}), u = 4,5 → a2a3 (column + 8), u = 2,3 → a4a5
// (inputs + 8), u = 6,7 → a6a7.
template <int K, int CB>
__device__ __forceinline__ void lane_fragment(const uint32_t* step, const LaneGeom<K>& geo, int h, uint32_t (&a)[4]) {
  uint32_t s[8];
  lane_states<K>(step, geo, h, s);
  a[0] = decode_pair<CB>(s[0], s[1]);
  a[1] = decode_pair<CB>(s[4], s[5]);
  a[2] = decode_pair<CB>(s[2], s[3]);
  a[3] = decode_pair<CB>(s[6], s[7]);
}

// D += A·B, m16n8k16, fp16 operands, fp32 accumulation.
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm(  // not volatile: only its outputs matter, so the scheduler may move it
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---------------------------------------------------------------------------------------------
// Activations. Inside every 32-input block of a row the fp16 values are stored in the order the
// B fragments want them: lane quad q (= lane % 4) reads 16 contiguous bytes holding inputs
// {2q, 2q+1, 2q+8, 2q+9} of the block's first k16 step, then the same of its second step.
__host__ __device__ constexpr int permuted_pos(int k) {  // k: input index inside its 32-block
  const int sp = k >> 4, kk = k & 15;
  return ((kk & 7) >> 1) * 8 + sp * 4 + (kk >> 3) * 2 + (kk & 1);
}

// e with max·2^e ∈ [2^14, 2^15), exactly as ops/linear_to_f16.cu (to_f16_rows) chooses it.
__device__ __forceinline__ int row_exponent(float m) {
  if (!(m > 0.0f) || !isfinite(m)) return 0;
  int E = 0;
  frexpf(m, &E);
  const int e = 15 - E;
  return e < 126 ? e : 126;
}
__device__ __forceinline__ float pow2(int e) { return __int_as_float((127 + e) << 23); }

// ---------------------------------------------------------------------------------------------
// 128-point Hadamard of one block held by a warp, lane l holding elements 4l … 4l+3, then the
// 1/sqrt(128) scale: the butterflies of hadamard.cpp in the same order with the same operands,
// so the bits equal the CPU's (a + b is commutative; the upper element takes partner − self).
__device__ __forceinline__ void hadamard128_lane4(float (&v)[4], int lane) {
  float a = v[0], b = v[1];
  v[0] = __fadd_rn(a, b), v[1] = __fsub_rn(a, b);
  a = v[2], b = v[3];
  v[2] = __fadd_rn(a, b), v[3] = __fsub_rn(a, b);
  a = v[0], b = v[2];
  v[0] = __fadd_rn(a, b), v[2] = __fsub_rn(a, b);
  a = v[1], b = v[3];
  v[1] = __fadd_rn(a, b), v[3] = __fsub_rn(a, b);
#pragma unroll
  for (int m = 1; m < 32; m <<= 1) {
    const bool upper = (lane & m) != 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float p = __shfl_xor_sync(0xffffffffu, v[i], m);
      v[i] = upper ? __fsub_rn(p, v[i]) : __fadd_rn(v[i], p);
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = __fmul_rn(v[i], kHadScale);
}

// The output value of one column after the Hadamard: (z·Ĥ)·svh·row_scale (+ bias), in this order
// in every kernel (the scale is a power of two, exact unless it under/overflows).
__device__ __forceinline__ float output_value(float zh, float svh, float row_scale, float bias) {
  return __fadd_rn(__fmul_rn(__fmul_rn(zh, svh), row_scale), bias);
}

// ---------------------------------------------------------------------------------------------
// cp.async (sm_80+): 16-byte global → shared copies that bypass L1, in commit groups.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
// Zero-fills the 16 bytes when `valid` is false (no global read happens then).
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0)
               : "memory");
}
// A 4-byte copy through L1 (cp.async's only size below 8), zero-filled when `valid` is false: for
// stages whose words land apart from each other (the wgmma prefill's un-permuted rows).
__device__ __forceinline__ void cp_async4_zfill(void* smem, const void* gmem, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 4 : 0) : "memory");
}
// Dynamic shared memory starts after a kernel's static shared memory, 16-byte aligned. Trellis
// stages must start on a 128-byte boundary: a cp.async whose shared destination is not at the
// same offset inside its 128 bytes as its global source is split into 64-byte L2 requests
// (Nsight Compute on the grouped MoE kernel: 2.0 sectors per system-memory request against the
// read probe's 4), and over PCIe short read requests cost a third of the link. Kernels that
// stage trellis take their dynamic shared memory through smem_align128 and launch with
// kSmemAlignSlack more bytes.
constexpr size_t kSmemAlignSlack = 128;
__device__ __forceinline__ uint32_t* smem_align128(uint32_t* raw) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(raw));
  return raw + ((128u - (s & 127u)) & 127u) / 4;
}

// "memory": no shared-memory access may move across a copy, a commit or a wait.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Programmatic dependent launch: core/programmatic.cuh.
using ft::cuda::grid_dependency_wait;
using ft::cuda::grid_dependents_launch;

__device__ __forceinline__ uint4 ldg_v4(const void* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
// Activations: another kernel's output, which a programmatic dependent may start before it is
// written. The read-only path (ld.global.nc) is only defined for data that stays unchanged for
// the whole kernel, so these load through L2 (coherent), after grid_dependency_wait().
__device__ __forceinline__ uint4 ldcg_v4(const void* p) { return __ldcg(reinterpret_cast<const uint4*>(p)); }

}  // namespace ft::cuda::exl3dev
