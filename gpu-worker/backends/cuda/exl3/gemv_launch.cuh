#pragma once
// launch_gemv<K>: picks the (codebook, row groups, split) instantiation of exl3_gemv_kernel, or
// the prefill kernel exl3_gemm_kernel.
#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/exl3/gemm_kernel.cuh"

namespace ft::cuda::exl3dev {

template <int K, int CB, int NGMAX, bool SPLIT>
void launch_gemv_one(const GemvLaunch& l, const LinearArgs& a, cudaStream_t stream) {
  constexpr size_t smem = gemv_smem_bytes<K, NGMAX>();
  // Programmatic: starts once the kernel before it lets it (griddepcontrol.launch_dependents, or
  // its end); WarpPair::run waits for that kernel's results before reading activations.
  launch_maybe_early(l.programmatic, exl3_gemv_kernel<K, CB, NGMAX, SPLIT>, dim3(static_cast<unsigned>(l.grid)),
                     dim3(kWarps * 32), smem, stream, a);
}

template <int K, int CB>
void launch_gemv_cb(const GemvLaunch& l, const LinearArgs& a, cudaStream_t stream) {
  if (l.gemm) {
    launch_gemm_one<K, CB>(a, l.wide, stream);
  } else if (l.ngmax == 1) {
    if (l.split) launch_gemv_one<K, CB, 1, true>(l, a, stream);
    else launch_gemv_one<K, CB, 1, false>(l, a, stream);
  } else {
    if (l.split) launch_gemv_one<K, CB, 4, true>(l, a, stream);
    else launch_gemv_one<K, CB, 4, false>(l, a, stream);
  }
}

template <int K>
void launch_gemv(int cb, const GemvLaunch& l, const LinearArgs& a, cudaStream_t stream) {
  switch (cb) {
    case 0: return launch_gemv_cb<K, 0>(l, a, stream);
    case 1: return launch_gemv_cb<K, 1>(l, a, stream);
    default: return launch_gemv_cb<K, 2>(l, a, stream);
  }
}

}  // namespace ft::cuda::exl3dev
