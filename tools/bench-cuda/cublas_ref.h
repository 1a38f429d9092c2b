#pragma once
// The cuBLAS reference rate for the GPU benchmarks, loaded at run time (dlopen of
// "libcublasLt.so.13", or the path in $FLASHTIER_CUBLASLT) so the benchmarks build and run where
// cuBLAS is absent: callers print "n/a" then.
#include <cstdint>
#include <string>

namespace ft::bench {

// Whether cuBLASLt could be loaded and initialised on the current device; `why` (optional)
// receives the reason when not.
bool cublaslt_available(std::string* why = nullptr);

// Median milliseconds over `reps` timed runs (after warm-up) of the dense GEMM
//   Y[M, N] = X[M, K] · W[N, K]ᵀ    (all row-major: X rows are K apart, W rows K apart, Y rows N apart)
// — the layout of an nn.Linear over M rows, which is what the fp16 linear kernels compute — in
// bf16 in and out with fp32 accumulation (CUBLAS_COMPUTE_32F), on random bf16 data, with the
// heuristic's first algorithm and a 32 MiB workspace. Column-major, that is cuBLAS's
// "TN" GEMM D[N, M] = Wᵀ·X with m = N, n = M, k = K. Returns −1 when cuBLASLt is unavailable or
// the GEMM fails.
double cublaslt_gemm_ms(int64_t M, int64_t N, int64_t K, int reps);

}  // namespace ft::bench
