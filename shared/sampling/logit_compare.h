#pragma once
// Comparing two next-token logit rows: what the fixture checker and the tier agreement panel
// measure. Plain functions over host rows; double accumulation.
#include <cstdint>

namespace ft {

// The row's margin between its two largest logits, over the row's RMS: how far a row is from a
// top-1 tie in units of its own scale (a flip needs an error of about this size).
double top2_gap_over_rms(const float* row, int64_t n);

// Below this gap / rms a top-1 disagreement of a tensor-core backend (fp16/bf16 operands, rel L2
// up to 3e-3) counts as a near tie: a flip needs an error of the gap's size, about 8× the
// tolerated rel L2. The fixture checker's rule for --backend cuda.
constexpr double kTensorCoreNearTieGap = 8 * 3e-3;

// KL(softmax(a) ‖ softmax(b)) in nats, and whether the two rows' top-1 agree (first maximum).
struct LogitAgreement {
  double kl = 0;
  bool same_top1 = false;
};
LogitAgreement compare_logits(const float* a, const float* b, int64_t n);

}  // namespace ft
