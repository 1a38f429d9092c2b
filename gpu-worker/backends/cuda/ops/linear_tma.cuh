#pragma once
// PTX wrappers of Hopper's tensor memory accelerator (TMA) and the shared-memory barriers its
// copies complete on, for the wgmma linear kernel (sm_90a only; guard with FT_HAVE_WGMMA).
// One thread issues a whole 128-row × 64-half tile per operand and stage; the copy engine writes
// it in the 128-byte swizzled layout of linear_layout.h (CU_TENSOR_MAP_SWIZZLE_128B on a
// 1024-byte-aligned destination) and zero-fills what lies outside the tensor — the same bytes the
// per-thread cp.async copies write, without their per-thread address arithmetic.
#include <cuda.h>

#include <cstdint>

#include "gpu-worker/backends/cuda/ops/linear_wgmma.cuh"

namespace ft::cuda::lin {

// The two operands of a dense problem as 3-D tensors (k, row, group) of fp16.
struct TmaMaps {
  CUtensorMap a;  // activations: (in8, rows, batch)
  CUtensorMap b;  // weights: (in8, out, batch)
};

#if FT_HAVE_WGMMA
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Barrier initialisation made visible to the copy engine (the async proxy).
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// One arrival that also announces the bytes the phase's copies will deliver.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Until the phase of the given parity has completed (its arrival and all its bytes landed).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Tile (k, row, group) of `map` into shared memory at dst, completing on `bar`.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int k, int row, int group,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(k), "r"(row), "r"(group), "r"(bar)
      : "memory");
}
// The same with an L2 policy (weights: l2_evict_first_policy).
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int k, int row, int group,
                                            uint32_t bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint "
      "[%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(k), "r"(row), "r"(group), "r"(bar), "l"(policy)
      : "memory");
}
// A tensor map in global memory written through the generic proxy (cudaMemcpy) made visible to
// the copy engine's reads of it: once per map before its first use in a grid.
__device__ __forceinline__ void tensormap_acquire(const CUtensorMap* map) {
  asm volatile("fence.proxy.tensormap::generic.acquire.sys [%0], 128;\n" ::"l"(reinterpret_cast<uint64_t>(map))
               : "memory");
}
// A plain arrival (one of the barrier's expected arrivals, no bytes).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Barrier 1 among the first N threads of the block (the consumers; barrier 0 is __syncthreads).
template <int N>
__device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(N) : "memory");
}
#endif

}  // namespace ft::cuda::lin
