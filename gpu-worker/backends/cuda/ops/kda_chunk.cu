// Host side of the chunked KDA prefill: the chunking, the workspace and the two launches
// (kda_chunk.cuh describes the algorithm).
#include <algorithm>

#include "gpu-worker/backends/cuda/ops/kda.h"
#include "gpu-worker/backends/cuda/ops/kda_chunk.cuh"
#include "gpu-worker/backends/cuda/ops/kda_common.cuh"

namespace ft::cuda {

using namespace kda_detail;

static_assert(kKdaChunk == kChunk);

KdaChunking kda_chunking(int64_t t0, int64_t n) {
  if (n <= 0) return {};
  const int64_t first = std::min<int64_t>(n, kKdaChunk - t0 % kKdaChunk);
  return {first, 1 + (n - first + kKdaChunk - 1) / kKdaChunk};
}

size_t kda_chunked_prefill_workspace_bytes(int64_t t0, int64_t n, const KdaShape& shape) {
  const int64_t chunks = std::max<int64_t>(kda_chunking(t0, n).count, 1);
  return static_cast<size_t>(chunks * shape.heads * shape.head_dim) * sizeof(float);
}

void kda_chunked_prefill(float* state, int64_t t0, int64_t n, float* qkv, int64_t ld_qkv, float* g, int64_t ld_g,
                         const float* beta, int64_t ld_beta, const KdaShape& shape, float* o, int64_t ld_o,
                         void* workspace, cudaStream_t stream) {
  const char* fn = "kda_chunked_prefill";
  check_shape(shape, fn);
  const int64_t Q = shape.width();
  require(t0 >= 0 && n >= 0, fn, "negative position or length");
  require(ld_qkv >= 3 * Q && ld_g >= Q && ld_o >= Q && ld_beta >= shape.heads, fn, "row strides too small");
  require(ld_qkv % 4 == 0 && ld_g % 4 == 0 && ld_o % 4 == 0, fn,
          "row strides of qkv, g and o must be multiples of 4 floats");
  require(aligned16(state) && aligned16(qkv) && aligned16(g) && aligned16(o) && aligned16(workspace), fn,
          "state, qkv, g, o and the workspace must be 16-byte aligned");
  require(shape.heads <= 65535, fn, "too many heads");
  require(ld_qkv < (int64_t{1} << 24) && ld_g < (int64_t{1} << 24) && ld_o < (int64_t{1} << 24), fn,
          "row strides must stay below 2^24 floats");
  if (n == 0) return;
  const KdaChunking ch = kda_chunking(t0, n);
  require(ch.count < (int64_t{1} << 31), fn, "too many chunks");
  ChunkArgs a;
  a.qkv = qkv;
  a.ld_qkv = ld_qkv;
  a.g = g;
  a.ld_g = ld_g;
  a.beta = beta;
  a.ld_beta = ld_beta;
  a.o = o;
  a.ld_o = ld_o;
  a.state = state;
  a.decay = static_cast<float*>(workspace);
  a.heads = shape.heads;
  a.n = n;
  a.first = ch.first;
  a.chunks = ch.count;
  launch_chunk_intra(a, shape.head_dim, stream);
  launch_chunk_scan(a, shape.head_dim, stream);
}

}  // namespace ft::cuda
