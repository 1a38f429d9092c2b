#pragma once
// A second stream for launches of a step that do not depend on the main stream's latest ones:
// the shared expert beside the router and the routed experts, KDA's two low-rank gate
// projections beside its convolution. At batch 1 each of those kernels fills a few SMs for a few
// microseconds, so running them beside the main chain takes their latency off the step's
// critical path. Only the schedule changes: every op computes what it did on one stream, so the
// bits are the same (CudaEngineBranches.* tests it).
//
// fork(main) makes the side stream wait for everything enqueued on `main` so far and returns it;
// point() marks what the side stream has enqueued so far; wait(main, p) makes `main` wait for
// it. Under stream capture the side stream joins the capture at fork() and its launches become a
// parallel branch of the graph; every branch must be waited for before the capture ends.
#include <cuda_runtime.h>

#include <array>

namespace ft::cuda {

class SideStream {
 public:
  SideStream();
  ~SideStream();
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;

  struct Point {
    cudaEvent_t ev = nullptr;
  };

  cudaStream_t fork(cudaStream_t main);
  Point point();
  void wait(cudaStream_t main, Point p);

 private:
  cudaStream_t side_ = nullptr;
  cudaEvent_t fork_ = nullptr;
  // Marks in flight at once: a site's mix (awaited at its output) and a sublayer's two gates or
  // its shared expert — at most three before all are awaited — so a ring of eight is never
  // rewritten while still awaited.
  std::array<cudaEvent_t, 8> marks_{};
  unsigned next_ = 0;
};

}  // namespace ft::cuda
