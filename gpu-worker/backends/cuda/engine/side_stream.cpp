#include "gpu-worker/backends/cuda/engine/side_stream.h"

#include "gpu-worker/backends/cuda/core/cuda_check.h"

namespace ft::cuda {

SideStream::SideStream() {
  FT_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
  FT_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  for (cudaEvent_t& e : marks_) FT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

SideStream::~SideStream() {
  if (side_) cudaStreamSynchronize(side_);
  for (cudaEvent_t e : marks_)
    if (e) cudaEventDestroy(e);
  if (fork_) cudaEventDestroy(fork_);
  if (side_) cudaStreamDestroy(side_);
}

cudaStream_t SideStream::fork(cudaStream_t main) {
  FT_CUDA_CHECK(cudaEventRecord(fork_, main));
  FT_CUDA_CHECK(cudaStreamWaitEvent(side_, fork_, 0));
  return side_;
}

SideStream::Point SideStream::point() {
  const Point p{marks_[next_++ % marks_.size()]};
  FT_CUDA_CHECK(cudaEventRecord(p.ev, side_));
  return p;
}

void SideStream::wait(cudaStream_t main, Point p) { FT_CUDA_CHECK(cudaStreamWaitEvent(main, p.ev, 0)); }

}  // namespace ft::cuda
