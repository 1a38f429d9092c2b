#include "tests/exl3/golden.h"

#include "shared/model/tensor_convert.h"

namespace ft::exl3::test {

Exl3Linear golden_linear(const GoldenCase& c) {
  const TensorStore& st = golden_store();
  const TensorInfo& tr = st.get(c.prefix() + ".trellis");
  Exl3Linear q;
  q.name = c.prefix();
  q.K = c.K;
  q.codebook = c.cb;
  q.in_p = tr.shape[0] * 16;
  q.out_p = tr.shape[1] * 16;
  q.trellis = tr.data;
  q.suh = to_f32(st.get(c.prefix() + ".suh"));
  q.svh = to_f32(st.get(c.prefix() + ".svh"));
  return q;
}

}  // namespace ft::exl3::test
