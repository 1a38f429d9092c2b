// Arbitrary bytes as a .safetensors file (header length, JSON header, data offsets): opening it
// must either give tensors that lie inside the file or throw ft::Error naming the problem.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "shared/core/error.h"
#include "shared/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd_create("fuzz.safetensors", MFD_CLOEXEC);
  if (fd < 0 || write(fd, data, size) != static_cast<ssize_t>(size)) std::abort();
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    ft::SafetensorsFile f(path);
    for (const auto& [name, t] : f.tensors()) {
      // Every tensor's bytes are inside the file and match dtype x shape.
      if (t.nbytes != static_cast<size_t>(t.numel()) * ft::dtype_size(t.dtype)) std::abort();
      volatile uint8_t sink = 0;
      if (t.nbytes > 0) sink = sink + t.data[0] + t.data[t.nbytes - 1];
    }
  } catch (const ft::Error&) {
  }
  close(fd);
  return 0;
}
