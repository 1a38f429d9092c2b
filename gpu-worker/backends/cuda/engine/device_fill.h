#pragma once
// Pseudo-random fills of device memory (a counter hash, no host copy): the weights of synthetic
// benchmark models, which are too large to stage on the host.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ft::cuda {

// dst[i] = fp16((u_i·2 − 1)·amp), u_i uniform in [0, 1) from (seed, i); rows of `cols` values
// padded with zeros to `ld` columns.
void fill_uniform_f16(__half* dst, int64_t rows, int64_t cols, int64_t ld, float amp, uint64_t seed,
                      cudaStream_t stream);
void fill_uniform_bf16(uint16_t* dst, int64_t n, float amp, uint64_t seed, cudaStream_t stream);
void fill_uniform_f32(float* dst, int64_t n, float amp, uint64_t seed, cudaStream_t stream);

}  // namespace ft::cuda
