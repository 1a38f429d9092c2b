#include "tests/cuda/support/gpu_test.h"

#include "gpu-worker/backends/cuda/core/device.h"

namespace ft::test {

bool have_gpu() {
  static const bool have = [] {
    if (cuda::device_count() == 0) return false;
    cuda::use_device(0);
    return true;
  }();
  return have;
}

}  // namespace ft::test
