// Arbitrary bytes as a .safetensors file holding EXL3 linears (`.trellis`, `.suh`/`.su`,
// `.svh`/`.sv`, `.bias`, codebook markers `.mcg`/`.mul1`): loading every linear it names must
// either give a linear whose sizes agree with each other and whose trellis lies inside the file
// (and then decode to finite-or-not weights without touching memory outside it) or throw
// ft::Error naming the file and tensor.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "shared/core/error.h"
#include "shared/exl3/exl3_linear.h"
#include "shared/exl3/reference.h"
#include "shared/model/safetensors.h"

namespace {

constexpr const char kTrellis[] = ".trellis";

void check(const ft::exl3::Exl3Linear& q, const ft::TensorStore& store) {
  if (q.K < 1 || q.K > 8) std::abort();
  if (q.in_p <= 0 || q.out_p <= 0 || q.in_p % 128 != 0 || q.out_p % 128 != 0) std::abort();
  if (static_cast<int64_t>(q.suh.size()) != q.in_p || static_cast<int64_t>(q.svh.size()) != q.out_p) std::abort();
  if (!q.bias.empty() && static_cast<int64_t>(q.bias.size()) != q.out_p) std::abort();
  const ft::TensorInfo* t = store.find(q.name + kTrellis);
  if (!t || q.trellis != t->data || static_cast<size_t>(q.trellis_bytes()) != t->nbytes) std::abort();
  // Small enough to decode: the reference decode reads exactly the trellis bytes.
  if (q.in_p * q.out_p <= (int64_t{1} << 20)) {
    const auto w = ft::exl3::dense_weight(q, q.out_p, q.in_p);
    if (static_cast<int64_t>(w.size()) != q.in_p * q.out_p) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd_create("fuzz-exl3.safetensors", MFD_CLOEXEC);
  if (fd < 0 || write(fd, data, size) != static_cast<ssize_t>(size)) std::abort();
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    const ft::TensorStore store = ft::TensorStore::open(path);
    for (const std::string& n : store.names()) {
      if (n.size() <= sizeof kTrellis - 1 || n.compare(n.size() - (sizeof kTrellis - 1), std::string::npos, kTrellis) != 0)
        continue;
      const std::string name = n.substr(0, n.size() - (sizeof kTrellis - 1));
      try {
        const ft::exl3::Exl3Linear q = ft::exl3::load_exl3_linear(store, name);
        if (!ft::exl3::is_exl3_linear(store, name)) std::abort();
        check(q, store);
      } catch (const ft::Error&) {
      }
    }
  } catch (const ft::Error&) {
  }
  close(fd);
  return 0;
}
